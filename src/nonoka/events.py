"""What a run reports while it happens: the stream a front end shows or logs.

Events are plain dataclasses; a run hands each one to the caller's ``on_event`` sink,
which may be sync or async. The bridge turns them into protocol events.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nonoka.llm.base import Usage
from nonoka.state.messages import ProviderMetadata, ReasoningPart, ToolCall

__all__ = ("EventSink", "ModelCalled", "ReasoningDelta", "RunEvent", "RunWarning", "TextDelta",
           "ToolCallFinished", "ToolCallRequested")


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Reasoning the model streamed before (or between) its answer's text."""

    text: str


@dataclass(frozen=True)
class ToolCallRequested:
    """The model asked for a call; ``executed_by`` says who will run it."""

    call: ToolCall
    executed_by: Literal["nonoka", "host"]


@dataclass(frozen=True)
class ToolCallFinished:
    call: ToolCall
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class ModelCalled:
    """One model call finished; usage is for this call alone."""

    model: str
    usage: Usage
    reasoning: tuple[ReasoningPart, ...] = ()
    """The call's reasoning as stored, with the provider's metadata (a signature)."""
    provider_metadata: ProviderMetadata | None = None
    """What the provider attached to the answer itself."""
    finish: str | None = None
    """Why the model stopped, as the adapter normalised it (``stop``, ``length``,
    ``tool_calls``, ``content_filter``...); ``None`` for a call that is not the answer (a
    compaction's summary), so a front end can say an answer was cut short."""


@dataclass(frozen=True)
class RunWarning:
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


RunEvent = (TextDelta | ReasoningDelta | ToolCallRequested | ToolCallFinished | ModelCalled
            | RunWarning)
EventSink = Callable[[RunEvent], Awaitable[None] | None]


async def emit(sink: EventSink | None, event: RunEvent) -> None:
    """Deliver an event to a sink that may be sync, async, or absent."""
    if sink is None:
        return
    outcome = sink(event)
    if inspect.isawaitable(outcome):
        await outcome
