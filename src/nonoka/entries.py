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
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from nonoka.messages import MemoryEntry, Message


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
