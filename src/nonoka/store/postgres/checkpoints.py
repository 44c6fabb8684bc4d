"""The PostgreSQL engine: one database shared by every worker on every machine.

Same rows and rules as the SQLite engine. A save is one transaction that locks the
session's checkpoint row (``SELECT ... FOR UPDATE``), checks the revision, inserts only
the new conversation entries (or rewrites them after a compaction) and updates the
snapshot; a process that raced another one gets ``SessionConflictError``. A load is one
statement, so it reads the snapshot, the entries and the step updates from one snapshot
of the database without a transaction. Step updates take a per-session advisory lock so
their times stay strictly increasing whoever writes them.

Leases (``SessionLeases``) are rows of ``session_leases`` whose expiry is computed and
compared on the database's clock, so workers with skewed clocks still agree.
"""

from __future__ import annotations

import json
import time
from typing import Any

from nonoka.errors import CorruptSessionError, StoreError
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import (
    EntryPlan,
    Lease,
    StepUpdateWriter,
    check_fork,
    check_lease_args,
    check_parent,
    conflict_error,
    decode_entries,
    decode_session,
    encode_entry,
    media_rows,
    next_revision,
    next_update_time,
    snapshot_json,
    with_media,
)
from nonoka.store.media import Media, base64_text, files_column, needed
from nonoka.store.postgres.database import PostgresDatabase
from nonoka.store.postgres.schema import MEDIA_REFS, STEP_LOCK
from nonoka.store.reuse import SnapshotTexts, StoreReuse

_LOCK_ROW = ("SELECT revision, entry_count, memory_generation FROM checkpoints "
             "WHERE session_id = %s FOR UPDATE")
_CREATE = """
INSERT INTO checkpoints (session_id, state_json, revision, entry_count, memory_generation,
                         created_at, updated_at)
VALUES (%s, %s, 1, %s, %s, %s, %s) ON CONFLICT (session_id) DO NOTHING RETURNING 1
"""
_UPDATE = """
UPDATE checkpoints SET state_json = %s, revision = revision + 1, entry_count = %s,
                       memory_generation = %s, updated_at = %s
WHERE session_id = %s
"""
_APPEND = """
INSERT INTO session_entries (session_id, seq, entry_json)
SELECT %s, %s + ord - 1, entry FROM unnest(%b::text[]) WITH ORDINALITY AS t(entry, ord)
"""
_APPEND_MEDIA = """
INSERT INTO session_entries (session_id, seq, entry_json, media)
SELECT %s, %s + ord - 1, entry, refs
FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY AS t(entry, refs, ord)
"""
"""``_APPEND`` for rows of which some refer to stored files (``media``: their digests)."""
_MARKED = """(SELECT json_agg(json_build_array(e.seq, e.media))::text FROM session_entries e
        WHERE e.session_id = {sid} AND e.seq >= {start} AND e.seq < {stop}
        AND e.media IS NOT NULL)"""
