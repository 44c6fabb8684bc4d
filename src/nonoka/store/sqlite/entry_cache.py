"""Decoded conversations a process has already read, so reading one again decodes only
the entries stored since.

A turn reads its session several times (choosing it, again once its lease is held, the
runner's load, the index row at the end), and a long-lived bridge reads it every turn;
decoding every entry each time made a turn cost more as the conversation grew. The
cache keeps, per database file and session, the entries decoded last time and the
chain of the last of them (``nonoka.store.sqlite.digests``: it covers every stored
row's exact text).
Stored rows are only appended, or rewritten whole; a read reuses the cached entries
only when the row at the same position still carries the same chain and the session's
row is the same one (its creation time), and decodes the rest. At most a few sessions
are kept; each is what its state holds anyway.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from nonoka.state.entries import MemoryEntry

KEEP = 4
"""Sessions kept per process: a bridge serves one at a time."""


class Decoded(NamedTuple):
    """Entries decoded from a session's rows: they are the first ``len(entries)`` rows
    while the row ``len(entries) - 1`` still carries ``chain`` (its stored text)."""

    created_at: float
    entries: list[MemoryEntry]
    chain: str


_cache: OrderedDict[tuple[str, str], Decoded] = OrderedDict()
_lock = threading.Lock()


def get(path: str, session_id: str) -> Decoded | None:
    with _lock:
        found = _cache.get((path, session_id))
        if found is not None:
            _cache.move_to_end((path, session_id))
        return found


def put(path: str, session_id: str, decoded: Decoded) -> None:
    with _lock:
        _cache[(path, session_id)] = decoded
        _cache.move_to_end((path, session_id))
        while len(_cache) > KEEP:
            _cache.popitem(last=False)


def drop(path: str, session_id: str) -> None:
    with _lock:
        _cache.pop((path, session_id), None)


def extend(entries: list[MemoryEntry], start: int, new: list[MemoryEntry]
           ) -> list[MemoryEntry]:
    """``entries[:start] + new``, appending in place when ``entries`` still ends at
    ``start`` (snapshots taken of it see only their own first entries)."""
    with _lock:
        if len(entries) == start:
            entries.extend(new)
            return entries
    return [*entries[:start], *new]


def clear() -> None:
    """Forget every decoded conversation (the next read of each decodes it whole)."""
    with _lock:
        _cache.clear()
