"""Working memory: the conversation a session shows the model, within a token budget.

Compaction keeps the leading system entries, never separates an assistant entry that
called tools from the tool results answering it, and always keeps the newest exchange.
Dropped entries are summarised through the model when the limits enable it, else
trimmed. Any rewrite bumps ``generation`` so stores know to rewrite instead of append.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from nonoka.state.entries import EntryMessages, EntrySnapshot, MemoryEntry, dangling_tool_calls
from nonoka.state.messages import Message, ToolCall
from nonoka.state.prefix_memo import ConversationPasses

if TYPE_CHECKING:
    from nonoka.store.base import CheckpointStore

Summarizer = Callable[[Sequence[MemoryEntry]], Awaitable[str]]

_TOKENS: Callable[[MemoryEntry], int] = attrgetter("tokens")

SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"


class WorkingMemory:
    """An ordered list of entries with a running token count."""

    def __init__(self, entries: Iterable[MemoryEntry] = (), *, generation: int = 0,
                 passes: ConversationPasses | None = None) -> None:
        """``passes``: where earlier passes over this conversation stopped, when the
        process keeps them between turns (``ConversationPasses``)."""
        self._entries: list[MemoryEntry] = list(entries)
        self.passes = passes
        self._tokens: int = _token_count(self._entries, passes)
        self.generation = generation

    @property
    def entries(self) -> EntrySnapshot:
        """The entries as they are now, oldest first (a read-only snapshot, taken in O(1):
        the list is only ever appended to or replaced whole)."""
        return EntrySnapshot(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def dangling_tool_calls(self) -> tuple[int | None, list[ToolCall]]:
        """``entries.dangling_tool_calls`` of this conversation, resumed where the last
        pass stopped when the process keeps its passes."""
        return dangling_tool_calls(self._entries,
                                   None if self.passes is None else self.passes.pairing)

    @property
    def total_tokens(self) -> int:
        return self._tokens

    def append(self, entry: MemoryEntry) -> None:
        self._entries.append(entry)
        self._tokens += entry.tokens

    def replace(self, entries: Iterable[MemoryEntry]) -> None:
        """Make ``entries`` the conversation (a host edited it); stores rewrite, not append."""
        self._entries = list(entries)
        self._tokens = sum(map(_TOKENS, self._entries))
        self.generation += 1

    def messages(self) -> EntryMessages:
        """The conversation as chat messages, built lazily (``EntryMessages``)."""
        return EntryMessages(self.entries)

    def units(self) -> list[list[MemoryEntry]]:
        """Split into indivisible units: an assistant tool-calling entry with its results."""
        units: list[list[MemoryEntry]] = []
        for entry in self._entries:
            if entry.role == "tool" and units and _open_call_unit(units[-1], entry):
                units[-1].append(entry)
            else:
                units.append([entry])
        return units

    async def compact(self, max_tokens: int, summarizer: Summarizer | None = None) -> bool:
        """Shrink to ``max_tokens`` if over it; returns whether anything changed."""
        if self._tokens <= max_tokens:
            return False
        units = self.units()
        pinned: list[MemoryEntry] = []
        while units and units[0][0].role == "system" and len(units) > 1:
            pinned.extend(units.pop(0))
        budget = max_tokens - sum(e.tokens for e in pinned)
        kept: list[list[MemoryEntry]] = [units.pop()]  # the newest exchange always stays
        used = sum(e.tokens for e in kept[0])
        while units and used + sum(e.tokens for e in units[-1]) <= budget:
            unit = units.pop()
            used += sum(e.tokens for e in unit)
            kept.insert(0, unit)
        dropped = [e for unit in units for e in unit]
        if not dropped:
            return False
        replacement: list[MemoryEntry] = []
        if summarizer is not None:
            summary = await summarizer(dropped)
            replacement = [MemoryEntry.make("user", SUMMARY_PREFIX + summary, summary=True,
                                            replaces=len(dropped))]
        self._entries = pinned + replacement + [e for unit in kept for e in unit]
        self._tokens = sum(e.tokens for e in self._entries)
        self.generation += 1
        return True


def _token_count(entries: list[MemoryEntry], passes: ConversationPasses | None) -> int:
    """The entries' tokens; with ``passes``, counted on from the last count when they
    extend the entries it was taken of (a session loaded again, one exchange longer)."""
    if passes is None:
        return sum(map(_TOKENS, entries))
    resumed = passes.tokens.resume(entries)
    start, total = (0, 0) if resumed is None else (resumed[0][0], resumed[1])
    total += sum(map(_TOKENS, entries[start:]))
    passes.tokens.keep(total, entries)
    return total


def _open_call_unit(unit: list[MemoryEntry], entry: MemoryEntry) -> bool:
    head = unit[0]
    return head.role == "assistant" and any(c.id == entry.tool_call_id for c in head.tool_calls)


def summary_request(entries: Sequence[MemoryEntry]) -> list[Message]:
    """The prompt that asks a model to summarise dropped entries."""
    transcript = "\n".join(f"{e.role}: {e.content}" for e in entries if e.content)
    return [
        Message(role="system", content=(
            "Summarise the conversation below for your own later reference. Keep facts, "
            "decisions, names, numbers and open tasks; drop pleasantries. Be brief."
        )),
        Message(role="user", content=transcript),
    ]


class MemoryBackend:
    """Programmatic reads of a stored session's conversation."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    async def get_history(self, session_id: str) -> list[MemoryEntry]:
        """The stored entries, oldest first; empty for an unknown session."""
        state = await self.store.load_session(session_id)
        return list(state.memory_entries) if state is not None else []
