"""Conversation entries and the tool-call pairing that crash repair relies on.

A ``MemoryEntry`` is what a session stores; a ``Message`` is what crosses the wire (to a
model, or between a provider and the bridge). An assistant entry lists its tool calls in
``metadata["tool_calls"]``; a tool entry names the call it answers in
``metadata["tool_call_id"]``. A call is complete when both halves exist.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nonoka.resumable import Resumable
from nonoka.tokens import entry_tokens

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One call the model asked for. ``arguments`` is the JSON text the model wrote."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"


class Message(BaseModel):
    """A chat message in the OpenAI-style shape every front end speaks."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class MemoryEntry(BaseModel):
    """One stored conversation entry; immutable once written."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    tokens: int = 0

    @classmethod
    def make(cls, role: Role, content: str, **metadata: Any) -> MemoryEntry:
        """Build an entry with its token estimate filled in."""
        meta = {k: v for k, v in metadata.items() if v is not None}
        extra = sum(len(c.get("arguments", "")) for c in meta.get("tool_calls", []))
        return cls(role=role, content=content, metadata=meta,
                   tokens=entry_tokens(content, extra))

    @classmethod
    def assistant(cls, content: str, tool_calls: Sequence[ToolCall] = ()) -> MemoryEntry:
        calls = [c.model_dump() for c in tool_calls] or None
        return cls.make("assistant", content, tool_calls=calls)

    @classmethod
    def tool_result(
        cls, call: ToolCall, content: str, *, is_error: bool = False, **metadata: Any
    ) -> MemoryEntry:
        return cls.make("tool", content, tool_call_id=call.id, tool_name=call.name,
                        is_error=is_error or None, **metadata)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall.model_validate(c) for c in self.metadata.get("tool_calls") or []]

    @property
    def tool_call_id(self) -> str | None:
        value = self.metadata.get("tool_call_id")
        return str(value) if value is not None else None

    def to_message(self) -> Message:
        return Message(
            role=self.role,
            content=self.content,
            tool_calls=self.tool_calls or None,
            tool_call_id=self.tool_call_id,
        )

    @classmethod
    def from_message(cls, message: Message) -> MemoryEntry:
        if message.role == "assistant":
            return cls.assistant(message.content, message.tool_calls or [])
        return cls.make(message.role, message.content, tool_call_id=message.tool_call_id)


def dangling_tool_calls(entries: Sequence[MemoryEntry]) -> tuple[int | None, list[ToolCall]]:
    """Find the last assistant entry with tool calls and the calls nothing answers yet.

    Returns the entry's index (``None`` when there is none) and its unanswered calls in
    the order the model made them. A conversation that extends the one the last call
    looked at is read only from where that one ended (``nonoka.resumable``).
    """
    items = list(entries)  # one copy in C, then plain list indexing
    resumed = _PAIRING.resume(items)
    start, index, answered = 0, None, set[Any]()
    if resumed is not None:
        (start,), (index, answered) = resumed
    for at in range(len(items) - 1, start - 1, -1):
        if _calls_tools(items[at]):
            index, answered, start = at, set(), at + 1
            break
    if index is not None:
        answered = answered | {e.tool_call_id for e in items[start:]
                               if e.role == "tool"}
    _PAIRING.keep((index, answered), items)
    if index is None:
        return None, []
    return index, [c for c in items[index].tool_calls if c.id not in answered]


def _calls_tools(entry: MemoryEntry) -> bool:
    meta = entry.metadata
    return bool(meta) and entry.role == "assistant" and bool(meta.get("tool_calls"))


_PAIRING: Resumable[tuple[int | None, set[Any]]] = Resumable()
"""The last assistant entry with tool calls, and the ids answered after it, in the
conversation ``dangling_tool_calls`` last read."""


class ToolResult(BaseModel):
    """A result the host sends back for one of its pending tool calls."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    content: str
    is_error: bool = False