"""The rows in a range that refer to files, as ``[[seq, media], ...]`` (through the
partial index of such rows: nothing to read for a session without files)."""
_LOAD = f"""
SELECT c.state_json, c.revision, c.entry_count,
       ARRAY(SELECT e.entry_json FROM session_entries e
             WHERE e.session_id = c.session_id AND e.seq >= c.base_count ORDER BY e.seq),
       (SELECT json_agg(json_build_array(s.step_id, s.update_type, s.payload_json,
                                         s.updated_at) ORDER BY s.updated_at, s.id)::text
        FROM step_updates s WHERE s.session_id = c.session_id),
       c.base_session_id, c.base_count,
       {_MARKED.format(sid="c.session_id", start="c.base_count", stop="2147483647")}
FROM checkpoints c WHERE c.session_id = %s
"""
_SNAPSHOT = """
SELECT c.state_json, c.revision, c.entry_count,
       (SELECT json_agg(json_build_array(s.step_id, s.update_type, s.payload_json,
                                         s.updated_at) ORDER BY s.updated_at, s.id)::text
        FROM step_updates s WHERE s.session_id = c.session_id)
FROM checkpoints c WHERE c.session_id = %s
"""
_BASE = "SELECT base_session_id, base_count FROM checkpoints WHERE session_id = %s"
_RANGE = f"""
SELECT ARRAY(SELECT entry_json FROM session_entries
             WHERE session_id = %(sid)s AND seq >= %(start)s AND seq < %(stop)s ORDER BY seq),
       {_MARKED.format(sid="%(sid)s", start="%(start)s", stop="%(stop)s")}
"""
_DROP = f"""
WITH gone AS (DELETE FROM session_entries WHERE session_id = %s RETURNING media)
SELECT (SELECT count(*) FROM gone),
       ARRAY(SELECT DISTINCT unnest({MEDIA_REFS.format(m="media")}) FROM gone
             WHERE media IS NOT NULL)
"""
"""Delete a session's entry rows: how many, and the files they referred to (the
candidates for the garbage collection that follows)."""
_MEDIA = "SELECT digest, data FROM media WHERE digest = ANY(%s)"
_KEEP_LOCK = "SELECT digest FROM media WHERE digest = ANY(%s) ORDER BY digest FOR KEY SHARE"
_KEEP_INSERT = """
INSERT INTO media (digest, media_type, size, created_at, data) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (digest) DO NOTHING RETURNING digest
"""
_COLLECT_LOCK = "SELECT digest FROM media WHERE digest = ANY(%s) ORDER BY digest FOR UPDATE"
_COLLECT = f"""
DELETE FROM media m WHERE m.digest = ANY(%s) AND NOT EXISTS (
    SELECT 1 FROM session_entries e
    WHERE e.media IS NOT NULL AND {MEDIA_REFS.format(m="e.media")} @> ARRAY[m.digest])
AND NOT EXISTS (SELECT 1 FROM serve_files f WHERE f.deleted_at IS NULL AND f.digest = m.digest)
"""
_CHILDREN = "SELECT session_id, base_count FROM checkpoints WHERE base_session_id = %s"
_DETACH = ("UPDATE checkpoints SET base_session_id = NULL, base_count = 0 "
           "WHERE session_id = %s")
_MAX_DEPTH = 10_000
_UPSERT_STEP = """
INSERT INTO step_updates (session_id, step_id, update_type, payload_json, updated_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (session_id, step_id, update_type) DO UPDATE SET
    payload_json = excluded.payload_json,
    updated_at = excluded.updated_at
"""
# Taken when free, expired, or already the caller's (then only the expiry moves).
_ACQUIRE_LEASE = """
INSERT INTO session_leases (session_id, owner, expires_at, acquired_at)
VALUES (%(sid)s, %(owner)s, clock_timestamp() + make_interval(secs => %(ttl)s),
        clock_timestamp())
ON CONFLICT (session_id) DO UPDATE SET
    owner = excluded.owner,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN session_leases.owner = excluded.owner
                       THEN session_leases.acquired_at ELSE excluded.acquired_at END
WHERE session_leases.owner = excluded.owner OR session_leases.expires_at <= clock_timestamp()
"""


