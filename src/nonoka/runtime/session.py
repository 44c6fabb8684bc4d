"""``Session``: the mutable runtime twin of ``SessionState``.

It does the bookkeeping a run needs between two checkpoints — budgets, tool-call
reservations, running time, tool-call intents — and converts to and from the snapshot
with ``to_state()`` / ``Session.from_state()``.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from nonoka.llm.base import Usage
from nonoka.runtime.window import WorkingMemory
from nonoka.state.entries import MemoryEntry
from nonoka.state.frozen import construct, replace
from nonoka.state.ids import validate_session_id
from nonoka.state.ledger import (
    RuntimeLimits,
    RuntimeUsage,
    SessionRuntimeState,
    Termination,
    exceeded_limit,
)
from nonoka.state.messages import ToolCall
from nonoka.state.plan import Plan
from nonoka.state.prefix_memo import ConversationPasses
from nonoka.state.session_state import (
    SCHEMA_VERSION,
    TRACE_LIMIT,
    CompletionContract,
    SessionState,
    SessionStatus,
    StepFailure,
    StepResult,
    StepStatus,
    TraceEvent,
)

INTENTS_NAMESPACE = "nonoka.tool_intents"


class Session:
    """A live session. Not shared between processes: only its snapshot is."""

    def __init__(
        self,
        session_id: str,
        *,
        limits: RuntimeLimits | None = None,
        completion_contract: CompletionContract | None = None,
        passes: ConversationPasses | None = None,
    ) -> None:
        self.session_id = validate_session_id(session_id)
        self.status = SessionStatus.CREATED
        self.revision = 0
        self.memory = WorkingMemory(passes=passes)
        self.current_plan: Plan | None = None
        self.step_statuses: dict[str, StepStatus] = {}
        self.completed_steps: dict[str, StepResult] = {}
        self.failed_steps: dict[str, StepFailure] = {}
        self.completion_contract = completion_contract
        self.extension_state: dict[str, dict[str, Any]] = {}
        now = time.time()
        limits = limits or RuntimeLimits()
        self.runtime = SessionRuntimeState(
            limits=limits,
            started_at=now,
            deadline_at=now + limits.deadline_seconds if limits.deadline_seconds else None,
        )
        self.start_time: float | None = now
        self.end_time: float | None = None
        self.turn_count = 0
        self.step_count = 0
        self.trace: list[TraceEvent] = []
        self.forked_from: str | None = None
        self.fork_point: int | None = None
        self._clock_started = time.monotonic()

    # -- snapshot conversion ------------------------------------------------------------

    @classmethod
    def from_state(cls, state: SessionState, passes: ConversationPasses | None = None
                   ) -> Session:
        """Rebuild a live session; the runtime ledger is restored, never recreated.
        ``passes``: where the process's passes over the conversation stopped last."""
        session = cls(state.session_id)
        session.status = state.status
        session.revision = state.revision
        session.memory = WorkingMemory(state.memory_entries, generation=state.memory_generation,
                                       passes=passes)
        session.current_plan = state.current_plan
        session.step_statuses = dict(state.step_statuses)
        session.completed_steps = dict(state.completed_steps)
        session.failed_steps = dict(state.failed_steps)
        session.completion_contract = state.completion_contract
        session.extension_state = {k: dict(v) for k, v in state.extension_state.items()}
        session.runtime = state.runtime_state
        session.start_time = state.start_time
        session.end_time = state.end_time
        session.turn_count = state.turn_count
        session.step_count = state.step_count
        session.trace = list(state.trace)
        session.forked_from, session.fork_point = state.forked_from, state.fork_point
        return session

    def to_state(self) -> SessionState:
        """Snapshot the session, folding the running time so far into the ledger.

        Every field already holds validated values (``Session`` only takes typed ones), so
        the snapshot is built without revalidating them, and the conversation is shared
        as an ``EntrySnapshot`` rather than copied: a save costs the same at 10 entries
        and at 20,000. The small containers are copied, so later changes to the session
        never reach a snapshot.
        """
        self._fold_clock()
        return construct(SessionState, {
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session_id,
            "status": self.status,
            "revision": self.revision,
            "current_plan": self.current_plan,
            "step_statuses": dict(self.step_statuses),
            "completed_steps": dict(self.completed_steps),
            "failed_steps": dict(self.failed_steps),
            "memory_entries": self.memory.entries,
            "memory_generation": self.memory.generation,
            "runtime_state": self.runtime,
            "completion_contract": self.completion_contract,
            "extension_state": {k: dict(v) for k, v in self.extension_state.items()},
            "start_time": self.start_time,
            "end_time": self.end_time,
            "turn_count": self.turn_count,
            "step_count": self.step_count,
            "trace": self.trace[-TRACE_LIMIT:],
            "forked_from": self.forked_from,
            "fork_point": self.fork_point,
        })

    # -- the ledger ---------------------------------------------------------------------

    @property
    def limits(self) -> RuntimeLimits:
        return self.runtime.limits

    @property
    def usage(self) -> RuntimeUsage:
        self._fold_clock()
        return self.runtime.usage

    def _set_usage(self, **changes: Any) -> None:
        self.runtime = replace(self.runtime, usage=replace(self.runtime.usage, **changes))

    def _fold_clock(self) -> None:
        now = time.monotonic()
        elapsed = now - self._clock_started
        self._clock_started = now
        if self.status == SessionStatus.RUNNING and elapsed > 0:
            self._set_usage(wall_seconds=self.runtime.usage.wall_seconds + elapsed)

    def restart_clock(self) -> None:
        """Start counting running time from now (a new process picked the session up)."""
        self._clock_started = time.monotonic()

    def apply_limits(self, override: RuntimeLimits | None) -> None:
        """Raise or lower limits explicitly; usage so far is kept."""
        if override is None:
            return
        limits = self.runtime.limits.merged(override)
        deadline = self.runtime.deadline_at
        if "deadline_seconds" in override.model_fields_set and limits.deadline_seconds:
            deadline = self.runtime.started_at + limits.deadline_seconds
        self.runtime = self.runtime.model_copy(update={"limits": limits, "deadline_at": deadline})

    def exceeded(self) -> Termination | None:
        """The limit the session has hit, if any (checked before each model call)."""
        return exceeded_limit(self.limits, self.usage, self.runtime.deadline_at, time.time())

    def record_model_call(self, usage: Usage) -> None:
        current = self.runtime.usage
        self._set_usage(
            model_turns=current.model_turns + 1,
            input_tokens=current.input_tokens + usage.input_tokens,
            output_tokens=current.output_tokens + usage.output_tokens,
            cost_usd=current.cost_usd + (usage.cost_usd or 0.0),
            cache_read_tokens=current.cache_read_tokens + usage.cache_read_tokens,
            cache_write_tokens=current.cache_write_tokens + usage.cache_write_tokens,
            reasoning_tokens=current.reasoning_tokens + usage.reasoning_tokens,
        )

    def reserve_tool_call(self) -> Termination | None:
        """Count one tool call, or say which limit forbids it."""
        limit = self.limits.max_tool_calls
        used = self.runtime.usage.tool_calls
        if limit is not None and used >= limit:
            return Termination(reason="limit", limit="max_tool_calls",
                               detail=f"max_tool_calls reached: {used} of {limit} used")
        self._set_usage(tool_calls=used + 1)
        return None

    def replace_memory(self, entries: Iterable[MemoryEntry]) -> None:
        """Make ``entries`` the conversation the model sees (the generation is bumped)."""
        self.memory.replace(entries)
        self.add_trace("history_replaced", f"generation {self.memory.generation}")

    def terminate(self, termination: Termination, status: SessionStatus) -> None:
        self._fold_clock()
        self.status = status
        self.end_time = time.time()
        update: dict[str, Any] = {"termination": termination}
        if status == SessionStatus.CANCELLED:
            update["cancelled_at"] = termination.at
        self.runtime = self.runtime.model_copy(update=update)
        self.add_trace(termination.reason, termination.detail)

    def begin(self) -> None:
        """Mark the session running and clear the previous run's termination."""
        self._fold_clock()
        self.status = SessionStatus.RUNNING
        self.end_time = None
        self.runtime = self.runtime.model_copy(update={"termination": None})

    # -- extension state and intents ----------------------------------------------------

    def ext(self, namespace: str) -> dict[str, Any]:
        """The mutable state dict an extension owns; persisted with the checkpoint."""
        return self.extension_state.setdefault(namespace, {})

    def record_intent(self, call: ToolCall) -> None:
        self.ext(INTENTS_NAMESPACE)[call.id] = {"tool": call.name, "started_at": time.time()}

    def clear_intent(self, call_id: str) -> None:
        self.ext(INTENTS_NAMESPACE).pop(call_id, None)

    def has_intent(self, call_id: str) -> bool:
        return call_id in self.extension_state.get(INTENTS_NAMESPACE, {})

    def add_trace(self, kind: str, detail: str = "") -> None:
        self.trace.append(TraceEvent(kind=kind, detail=detail[:500]))
        if len(self.trace) > TRACE_LIMIT:
            del self.trace[: len(self.trace) - TRACE_LIMIT]
