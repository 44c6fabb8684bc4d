"""The part of a stored conversation a hand-off carries: the entries up to the chosen
point, less what only nonoka or the first agent's harness held (system prompts: the
next agent sends its own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nonoka.errors import ConfigurationError
from nonoka.state.entries import MemoryEntry


def carried(entries: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    """The entries the next agent is given: every one but the system prompts."""
    return [e for e in entries if e.role != "system"]


def calls_of(entry: MemoryEntry) -> list[dict[str, Any]]:
    """An assistant entry's tool calls as stored (``id``, ``name``, ``arguments``)."""
    calls = entry.metadata.get("tool_calls") if entry.role == "assistant" else None
    return [dict(c) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def check_answered(entries: Sequence[MemoryEntry], at: int) -> None:
    """Refuse a point that leaves a tool call without its result: the next agent would
    have to answer a call its own tools never made."""
    open_calls: dict[str, int] = {}
    for position, entry in enumerate(entries):
        for call in calls_of(entry):
            open_calls[str(call.get("id"))] = position
        answered = entry.metadata.get("tool_call_id") if entry.role == "tool" else None
        open_calls.pop(str(answered), None)
    if open_calls:
        first = min(open_calls.values())
        raise ConfigurationError(
            f"entry {first} makes a tool call whose result is not among the first {at} "
            f"entries; hand off before it (--at {first}) or after its result")