class PostgresCheckpointStore(StepUpdateWriter):
    """A ``CheckpointStore`` and ``SessionLeases`` in a PostgreSQL database.

    Given a URL it opens (on first use) and owns a ``PostgresDatabase`` (``schema`` and
    the pool sizes go to it) and ``close()`` closes it; given a ``PostgresDatabase`` it
    borrows it and leaves it open.
    """

    def __init__(self, database: str | PostgresDatabase, *, schema: str | None = None,
                 min_size: int = 1, max_size: int = 4, reuse: StoreReuse | None = None
                 ) -> None:
        self._owned = not isinstance(database, PostgresDatabase)
        self.reuse = reuse if reuse is not None else StoreReuse()
        """What this store keeps between saves (``nonoka.store.reuse``)."""
        self.database = (database if isinstance(database, PostgresDatabase) else
                         PostgresDatabase(database, schema=schema, min_size=min_size,
                                          max_size=max_size))

    # -- CheckpointStore ------------------------------------------------------------------

    async def save_session(self, state: SessionState) -> int:
        async def write(conn: Any) -> int:
            return await write_session(conn, state, self.reuse.texts)

        return await self.database.run(write, transaction=True)

    async def load_session(self, session_id: str) -> SessionState | None:
        async def read(conn: Any) -> _Read | None:
            return await _read(conn, session_id)

        async def read_again(conn: Any) -> _Read | None:
            # Every statement on one snapshot: a file another process's delete took
            # between the entries and the files was only a race, never a lost file.
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return await _read(conn, session_id)

        got = await self.database.run(read)
        if got is not None and got.missing():
            got = await self.database.run(read_again, transaction=True)
        if got is None:
            return None
        entries = got.entries
        if len(entries) != got.count:
            raise CorruptSessionError(
                f"session {session_id}: {len(entries)} entry rows stored but the snapshot "
                f"expects {got.count}; the rows were left as they are"
            )
        step_rows = [tuple(s) for s in json.loads(got.steps)] if got.steps else []
        if not got.marks:
            return decode_session(session_id, got.snapshot, entries, got.revision, step_rows)
        decoded = with_media(session_id, decode_entries(session_id, entries), got.marks,
                             got.found)
        return decode_session(session_id, got.snapshot, [], got.revision, step_rows, decoded)

    async def fork_session(self, state: SessionState, parent_id: str, at: int,
                           parent_generation: int) -> int:
        check_fork(state, at)
        sid, now = state.session_id, time.time()
        async with self.database.transaction() as conn:
            parent = await (await conn.execute(_LOCK_ROW, (parent_id,))).fetchone()
            check_parent(parent_id, None if parent is None else (int(parent[1]), parent[2]),
                         at, parent_generation)
            created = await conn.execute(
                _CREATE, (sid, snapshot_json(state, self.reuse.texts), at,
                          state.memory_generation, now, now))
            if await created.fetchone() is None:
                raise conflict_error(state, 1)
            await conn.execute("UPDATE checkpoints SET base_session_id = %s, base_count = %s "
                               "WHERE session_id = %s", (parent_id, at, sid))
        return 1

    async def stored_revision(self, session_id: str) -> int | None:
        async with self.database.connection() as conn:
            row = await (await conn.execute(
                "SELECT revision FROM checkpoints WHERE session_id = %s", (session_id,)
            )).fetchone()
        return None if row is None else int(row[0])

    async def load_snapshot(self, session_id: str) -> tuple[SessionState, int] | None:
        async with self.database.connection() as conn:
            row = await (await conn.execute(_SNAPSHOT, (session_id,))).fetchone()
        if row is None:
            return None
        snapshot, revision, count, steps = row
        step_rows = [tuple(s) for s in json.loads(steps)] if steps else []
        return decode_session(session_id, snapshot, [], revision, step_rows), int(count)

    async def load_entries(self, session_id: str, start: int, stop: int) -> list[MemoryEntry]:
        start = max(0, start)
        async with self.database.connection() as conn:
            texts, marks = await _entries(conn, session_id, max(0, stop), start)
            found = await _fetch(conn, needed(marks.values())) if marks else {}
        entries = decode_entries(session_id, texts, start)
        return with_media(session_id, entries, marks, found, start) if marks else entries

    async def load_media(self, digest: str) -> Media | None:
        """``MediaStore``: the file stored under ``digest``."""
        async def read(conn: Any) -> Any:
            return await (await conn.execute(
                "SELECT media_type, data FROM media WHERE digest = %s", (digest,))).fetchone()

        row = await self.database.run(read)
        return None if row is None else Media(digest, row[0], bytes(row[1]))

    async def _write_step(self, session_id: str, step_id: str, kind: str, payload: str) -> None:
        async def write(conn: Any) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                               (STEP_LOCK, session_id))
            cur = await conn.execute(
                "SELECT max(updated_at) FROM step_updates WHERE session_id = %s", (session_id,))
            last = await cur.fetchone()
            at = next_update_time(None if last is None else last[0])
            await conn.execute(_UPSERT_STEP, (session_id, step_id, kind, payload, at))

        await self.database.run(write, transaction=True)

    async def delete_session(self, session_id: str) -> bool:
        removed = 0
        async with self.database.transaction() as conn:
            await conn.execute("SELECT 1 FROM checkpoints WHERE session_id = %s FOR UPDATE",
                               (session_id,))
            await _detach_branches(conn, session_id)
            gone, dropped = await drop_entries(conn, session_id)
            removed += gone
            for table in ("checkpoints", "step_updates"):
                cur = await conn.execute(f"DELETE FROM {table} WHERE session_id = %s",
                                         (session_id,))
                removed += cur.rowcount
            # Files no other entry refers to go with it, in the same transaction.
            await collect_media(conn, dropped)
        return removed > 0

    # -- SessionLeases --------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        params: dict[str, Any] = {"sid": session_id, "owner": owner, "ttl": ttl_seconds}
        return await self._rowcount(_ACQUIRE_LEASE, params) == 1

    async def renew_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        return await self._rowcount(
            "UPDATE session_leases SET expires_at = clock_timestamp() + "
            "make_interval(secs => %s) WHERE session_id = %s AND owner = %s",
            (float(ttl_seconds), session_id, owner),
        ) == 1

    async def release_lease(self, session_id: str, owner: str) -> bool:
        return await self._rowcount(
            "DELETE FROM session_leases WHERE session_id = %s AND owner = %s",
            (session_id, owner),
        ) == 1

    async def get_lease(self, session_id: str) -> Lease | None:
        async def read(conn: Any) -> Any:
            return await (await conn.execute(
                "SELECT owner, extract(epoch FROM expires_at - clock_timestamp())::float8 "
                "FROM session_leases WHERE session_id = %s AND expires_at > clock_timestamp()",
                (session_id,),
            )).fetchone()

        row = await self.database.run(read)
        return None if row is None else Lease(session_id, row[0], row[1])

    async def _rowcount(self, sql: str, params: Any) -> int:
        async def write(conn: Any) -> int:
            return int((await conn.execute(sql, params)).rowcount)

        return await self.database.run(write)

    async def close(self) -> None:
        """Close the database if this store opened it (idempotent)."""
        if self._owned:
            await self.database.close()


