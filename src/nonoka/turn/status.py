"""A session's status as it is now: running, interrupted, or what its last turn left.

The index row's ``status`` is written when a turn ends, so on its own it says
``completed`` while a later turn streams and after a process running one was killed.
What is true now comes from two other places: the session's lease (a live process
holds it while a turn runs) and the journal (a turn's opening ``request`` entry with no
``finish`` after it, ``turn.journal.open_turn``). A live holder means ``running``; an
open turn whose process is gone means ``interrupted`` — the next turn repairs it. Every
reader (``nonoka sessions``, ``nonoka ui``) decides it here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nonoka.errors import ConfigurationError
from nonoka.store.lease_terms import DEFAULT_TTL
from nonoka.store.leases import holder_is_dead, owner_process, process_gone
from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord
from nonoka.turn.journal import TURN_END, open_turn

RUNNING = "running"
INTERRUPTED = "interrupted"
LOOKBACK = 200
"""Timeline entries read back to find where the last turn began."""


@dataclass(frozen=True)
class LiveStatus:
    """``status``, and for a running session the process running it."""

    status: str
    host: str | None = None
    pid: int | None = None

    @property
    def holder(self) -> str:
        """``pid 1234 on host``, or ``""``."""
        if self.pid is None:
            return ""
        return f"pid {self.pid} on {self.host}" if self.host else f"pid {self.pid}"

    def as_json(self) -> dict[str, Any] | None:
        """The holder for ``--json`` (``None`` unless running)."""
        if self.pid is None:
            return None
        return {"host": self.host, "pid": self.pid}


def _held_by(owner: str, status: str = RUNNING) -> LiveStatus:
    found = owner_process(owner)
    if found is None:
        return LiveStatus(status)
    host, pid = found
    return LiveStatus(status, host.split("/", 1)[0], pid)


async def live_status(stores: ProjectStores, record: SessionRecord,
                      now: float | None = None) -> LiveStatus:
    """What ``record``'s session is doing now (its row's status unless a turn is open)."""
    sid = record.session_id
    lease = None
    with contextlib.suppress(ConfigurationError):  # a store without leases: the journal
        lease = await stores.leases.get_lease(sid)
    if lease is not None and not holder_is_dead(lease.owner):
        return _held_by(lease.owner)
    newest = await stores.events.list_events(sid, limit=1)
    if not newest or newest[-1].kind == TURN_END:
        return LiveStatus(record.status)
    events = await stores.events.list_events(sid, limit=LOOKBACK)
    opened = open_turn(events)
    if opened is None:
        if len(events) < LOOKBACK:
            return LiveStatus(record.status)  # no turn was ever journaled here
        return LiveStatus(INTERRUPTED)  # a turn longer than the lookback, not finished
    if lease is None:  # between the turn's lease and its journal entries, for an instant
        mark = str(opened.data.get("process") or "")
        found = owner_process(mark)
        recent = (time.time() if now is None else now) - events[-1].at < DEFAULT_TTL
        if found is not None and recent and not process_gone(*found) and _here(found[0]):
            return _held_by(mark)
    return LiveStatus(INTERRUPTED)


def _here(host: str) -> bool:
    from nonoka.store.lease_terms import lease_host

    return host == lease_host()


async def live_statuses(stores: ProjectStores,
                        records: Sequence[SessionRecord]) -> dict[str, LiveStatus]:
    """``live_status`` of each record, by session id."""
    return {r.session_id: await live_status(stores, r) for r in records}


def with_live_status(record: SessionRecord, live: LiveStatus) -> SessionRecord:
    """``record`` showing ``live``'s status (the stored row is left as it is)."""
    if live.status == record.status:
        return record
    return record.model_copy(update={"status": live.status})
