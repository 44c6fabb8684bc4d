"""Cancelling a background response another server process is making.

Only the process making a response can stop its turn, and server processes share
nothing but the database, so the request travels through the response's session
timeline: the process asked to cancel appends a ``serve_cancel`` row naming the response
(``ask``); the process making it reads the rows its timeline gained every
``WATCH_EVERY`` seconds while the response runs (``watch``) and, on finding one,
cancels the response's task as a cancel sent to it would. The asking process then
reads the rows the timeline gains until the response's turn ended — its ``finish``
row, or the first row of a later turn — or the process holding the session is gone,
at most ``WAIT`` seconds (``ended``), and answers with the response as stored.

A timeline row, not a mark on the session's index row: rows are only ever appended,
while the index row is rewritten whole by whoever updates it, so a mark could be lost
to the making process's own update.
"""

from __future__ import annotations

import asyncio

from nonoka.errors import StoreError
from nonoka.serve.ids import parse_response_id
from nonoka.serve.record import RESPONSE_EVENT
from nonoka.store.base import SessionLeases
from nonoka.store.leases import holder_is_dead
from nonoka.store.records import EventLog, EventRecord

CANCEL = "serve_cancel"
"""The timeline kind of a cancel asked for in another process: ``{"id": response id}``."""
WATCH_EVERY = 0.25
"""Seconds between two reads of a running background response's timeline."""
ASK_EVERY = 0.05
"""Seconds between two reads of the timeline by the process that asked."""
WAIT = 20.0
"""Seconds the asking process waits for the turn to end before answering as it is."""
FIRST_ROWS = 64
"""Newest rows read first; more when the timeline grew by more since the last read."""
TURN_ENDS = ("finish", "request", RESPONSE_EVENT)
"""Rows that say the turn running when they were read has ended: its own ``finish``,
or a later turn's opening (turns of one session run one at a time, under its lease)."""


async def newest_seq(log: EventLog, session_id: str) -> int:
    """The number of the session's newest timeline row (0 for none)."""
    rows = await log.list_events(session_id, limit=1)
    return rows[-1].seq if rows else 0


async def rows_since(log: EventLog, session_id: str, after: int) -> list[EventRecord]:
    """The session's timeline rows numbered after ``after``, oldest first."""
    limit = FIRST_ROWS
    while True:
        rows = await log.list_events(session_id, limit=limit)
        if len(rows) < limit or rows[0].seq <= after + 1:
            return [row for row in rows if row.seq > after]
        limit *= 8


def _session_of(response_id: str) -> str:
    point = parse_response_id(response_id)
    if point is None:
        raise ValueError(f"not a response id: {response_id!r}")
    return point.session_id


async def ask(log: EventLog, response_id: str) -> None:
    """Ask the process making ``response_id`` to cancel it."""
    await log.append_event(_session_of(response_id), CANCEL, {"id": response_id})


async def watch(log: EventLog, response_id: str, after: int) -> None:
    """Return once a cancel of ``response_id`` is asked for in a row numbered after
    ``after`` (read before the response's id was given to anyone). A failed read is
    tried again at the next tick: the response runs on meanwhile."""
    session_id = _session_of(response_id)
    while True:
        await asyncio.sleep(WATCH_EVERY)
        try:
            rows = await rows_since(log, session_id, after)
        except StoreError:
            continue
        if any(row.kind == CANCEL and row.data.get("id") == response_id for row in rows):
            return
        if rows:
            after = rows[-1].seq


async def ended(log: EventLog, leases: SessionLeases, session_id: str, after: int,
                wait: float = WAIT) -> bool:
    """Whether the turn running in ``session_id`` ended (``after``: the newest row
    when it was seen running), or its process is gone, within ``wait`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        rows = await rows_since(log, session_id, after)
        if any(row.kind in TURN_ENDS for row in rows):
            return True
        if rows:
            after = rows[-1].seq
        lease = await leases.get_lease(session_id)
        if lease is not None and holder_is_dead(lease.owner):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(ASK_EVERY)
