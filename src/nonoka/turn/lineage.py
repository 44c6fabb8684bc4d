"""Branches in a project: the runtime's fork, plus the index row and timeline entries that
make a branch visible in ``sessions list``/``show`` and findable by conversation key.

A branch's index row copies its parent's (title, model, conversation key, purpose) and
adds ``forked_from``, ``fork_point`` and ``fork_reason``; both timelines get an entry
(``forked`` in the branch, ``branched`` in the parent). The bridge makes branches when a
host's history parts from the stored one; ``nonoka sessions fork`` and ``nonoka run
--at`` make them on request.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord

FORK_KEYS = ("forked_from", "fork_point", "fork_reason", "host_session_id",
             "host_parent_session_id")
"""Index metadata naming a branch's parent (a branch of a branch replaces them), and the
host conversation a session belongs to, and the one that started it (a subagent's
parent): a branch belongs to the host conversation that made it, if any, never to its
parent's."""


async def fork_session(stores: ProjectStores, parent_id: str, at: int | None = None, *,
                       reason: str, metadata: dict[str, Any] | None = None) -> str:
    """Branch ``parent_id`` at entry ``at`` (default: its end); returns the branch's id."""
    # Imported here: the commands that only show a branch's line (``sessions list``,
    # ``show``, ``export``) import this module and need none of the runtime's agents,
    # paradigms and extensions (11 modules).
    from nonoka.runtime.runner import Runner

    runner = Runner(stores.checkpoints)
    child_id = await runner.fork_session(parent_id, at)
    state = await stores.checkpoints.load_session(child_id)
    point = state.fork_point if state is not None and state.fork_point is not None else 0
    parent = await stores.index.get_session(parent_id)
    now = time.time()
    parent_meta: dict[str, Any] = dict(parent.metadata) if parent is not None else {}
    meta = {k: v for k, v in parent_meta.items() if k not in FORK_KEYS}
    meta.update(metadata or {})
    meta.update(forked_from=parent_id, fork_point=point, fork_reason=reason)
    messages = len(state.memory_entries) if state is not None else 0
    await stores.index.upsert_session(SessionRecord(
        session_id=child_id, title=parent.title if parent is not None else "",
        model=parent.model if parent is not None else "", created_at=now, last_active=now,
        status=state.status.value if state is not None else "created",
        turn_count=state.turn_count if state is not None else 0, message_count=messages,
        metadata=meta))
    await stores.events.append_event(child_id, "forked", {
        "forked_from": parent_id, "fork_point": point, "reason": reason})
    await stores.events.append_event(parent_id, "branched", {
        "session_id": child_id, "fork_point": point, "reason": reason})
    return child_id


async def lineage_of(stores: ProjectStores, session_id: str) -> tuple[str | None, list[str]]:
    """The session's parent (``None`` for a root) and its direct branches, oldest first."""
    record = await stores.index.get_session(session_id)
    parent = record.metadata.get("forked_from") if record is not None else None
    children = await branches_of(stores, session_id)
    return (str(parent) if parent else None), children


async def branches_of(stores: ProjectStores, session_id: str) -> list[str]:
    """The sessions forked from ``session_id``, oldest first.

    Branches share their parent's conversation key, so when the parent has one only those
    rows are read; otherwise the whole index is.
    """
    record = await stores.index.get_session(session_id)
    key = record.conversation_key if record is not None else None
    purpose = record.purpose if record is not None else "chat"
    candidates = (await stores.index.find_by_conversation_key(key, purpose=purpose) if key
                  else await stores.index.list_sessions(limit=1_000_000, purpose=None))
    found = [r for r in candidates if r.metadata.get("forked_from") == session_id]
    return [r.session_id for r in sorted(found, key=lambda r: r.created_at)]


async def subagent_links(stores: ProjectStores, record: SessionRecord
                         ) -> tuple[str | None, list[str]]:
    """A session's place among subagents: the session of the host conversation that
    started it (``host_parent_session_id``; ``None`` when it names none or that
    conversation is not stored), and the sessions of the subagents it started, oldest
    first. A host conversation may have several sessions (branches): a subagent belongs
    to the one last active when the subagent's session was made."""
    from nonoka.store.records import HostSessions

    host = record.metadata.get("host_parent_session_id")
    parent = None
    if isinstance(host, str) and host and isinstance(stores.index, HostSessions):
        parent = parent_line(record, await stores.index.find_by_host_session(host))
    children: list[str] = []
    if record.host_session_id:
        rows = await stores.index.list_sessions(limit=1_000_000, purpose="chat")
        found = [r for r in rows
                 if r.metadata.get("host_parent_session_id") == record.host_session_id]
        for child in sorted(found, key=lambda r: r.created_at):
            if parent_line(child, rows) == record.session_id:
                children.append(child.session_id)
    return parent, children


def parent_line(record: SessionRecord, records: Sequence[SessionRecord]) -> str | None:
    """The session a subagent's session belongs under: of the sessions of the host
    conversation that started it (``host_parent_session_id``), the one last active when
    it was created (else the oldest); ``None`` for any other session, or when none of
    ``records`` holds that conversation."""
    host = record.metadata.get("host_parent_session_id")
    if not isinstance(host, str) or not host:
        return None
    line = sorted((r for r in records if r.host_session_id == host
                   and r.session_id != record.session_id), key=lambda r: r.created_at)
    before = [r for r in line if r.created_at <= record.created_at]
    chosen = before[-1] if before else (line[0] if line else None)
    return chosen.session_id if chosen is not None else None
