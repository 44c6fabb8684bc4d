"""``nonoka sessions delete`` and ``prune``: remove whole sessions, never a running one.

A session goes through the stores' own deletes (the checkpoint store's
``delete_session``, the index's ``delete_session_record``), one session per transaction:
each is short, so a writer working meanwhile waits milliseconds, not for the whole prune,
and an engine whose sessions share rows (branches) keeps them consistent in its own
delete. A session whose lease is live is skipped and reported, never removed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nonoka.ops.backends import backend_for
from nonoka.ops.model import SessionSummary
from nonoka.store.project import ProjectStores

TERMINAL = ("completed", "failed", "cancelled")
WORK_STREAK = 0.025
PAUSE = 0.025
"""Deleting pauses ``PAUSE`` seconds after every ``WORK_STREAK`` seconds of work. Each
session is its own short transaction, but SQLite's lock is not fair: a writer that found
it taken sleeps in growing steps (1, 2, 5, 10, 15, 20, 25 ms, ...) and can miss every
gap between two deletes. A pause as long as the streak before it is always reached by
one of those steps, so a writer waits at most about two streaks (bench/README.md)."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", re.IGNORECASE)


def parse_age(text: str) -> float:
    """Seconds in ``"30d"``, ``"12h"``, ``"2w"``, ``"90m"``, ``"45s"``; ``ValueError``
    otherwise."""
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an age like 30d, 12h, 2w, 90m or 45s")
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


@dataclass
class Removal:
    removed: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    """Sessions left alone because a process holds their lease."""
    missing: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    dry_run: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "busy": self.busy, "missing": self.missing,
                "bytes_freed": self.bytes_freed, "dry_run": self.dry_run}


async def delete_sessions(stores: ProjectStores, session_ids: Sequence[str], *,
                          dry_run: bool = False) -> Removal:
    """Remove each session entirely (checkpoint, entries, step updates, events, index
    row, next-call template); a leased one is reported as busy and kept."""
    backend = backend_for(stores)
    result = Removal(dry_run=dry_run)
    streak = time.monotonic()
    settle = getattr(backend, "settle", None)
    for sid in dict.fromkeys(session_ids):
        if not dry_run and time.monotonic() - streak > WORK_STREAK:
            if settle is not None:
                settle()  # fold the log back while no lock is held (see SQLiteOps.settle)
            await asyncio.sleep(PAUSE)  # let a waiting writer in (see PAUSE)
            streak = time.monotonic()
        if await stores.leases.get_lease(sid) is not None:
            result.busy.append(sid)
            continue
        size = await backend.session_bytes(sid)
        if dry_run:
            found = size > 0 or await stores.index.get_session(sid) is not None
        else:
            found = await stores.checkpoints.delete_session(sid)
            found = await stores.index.delete_session_record(sid) or found
        if found:
            result.removed.append(sid)
            result.bytes_freed += size
        else:
            result.missing.append(sid)
    return result


def select_for_prune(summaries: list[SessionSummary], *, older_than: float,
                     statuses: Sequence[str] = TERMINAL, keep_last: int = 0,
                     now: float | None = None) -> list[str]:
    """Sessions last active before ``now - older_than`` with a status in ``statuses``,
    except the ``keep_last`` most recently active sessions (of any status)."""
    now = time.time() if now is None else now
    cutoff = now - older_than
    newest = sorted(summaries, key=lambda s: (-s.last_active, s.session_id))
    kept = {s.session_id for s in newest[: max(keep_last, 0)]}
    wanted = set(statuses)
    return [s.session_id for s in newest
            if s.session_id not in kept and s.last_active < cutoff
            and (not wanted or s.status in wanted)]


async def prune(stores: ProjectStores, *, older_than: float,
                statuses: Sequence[str] = TERMINAL, keep_last: int = 0,
                dry_run: bool = False, now: float | None = None) -> Removal:
    """Delete what ``select_for_prune`` picks, one session per transaction."""
    summaries = await backend_for(stores).summaries()
    chosen = select_for_prune(summaries, older_than=older_than, statuses=statuses,
                              keep_last=keep_last, now=now)
    return await delete_sessions(stores, chosen, dry_run=dry_run)
