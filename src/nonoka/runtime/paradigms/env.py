"""What a paradigm needs from the runner: the agent, the model, persistence, events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nonoka.errors import ModelError
from nonoka.events import EventSink, RunEvent, emit
from nonoka.extensions.base import ExtensionContext, LoopExtension
from nonoka.llm.base import ChatModel
from nonoka.runtime.agent import Agent
from nonoka.runtime.session import Session
from nonoka.state.ledger import RuntimeUsage, Termination
from nonoka.state.messages import ToolCall
from nonoka.state.session_state import SessionStatus
from nonoka.store.base import CheckpointStore


@dataclass
class RunResult:
    """How a run ended. ``pending_tool_calls`` are calls the host must run."""

    success: bool
    session_id: str
    status: SessionStatus
    output: Any = None
    error: str | None = None
    termination: Termination | None = None
    usage: RuntimeUsage = field(default_factory=RuntimeUsage)
    pending_tool_calls: list[ToolCall] = field(default_factory=list)
    pending_approvals: list[ToolCall] = field(default_factory=list)
    retryable: bool = False
    """For a failed run: whether trying again later may help (e.g. a rate-limited model)."""
    failure: ModelError | None = field(default=None, repr=False, compare=False)
    """For a run a model call ended: the error as the provider gave it (status, body,
    ``retry-after``), for a front end to pass on."""
    session: Session | None = field(default=None, repr=False, compare=False)
    """The live session as the run left it (after its last save), for a caller that
    looks further at it without loading it again."""

    @property
    def paused(self) -> bool:
        return self.status == SessionStatus.PAUSED


@dataclass
class LoopEnv:
    """One run's collaborators, handed to a paradigm by the runner."""

    agent: Agent
    store: CheckpointStore
    deps: Any
    on_event: EventSink | None
    save: Callable[[Session], Awaitable[None]]

    @property
    def model(self) -> ChatModel:
        return self.agent.get_model()

    @property
    def extensions(self) -> list[LoopExtension]:
        return list(self.agent.extensions)

    def ext_ctx(self, session: Session, extension: LoopExtension) -> ExtensionContext:
        return ExtensionContext(session.session_id, session.ext(extension.namespace))

    async def emit(self, event: RunEvent) -> None:
        await emit(self.on_event, event)


def result_of(session: Session, output: Any = None, error: str | None = None) -> RunResult:
    """A ``RunResult`` describing the session as it stands."""
    termination = session.runtime.termination
    return RunResult(
        success=session.status == SessionStatus.COMPLETED,
        session_id=session.session_id,
        status=session.status,
        output=output,
        error=error or (termination.detail if termination and termination.reason != "completed"
                        else None),
        termination=termination,
        usage=session.usage,
        session=session,
    )