class _Read:
    """What a load reads: the session's rows, which of them refer to files (position →
    ``media`` column) and those files (digest → base64 text)."""

    __slots__ = ("count", "entries", "found", "marks", "revision", "snapshot", "steps")

    def __init__(self, snapshot: str, revision: int, count: int, entries: list[str],
                 steps: str | None, marks: dict[int, str], found: dict[str, str]) -> None:
        self.snapshot, self.revision, self.count = snapshot, revision, count
        self.entries, self.steps, self.marks, self.found = entries, steps, marks, found

    def missing(self) -> bool:
        return any(d not in self.found for d in needed(self.marks.values()))


async def _read(conn: Any, session_id: str) -> _Read | None:
    """A session's rows, its bases' shared ones and the files they refer to. The first
    statement reads everything a session without files needs."""
    # Binary: the entry array parses about twice as fast as its text form.
    row = await (await conn.execute(_LOAD, (session_id,), binary=True)).fetchone()
    if row is None:
        return None
    snapshot, revision, count, entries, steps, base, base_count, marked = row
    entries = list(entries)
    marks = _marks(marked, 0)
    if base is not None:
        shared, more = await _entries(conn, base, base_count)
        entries = shared + entries
        marks.update(more)
    found = await _fetch(conn, needed(marks.values())) if marks else {}
    return _Read(snapshot, revision, count, entries, steps, marks, found)


def _marks(marked: str | None, start: int) -> dict[int, str]:
    """``_MARKED``'s value as position (``seq - start``) → ``media`` column."""
    if not marked:
        return {}
    return {int(seq) - start: str(value) for seq, value in json.loads(marked)}


async def _fetch(conn: Any, wanted: list[str]) -> dict[str, str]:
    """The stored files among ``wanted``, as base64 text, in one query."""
    rows = await (await conn.execute(_MEDIA, (wanted,), binary=True)).fetchall()
    return {digest: base64_text(bytes(data)) for digest, data in rows}


async def _entries(conn: Any, session_id: str, upto: int, start: int = 0
                   ) -> tuple[list[str], dict[int, str]]:
    """The session's entry texts ``start`` to ``upto``, read through its bases, and
    which of them refer to files (position from ``start`` → ``media`` column)."""
    parts: list[list[str]] = []
    marks: dict[int, str] = {}
    sid, stop = session_id, upto
    for _ in range(_MAX_DEPTH):
        row = await (await conn.execute(_BASE, (sid,))).fetchone()
        base, count = (None, 0) if row is None else (row[0], int(row[1]))
        first = start if base is None else max(start, min(count, stop))
        got = await (await conn.execute(_RANGE, {"sid": sid, "start": first, "stop": stop})
                     ).fetchone()
        parts.append(list(got[0]) if got is not None else [])
        if got is not None:
            marks.update(_marks(got[1], start))
        if base is None or start >= count:
            break
        sid, stop = base, min(stop, count)
    else:
        raise CorruptSessionError(f"session {session_id}: its chain of bases does not end")
    return [text for part in reversed(parts) for text in part], marks


async def _append(conn: Any, session_id: str, start: int, texts: list[str],
                  refs: list[str | None]) -> None:
    """Insert entry rows from ``start``; ``refs``: each row's ``media`` column."""
    if refs.count(None) == len(refs):
        await conn.execute(_APPEND, (session_id, start, texts))
    else:
        await conn.execute(_APPEND_MEDIA, (session_id, start, texts, refs))


async def _detach_branches(conn: Any, session_id: str) -> None:
    """Give every branch based on ``session_id`` its own copy of the entries it shares
    (referring to the same stored files: those are not copied)."""
    children = await (await conn.execute(_CHILDREN, (session_id,))).fetchall()
    for child, count in children:
        shared, marks = await _entries(conn, session_id, int(count))
        if shared:
            await _append(conn, child, 0, shared, [marks.get(i) for i in range(len(shared))])
        await conn.execute(_DETACH, (child,))


