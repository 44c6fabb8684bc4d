"""``nonoka sessions``: read the session index and event log the bridge and ``run`` write.

Reading never creates anything: a project without a database simply has no sessions, and
a database this process may not write is read without writing (``open_for_reading``).
"""

from __future__ import annotations

from pathlib import Path

from nonoka.cli.common import (
    CliError,
    find_session,
    has_database,
    open_for_reading,
    open_stores,
)
from nonoka.cli.render import SessionDetail
from nonoka.errors import ConfigurationError
from nonoka.store.records import SessionRecord
from nonoka.turn.lineage import branches_of, fork_session


async def list_sessions(project: Path, *, limit: int = 20,
                        include_titles: bool = False) -> list[SessionRecord]:
    """Most recently active first; title-generation sessions only with ``include_titles``."""
    if not has_database(project):
        return []
    async with open_for_reading(project) as stores:
        return await stores.index.list_sessions(limit=limit,
                                                purpose=None if include_titles else "chat")


async def show_session(project: Path, ref: str, *, limit: int = 50) -> SessionDetail:
    """The session ``ref`` (an id or an unambiguous prefix), its last ``limit`` events,
    the usage summed over its whole log and the files its conversation holds."""
    from nonoka.ops.files import session_files

    if not has_database(project):
        raise CliError(f"there are no sessions in {project} yet (no .nonoka/sessions.db)")
    async with open_for_reading(project) as stores:
        record = await find_session(stores.index, ref)
        events = await stores.events.list_events(record.session_id, limit=limit)
        usage = await stores.events.usage_summary(record.session_id)
        branches = await branches_of(stores, record.session_id)
        files = await session_files(stores, record.session_id)
    return SessionDetail(record=record, events=events, usage=usage, branches=branches,
                         files=files)


async def fork(project: Path, ref: str, at: int | None) -> str:
    """Branch the session ``ref`` at entry ``at`` (default: its end); the new id."""
    if not has_database(project):
        raise CliError(f"there are no sessions in {project} yet (no .nonoka/sessions.db)")
    async with open_stores(project) as stores:
        record = await find_session(stores.index, ref)
        try:
            return await fork_session(stores, record.session_id, at,
                                      reason="nonoka sessions fork")
        except ConfigurationError as exc:
            raise CliError(str(exc)) from None
