"""``EntrySnapshot``: a read-only view of a conversation, taken in constant time.

``WorkingMemory`` only ever appends to its list of entries, or replaces the list whole
(compaction), so the first ``n`` items of a list it handed out never change. A snapshot
is that list and ``n``: saving a session does not copy (or revalidate) an entry list
that grows with the conversation (``bench/save_load.py``, "through the runtime").

Internal: this module's layout may change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field

from nonoka.state.messages import (
    FilePart,
    Message,
    ProviderMetadata,
    ReasoningPart,
    Role,
    TextPart,
    ToolCall,
)
from nonoka.state.prefix_memo import PrefixMemo
from nonoka.state.tokens import entry_tokens


class EntrySnapshot(Sequence["MemoryEntry"]):
    """The first ``len(self)`` entries of an append-only list, read-only.

    Compares equal to any sequence of the same entries (a list included); slicing
    returns a new list.
    """

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[MemoryEntry], n: int | None = None) -> None:
        self._items = items
        self._n = len(items) if n is None else n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> MemoryEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[MemoryEntry]: ...

    def __getitem__(self, index: int | slice) -> MemoryEntry | list[MemoryEntry]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step == 1:
                return self._items[start:stop]
            return self._items[:self._n][index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("entry index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[MemoryEntry]:
        return islice(self._items, self._n)

    def __reversed__(self) -> Iterator[MemoryEntry]:
        items = self._items
        return (items[i] for i in range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # compares by content, like a list

    def __repr__(self) -> str:
        return f"EntrySnapshot({list(self)!r})"


class EntryMessages(Sequence["Message"]):
    """A conversation's entries seen as chat messages, each built only when read.

    What ``WorkingMemory.messages`` hands a model: the OpenAI-compatible adapter encodes
    the entries straight to the wire (``nonoka.llm.openai``) and never reads a
    ``Message``, so a turn does not build one model object per entry of a long
    conversation; other models read messages as from a list.
    """

    __slots__ = ("_built", "entries")

    def __init__(self, entries: Sequence[MemoryEntry]) -> None:
        self.entries = entries
        self._built: list[Message] | None = None

    def _messages(self) -> list[Message]:
        if self._built is None:
            self._built = [e.to_message() for e in self.entries]
        return self._built

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return self._messages()[index]
        if self._built is None:
            return self.entries[index].to_message()
        return self._built[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # compares by content, like a list

    def __repr__(self) -> str:
        return f"EntryMessages({self._messages()!r})"


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
        extra += sum(len(r.get("text", "")) for r in meta.get("reasoning", ()))
        files = sum(1 for p in meta.get("parts", ()) if p.get("type") == "file")
        return cls(role=role, content=content, metadata=meta,
                   tokens=entry_tokens(content, extra) + files * FILE_TOKENS)

    @classmethod
    def assistant(cls, content: str, tool_calls: Sequence[ToolCall] = (), *,
                  reasoning: Sequence[ReasoningPart] = (),
                  provider_metadata: ProviderMetadata | None = None,
                  usage: dict[str, Any] | None = None,
                  model: str | None = None) -> MemoryEntry:
        """``usage``: what the model call that wrote this answer spent (its non-zero
        counts), so a branch made before this entry does not count it; ``model``: the
        model that wrote it (a host may switch models within one conversation)."""
        calls = [c.model_dump(exclude_none=True) for c in tool_calls] or None
        return cls.make("assistant", content, tool_calls=calls,
                        reasoning=[r.model_dump(exclude_none=True) for r in reasoning] or None,
                        provider_metadata=provider_metadata or None, usage=usage or None,
                        model=model or None)

    @classmethod
    def tool_result(
        cls, call: ToolCall, content: str, *, is_error: bool = False,
        parts: Sequence[TextPart | FilePart] | None = None, **metadata: Any
    ) -> MemoryEntry:
        return cls.make("tool", content, tool_call_id=call.id, tool_name=call.name,
                        is_error=is_error or None, parts=_dumped(parts), **metadata)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall.model_validate(c) for c in self.metadata.get("tool_calls") or []]

    @property
    def tool_call_id(self) -> str | None:
        value = self.metadata.get("tool_call_id")
        return str(value) if value is not None else None

    @property
    def parts(self) -> list[TextPart | FilePart] | None:
        """The content in order, when it is more than one text (``Message.parts``)."""
        parts = self.metadata.get("parts")
        return None if not parts else [_part(p) for p in parts]

    @property
    def reasoning(self) -> list[ReasoningPart]:
        return [ReasoningPart.model_validate(r) for r in self.metadata.get("reasoning") or []]

    def to_message(self) -> Message:
        meta = self.metadata
        return Message(
            role=self.role,
            content=self.content,
            tool_calls=self.tool_calls or None,
            tool_call_id=self.tool_call_id,
            parts=self.parts,
            reasoning=self.reasoning or None,
            provider_metadata=meta.get("provider_metadata") or None,
        )

    @classmethod
    def from_message(cls, message: Message) -> MemoryEntry:
        if message.role == "assistant":
            return cls.assistant(message.content, message.tool_calls or [],
                                 reasoning=message.reasoning or (),
                                 provider_metadata=message.provider_metadata)
        return cls.make(message.role, message.content, tool_call_id=message.tool_call_id,
                        parts=_dumped(message.parts),
                        provider_metadata=message.provider_metadata or None)


def user_entry(prompt: str | Message) -> MemoryEntry:
    """A user's prompt as an entry: its text, or the message with its files."""
    if isinstance(prompt, Message):
        return MemoryEntry.from_message(prompt)
    return MemoryEntry.make("user", prompt)


FILE_TOKENS = 1_000
"""The estimate a file part adds to its entry (an image, a page of a PDF): providers
count an image as hundreds to a few thousand tokens, by size."""

def _part(data: Any) -> TextPart | FilePart:
    if isinstance(data, dict) and data.get("type") == "text":
        return TextPart.model_validate(data)
    return FilePart.model_validate(data)


def _dumped(parts: Sequence[TextPart | FilePart] | None) -> list[dict[str, Any]] | None:
    return [p.model_dump(exclude_none=True) for p in parts] if parts else None


def dangling_tool_calls(entries: Sequence[MemoryEntry],
                        memo: PrefixMemo[tuple[int | None, set[Any]]] | None = None,
                        ) -> tuple[int | None, list[ToolCall]]:
    """Find the last assistant entry with tool calls and the calls nothing answers yet.

    Returns the entry's index (``None`` when there is none) and its unanswered calls in
    the order the model made them. A conversation that extends the one the last call
    looked at is read only from where that one ended (``nonoka.state.prefix_memo``).
    """
    items = list(entries)  # one copy in C, then plain list indexing
    resumed = memo.resume(items) if memo is not None else None
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
    if memo is not None:
        memo.keep((index, answered), items)
    if index is None:
        return None, []
    return index, [c for c in items[index].tool_calls if c.id not in answered]


def _calls_tools(entry: MemoryEntry) -> bool:
    meta = entry.metadata
    return bool(meta) and entry.role == "assistant" and bool(meta.get("tool_calls"))