async def drop_entries(conn: Any, session_id: str) -> tuple[int, list[str]]:
    """Delete the session's entry rows; how many, and the files they referred to."""
    row = await (await conn.execute(_DROP, (session_id,))).fetchone()
    return (0, []) if row is None else (int(row[0]), list(row[1] or []))


async def keep_media(conn: Any, files: list[Media]) -> None:
    """Make sure each file is stored when this transaction commits, whatever another
    process's delete does meanwhile: a stored file is locked (``FOR KEY SHARE``), so a
    garbage collection that wants it waits for this transaction and then sees its
    references; a missing one is inserted (invisible to others until the commit). A file
    another transaction inserted first is locked in the next round. Files are locked and
    inserted in digest order, as the collection locks them: two saves of the same files
    never wait for each other in a cycle."""
    missing = sorted(f.digest for f in media_rows(files))
    by_digest = {f.digest: f for f in files}
    for _ in range(_KEEP_ROUNDS):
        rows = await (await conn.execute(_KEEP_LOCK, (missing,))).fetchall()
        locked = {r[0] for r in rows}
        missing = [d for d in missing if d not in locked]
        now = time.time()
        for digest in list(missing):
            file = by_digest[digest]
            cur = await conn.execute(_KEEP_INSERT, (digest, file.media_type, file.size, now,
                                                    file.data))
            if await cur.fetchone() is not None:
                missing.remove(digest)
        if not missing:
            return
    raise StoreError("the files of this save could not be stored while other processes "
                     "stored and deleted them; nothing was written. Send the request again",
                     retryable=True)


_KEEP_ROUNDS = 8


async def collect_media(conn: Any, candidates: list[str]) -> None:
    """Delete the files among ``candidates`` that no entry row and no live uploaded file
    (``serve_files``) refers to any more, in the transaction that removed the references.
    Each is locked first (``FOR UPDATE``: a save referring to it again, or an upload of
    the same bytes, holds ``FOR KEY SHARE`` until it commits), and only then is the
    question asked, by a statement whose snapshot sees every such save."""
    if not candidates:
        return
    await conn.execute(_COLLECT_LOCK, (candidates,))
    await conn.execute(_COLLECT, (candidates,))


async def write_session(conn: Any, state: SessionState, texts: SnapshotTexts | None = None
                        ) -> int:
    """The statements of a save, inside the caller's transaction; the new revision."""
    snapshot = snapshot_json(state, texts)
    sid = state.session_id
    entries = state.memory_entries
    now = time.time()
    # Not pipelined: on a local server psycopg's pipeline mode cost ~100 µs more per
    # save than it saved in round trips (bench/README.md).
    row = await (await conn.execute(_LOCK_ROW, (sid,))).fetchone()
    dropped: list[str] = []
    if row is None:
        if state.revision != 0:
            raise conflict_error(state, None)
        created = await conn.execute(
            _CREATE, (sid, snapshot, len(entries), state.memory_generation, now, now))
        if await created.fetchone() is None:  # another process created it meanwhile
            raced = await (await conn.execute(_LOCK_ROW, (sid,))).fetchone()
            raise conflict_error(state, None if raced is None else int(raced[0]))
        _, dropped = await drop_entries(conn, sid)
        stored, start, new = 0, 0, entries
    else:
        stored, count, generation = row
        if state.revision != stored:
            raise conflict_error(state, stored)
        next_revision(sid, stored)
        plan = EntryPlan(state, count, generation)
        start, new = count, plan.new_entries
        if plan.rewrite:
            await _detach_branches(conn, sid)
            _, dropped = await drop_entries(conn, sid)
            await conn.execute(_DETACH, (sid,))
            start = 0
        await conn.execute(
            _UPDATE, (snapshot, len(entries), state.memory_generation, now, sid))
    if new:
        encoded = [encode_entry(e) for e in new]
        rows = [text for text, _ in encoded]
        moved = [files for _, files in encoded if files is not None]
        if moved:
            await keep_media(conn, [f for files in moved for f in files])
            await conn.execute(_APPEND_MEDIA, (sid, start, rows, [
                None if files is None else files_column(files) for _, files in encoded]))
        else:
            await conn.execute(_APPEND, (sid, start, rows))
    await collect_media(conn, dropped)  # after the new rows: a file they keep stays
    return int(stored) + 1
