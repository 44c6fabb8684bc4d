"""``nonoka sessions``: read the session index and event log the bridge and ``run`` write.

Reading never creates anything: a project without a database simply has no sessions, and
a database this process may not write is read without writing (``open_for_reading``).
Statuses are the live ones (``turn.status``): ``running`` while a process runs a turn,
``interrupted`` when one died mid-turn, whatever the stored row last said.
"""

from __future__ import annotations

from pathlib import Path

from nonoka.cli.common import (
    Place,
    find_session,
    has_database,
    no_database,
    open_for_reading,
    open_stores,
)
from nonoka.cli.damage import refuse_if_damaged
from nonoka.cli.render import SessionDetail
from nonoka.cli.voice import EXIT_USAGE, CliError
from nonoka.errors import ConfigurationError
from nonoka.store.records import SessionRecord
from nonoka.turn.lineage import branches_of, fork_session, subagent_links
from nonoka.turn.status import LiveStatus, live_status, live_statuses, with_live_status


async def list_sessions(where: Place | Path, *, limit: int = 20, include_titles: bool = False
                        ) -> list[tuple[SessionRecord, LiveStatus]]:
    """Most recently active first, each with its live status (the record shows it too);
    title-generation sessions only with ``include_titles``."""
    if not has_database(where):
        return []
    async with open_for_reading(where) as stores:
        records = await stores.index.list_sessions(limit=limit,
                                                   purpose=None if include_titles else "chat")
        live = await live_statuses(stores, records)
    return [(with_live_status(r, live[r.session_id]), live[r.session_id]) for r in records]


async def show_session(where: Place | Path, ref: str, *, limit: int = 50,
                       entries: bool = False) -> SessionDetail:
    """The session ``ref`` (an id or an unambiguous prefix), its last ``limit`` events and
    the usage summed over its whole log, the files its conversation holds; with
    ``entries``, its conversation too."""
    from nonoka.ops.files import session_files

    if not has_database(where):
        raise no_database(where)
    async with open_for_reading(where) as stores:
        record = await find_session(stores.index, ref)
        events = await stores.events.list_events(record.session_id, limit=limit)
        usage = await stores.events.usage_summary(record.session_id)
        branches = await branches_of(stores, record.session_id)
        parent_line, subagents = await subagent_links(stores, record)
        live = await live_status(stores, record)
        stored = await stores.checkpoints.load_session(record.session_id) if entries else None
        files = await session_files(stores, record.session_id)
    return SessionDetail(record=with_live_status(record, live), events=events, usage=usage,
                         branches=branches, live=live, files=files,
                         parent_line=parent_line, subagents=subagents,
                         entries=None if stored is None else list(stored.memory_entries))


async def fork(where: Place | Path, ref: str, at: int | None) -> str:
    """Branch the session ``ref`` at entry ``at`` (default: its end); the new id."""
    if not has_database(where):
        raise no_database(where)
    refuse_if_damaged(Place.of(where))
    async with open_stores(where) as stores:
        record = await find_session(stores.index, ref)
        try:
            return await fork_session(stores, record.session_id, at,
                                      reason="nonoka sessions fork")
        except ConfigurationError as exc:
            raise CliError(f"{exc}; `nonoka sessions show {ref}` numbers its entries",
                           exit_code=EXIT_USAGE, code="usage_error") from None
