"""What a stored conversation holds that a request must treat apart, read once.

Two kinds of entry change what a request does with the whole conversation: a custom
tool's call (sent to a model that takes function tools only as the function call it
made: ``nonoka.serve.as_functions``) and an ``additional_tools`` item (its tools offered
with the request's, and the item itself sent to no model but the Responses API's:
``nonoka.serve.additional``). Looking for them in every entry of every request would
cost a long conversation a pass over its whole history each turn; ``marks_of`` resumes
where the last request's pass stopped (``nonoka.state.prefix_memo``: the entries a
session's requests see are the same objects, so "starts with" is settled by identity),
and reads only what was added since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nonoka.serve.additional import carried_item
from nonoka.serve.hosted import custom_call
from nonoka.state.entries import MemoryEntry
from nonoka.state.prefix_memo import PrefixMemo


@dataclass(frozen=True)
class Marks:
    """Whether the entries hold a custom tool's call, and the entries that hold an
    ``additional_tools`` item (few: one a Codex thread), in order."""

    custom_calls: bool = False
    carriers: tuple[MemoryEntry, ...] = ()


def marks_of(entries: Sequence[MemoryEntry], memo: PrefixMemo[Marks] | None = None) -> Marks:
    """The marks of ``entries``, reading only past where ``memo``'s last pass stopped
    when ``entries`` start with what it went over."""
    resumed = memo.resume(entries) if memo is not None else None
    start, found = ((resumed[0][0], resumed[1]) if resumed is not None else (0, Marks()))
    custom, carriers = found.custom_calls, list(found.carriers)
    for entry in entries[start:]:
        if entry.role == "assistant":
            custom = custom or _calls_custom(entry)
        elif entry.role == "system" and entry.metadata and \
                carried_item(entry.metadata.get("provider_metadata")) is not None:
            carriers.append(entry)
    marks = Marks(custom, tuple(carriers))
    if memo is not None:
        memo.keep(marks, entries)
    return marks


def _calls_custom(entry: MemoryEntry) -> bool:
    calls = entry.metadata.get("tool_calls") if entry.metadata else None
    if not isinstance(calls, list):
        return False
    return any(isinstance(call, dict) and custom_call(call.get("provider_metadata"))
               for call in calls)
