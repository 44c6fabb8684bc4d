"""Session operations on PostgreSQL.

Export reads each session in one ``REPEATABLE READ`` transaction with a server-side
cursor for the entries, so a 100,000-entry session streams in constant memory. Import
writes one session per transaction. Search uses the GIN expression indexes of migration
``m006_search_index``; its query is ``plainto_tsquery``, so no syntax reaches the parser.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from nonoka.ops import stored
from nonoka.ops.backends.sql import (
    CHAIN,
    checks,
    kept_sessions,
    list_order_finding,
    media_findings,
    segments,
    title_match,
)
from nonoka.ops.batches import batches
from nonoka.ops.model import (
    EventRow,
    Finding,
    RawHit,
    SearchQuery,
    SessionHead,
    SessionSummary,
    Stats,
    StepRow,
)
from nonoka.ops.sharing import Facts, Lineage, attribute
from nonoka.store import index_sql
from nonoka.store.media import Media, digests, references
from nonoka.store.postgres.checkpoints import (
    PostgresCheckpointStore,
    collect_media,
    drop_entries,
    keep_media,
)
from nonoka.store.postgres.database import Jsonb, PostgresDatabase
from nonoka.store.postgres.records import write_index_row
from nonoka.store.postgres.schema import ENTRY_VECTOR, MEDIA_REFS, SEARCH_CONFIG
from nonoka.store.project import ProjectStores

BATCH = 1000
TABLES = ("checkpoints", "session_entries", "step_updates", "cli_sessions", "events",
          "session_leases", "nonoka_migrations", "media")
_PURPOSE = "coalesce(s.metadata ->> 'purpose', 'chat')"
_TSQUERY = f"plainto_tsquery('{SEARCH_CONFIG}', %(q)s)"


class PostgresOps:
    engine = "postgresql"

    def __init__(self, stores: ProjectStores) -> None:
        checkpoints = stores.checkpoints
        assert isinstance(checkpoints, PostgresCheckpointStore)
        self.database: PostgresDatabase = checkpoints.database

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[_Reader]:
        async with self.database.connection() as conn:
            yield _Reader(conn)
            if conn.info.transaction_status:
                await conn.execute("COMMIT")

    async def session_ids(self) -> list[str]:
        async with self.database.connection() as conn:
            rows = await (await conn.execute(
                "SELECT session_id FROM checkpoints ORDER BY session_id")).fetchall()
        return [r[0] for r in rows]

    async def write_session(self, head: SessionHead, entries: Iterable[str],
                            steps: list[StepRow], events: Iterable[EventRow],
                            index: dict[str, Any] | None,
                            media: Sequence[Media] = ()) -> bool:
        sid = head.session_id
        async with self.database.transaction() as conn:
            created = await conn.execute(
                "INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
                "memory_generation, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (session_id) DO NOTHING RETURNING 1",
                (sid, head.snapshot, head.revision, head.entry_count, head.memory_generation,
                 head.created_at, head.updated_at))
            if await created.fetchone() is None:
                return False
            _, dropped = await drop_entries(conn, sid)  # rows left without a checkpoint
            for table in ("step_updates", "events", "cli_sessions"):
                await conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (sid,))
            if media:
                await keep_media(conn, list(media))
            start = 0
            for batch in batches(entries):
                await conn.execute(
                    "INSERT INTO session_entries (session_id, seq, entry_json, media) "
                    "SELECT %s, %s + ord - 1, entry, refs FROM unnest(%s::text[], "
                    "%s::text[]) WITH ORDINALITY AS t(entry, refs, ord)",
                    (sid, start, batch, [references(text) for text in batch]))
                start += len(batch)
            await collect_media(conn, dropped)
            async with conn.cursor() as cur:
                if steps:
                    await cur.executemany(
                        "INSERT INTO step_updates (session_id, step_id, update_type, "
                        "payload_json, updated_at) VALUES (%s, %s, %s, %s, %s)",
                        [(sid, s.step_id, s.update_type, s.payload, s.updated_at)
                         for s in steps])
                for chunk in batches(events):
                    await cur.executemany(
                        "INSERT INTO events (session_id, seq, at, kind, data_json) "
                        "VALUES (%s, %s, %s, %s, %s::json)",
                        [(sid, e.seq, e.at, e.kind, e.data) for e in chunk])
            if index is not None:
                row = dict(index)
                row["metadata"] = Jsonb(row["metadata"])
                await write_index_row(conn, [row[c] for c in index_sql.COLUMNS])
        return True

    async def search(self, query: SearchQuery, words: list[str]) -> list[RawHit]:
        kept, params = kept_sessions(query, _PURPOSE, _mark)
        titles, title_params = title_match(words, "ILIKE", _mark)
        params.update(title_params, q=" ".join(words), limit=query.limit, one=query.session)
        entry_vector = ENTRY_VECTOR.format(e="e.entry_json")
        one = "" if query.session is None else " AND s.session_id = %(one)s"
        by_title = f"""
            SELECT s.session_id, -1, s.title, s.title, s.status, s.last_active
            FROM cli_sessions s WHERE {titles} AND {kept}{one}
            ORDER BY s.last_active DESC, s.session_id LIMIT %(limit)s"""
        async with self.database.connection() as conn:
            lineage = Lineage(await (await conn.execute(
                "SELECT session_id, base_session_id, base_count FROM checkpoints "
                "WHERE base_session_id IS NOT NULL")).fetchall())
            facts = await _facts(conn) if lineage else {}
            # A branch's base is kept whatever the filters: the branch may hold its rows.
            owners = f"({kept} OR e.session_id IN ({_BASES}))" if lineage else kept
            if query.session is not None:
                params["holders"] = lineage.holders(query.session)
                owners += " AND e.session_id = ANY(%(holders)s)"
            entries = f"""
                SELECT e.session_id, e.seq, e.entry_json, coalesce(s.title, ''),
                       coalesce(s.status, ''), s.last_active
                FROM session_entries e LEFT JOIN cli_sessions s ON s.session_id = e.session_id
                WHERE {entry_vector} @@ {_TSQUERY} AND {owners}
                ORDER BY s.last_active DESC NULLS LAST, e.session_id, e.seq DESC
                LIMIT %(limit)s OFFSET %(skip)s"""
            rows = [RawHit(*r) for r in await (await conn.execute(by_title, params)).fetchall()]
            skip = 0
            while len(rows) < query.limit:
                page = await (await conn.execute(entries, {**params, "skip": skip})).fetchall()
                skip += len(page)
                for sid, seq, text, title, status, last in page:
                    hit = attribute(RawHit(sid, int(seq), text, title, status, last),
                                    lineage, facts, query)
                    if hit is not None:
                        rows.append(hit)
                if len(page) < query.limit:
                    break
        return rows[: query.limit]

    async def summaries(self) -> list[SessionSummary]:
        sql = """
        SELECT c.session_id, coalesce(s.status, c.state_json::json ->> 'status', ''),
               coalesce(s.last_active, c.updated_at), coalesce(s.model, ''),
               coalesce(s.metadata ->> 'purpose', 'chat'), s.metadata ->> 'forked_from'
        FROM checkpoints c LEFT JOIN cli_sessions s ON s.session_id = c.session_id
        UNION ALL
        SELECT s.session_id, s.status, s.last_active, s.model,
               coalesce(s.metadata ->> 'purpose', 'chat'), s.metadata ->> 'forked_from'
        FROM cli_sessions s
        WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.session_id = s.session_id)"""
        async with self.database.connection() as conn:
            rows = await (await conn.execute(sql)).fetchall()
        return [SessionSummary(r[0], str(r[1] or ""), float(r[2] or 0), str(r[3]), str(r[4]),
                               r[5]) for r in rows]

    async def session_bytes(self, session_id: str) -> int:
        sql = f"""SELECT
            (SELECT coalesce(sum(octet_length(state_json)), 0) FROM checkpoints
             WHERE session_id = %(s)s) +
            (SELECT coalesce(sum(octet_length(entry_json)), 0) FROM session_entries
             WHERE session_id = %(s)s) +
            (SELECT coalesce(sum(octet_length(payload_json)), 0) FROM step_updates
             WHERE session_id = %(s)s) +
            (SELECT coalesce(sum(octet_length(data_json::text)), 0) FROM events
             WHERE session_id = %(s)s) +
            {_FREED_MEDIA}"""
        async with self.database.connection() as conn:
            row = await (await conn.execute(sql, {"s": session_id})).fetchone()
        return int(row[0]) if row else 0

    async def check(self) -> list[Finding]:
        found: list[Finding] = []
        async with self.database.transaction() as conn:
            own = ("c.entry_count - c.base_count" if await has_bases(conn)
                   else "c.entry_count")
            for sql, finding in checks(own):
                found += [finding(r) for r in await (await conn.execute(sql)).fetchall()]
            rows = await (await conn.execute(
                "SELECT indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON "
                "c.oid = i.indrelid WHERE c.relnamespace = current_schema()::regnamespace "
                "AND NOT (i.indisvalid AND i.indisready)")).fetchall()
            found += [Finding("error", "invalid_index", f"index {name} is not valid; "
                              "REINDEX it") for (name,) in rows]
            missing = await (await conn.execute(_MISSING_MEDIA)).fetchall()
            unreferenced = await (await conn.execute(_UNREFERENCED_MEDIA)).fetchall()
            kept = await (await conn.execute(
                "SELECT digest, data FROM media ORDER BY digest")).fetchall()
            found += media_findings(missing, unreferenced, kept)
        return found

    async def repair(self) -> list[Finding]:
        """Rebuild the session list's order, the one thing this engine derives from
        other columns; the findings repaired."""
        async with self.database.transaction() as conn:
            misplaced = [list_order_finding(sid) for (sid,) in await (await conn.execute(
                f"{index_sql.OUT_OF_PLACE} ORDER BY session_id")).fetchall()]
            if misplaced:
                await conn.execute(index_sql.REORDER)
        return misplaced

    async def vacuum(self) -> tuple[int, int]:
        before = await self._size()
        async with self.database.transaction() as conn:  # files no entry refers to
            rows = await (await conn.execute(_UNREFERENCED_MEDIA)).fetchall()
            await collect_media(conn, [r[0] for r in rows])
        async with self.database.connection() as conn:  # autocommit: VACUUM needs it
            for table in TABLES:
                await conn.execute(f"VACUUM (ANALYZE) {table}")
        return before, await self._size()

    async def table_health(self) -> list[tuple[str, int, int, int, float | None]]:
        """``(table, bytes with indexes and TOAST, live rows, dead rows, last vacuum as a
        Unix time)`` for each of nonoka's tables, from PostgreSQL's statistics views."""
        async with self.database.connection() as conn:
            rows = await (await conn.execute(
                "SELECT c.relname, pg_total_relation_size(c.oid), "
                "coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), "
                "extract(epoch FROM greatest(s.last_vacuum, s.last_autovacuum)) "
                "FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
                "AND c.relname = ANY(%s) ORDER BY 2 DESC", (list(TABLES),))).fetchall()
        return [(str(r[0]), int(r[1]), int(r[2]), int(r[3]),
                 None if r[4] is None else float(r[4])) for r in rows]

    async def _size(self) -> int:
        async with self.database.connection() as conn:
            row = await (await conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"
            )).fetchone()
        return int(row[0]) if row else 0

    async def stats(self, largest: int = 10) -> Stats:
        async with self.database.transaction() as conn:
            counts = await (await conn.execute(
                "SELECT (SELECT count(*) FROM checkpoints), (SELECT count(*) FROM "
                "session_entries), (SELECT count(*) FROM events), (SELECT count(*) FROM "
                "media), (SELECT coalesce(sum(size), 0) FROM media)")).fetchone()
            sizes = await (await conn.execute(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c WHERE "
                "c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
                "ORDER BY 2 DESC")).fetchall()
            top = await (await conn.execute(
                "SELECT session_id, count(*), sum(octet_length(entry_json)) AS b FROM "
                "session_entries GROUP BY session_id ORDER BY b DESC LIMIT %s",
                (largest,))).fetchall()
        assert counts is not None
        return Stats("postgresql", int(counts[0]), int(counts[1]), int(counts[2]),
                     {str(n): int(b) for n, b in sizes},
                     [(str(s), int(n), int(b)) for s, n, b in top], int(counts[3]),
                     int(counts[4]))


def _mark(name: str) -> str:
    return f"%({name})s"


_REFS = MEDIA_REFS.format(m="e.media")
_REFERENCED = ("(EXISTS (SELECT 1 FROM session_entries e WHERE e.media IS NOT NULL "
               f"AND {_REFS} @> ARRAY[{{d}}]) OR EXISTS (SELECT 1 FROM serve_files f "
               "WHERE f.deleted_at IS NULL AND f.digest = {d}))")
_MISSING_MEDIA = (f"SELECT e.session_id, e.seq, d FROM session_entries e, unnest({_REFS}) d "
                  "WHERE e.media IS NOT NULL AND NOT EXISTS (SELECT 1 FROM media m WHERE "
                  "m.digest = d) ORDER BY 1, 2, 3")
_UNREFERENCED_MEDIA = (f"SELECT m.digest, m.size FROM media m WHERE NOT "
                       f"{_REFERENCED.format(d='m.digest')} ORDER BY m.digest")
_FREED_MEDIA = f"""(SELECT coalesce(sum(m.size), 0) FROM media m
    WHERE m.digest IN (SELECT unnest({_REFS}) FROM session_entries e
                       WHERE e.session_id = %(s)s AND e.media IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM session_entries e WHERE e.media IS NOT NULL
                    AND e.session_id <> %(s)s AND {_REFS} @> ARRAY[m.digest])
    AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.base_session_id = %(s)s)
    AND NOT EXISTS (SELECT 1 FROM serve_files f WHERE f.deleted_at IS NULL
                    AND f.digest = m.digest))"""
"""The bytes of the files only the session refers to (what its delete frees; a session
that branches share keeps its files in the branches)."""


_BASES = "SELECT base_session_id FROM checkpoints WHERE base_session_id IS NOT NULL"


async def _facts(conn: Any) -> dict[str, Facts]:
    """The index rows of the sessions in a lineage (bases and branches)."""
    rows = await (await conn.execute(
        f"SELECT s.session_id, s.title, s.status, s.last_active, s.model, {_PURPOSE} "
        f"FROM cli_sessions s WHERE s.session_id IN ({_BASES} UNION SELECT session_id "
        "FROM checkpoints WHERE base_session_id IS NOT NULL)")).fetchall()
    return {r[0]: Facts(*r[1:]) for r in rows}


async def has_bases(conn: Any) -> bool:
    """Whether checkpoints name the session whose entries a branch shares (lineage)."""
    row = await (await conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'checkpoints' AND column_name = 'base_session_id'")).fetchone()
    return row is not None


class _Reader:
    """One ``REPEATABLE READ`` transaction per session, begun by ``head``."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def head(self, session_id: str) -> SessionHead | None:
        conn = self._conn
        if conn.info.transaction_status:
            await conn.execute("COMMIT")
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = await (await conn.execute(
            "SELECT session_id, state_json, revision, entry_count, memory_generation, "
            "created_at, updated_at FROM checkpoints WHERE session_id = %s",
            (session_id,))).fetchone()
        return None if row is None else stored.head(row)

    async def entries(self, session_id: str) -> AsyncIterator[list[tuple[int, str]]]:
        for sid, first, stop in await self._chain(session_id):
            async with self._conn.cursor(name="nonoka_export_entries") as cur:
                await cur.execute("SELECT seq, entry_json FROM session_entries "
                                  "WHERE session_id = %s AND seq >= %s AND seq < %s "
                                  "ORDER BY seq", (sid, first, 2**62 if stop is None else stop))
                while rows := await cur.fetchmany(BATCH):
                    yield [(int(seq), text) for seq, text in rows]

    async def _chain(self, session_id: str) -> list[tuple[str, int, int | None]]:
        """Where the session's entries live (``sql.segments``)."""
        if not await has_bases(self._conn):
            return [(session_id, 0, None)]
        links = await (await self._conn.execute(CHAIN.format(p="%s"), (session_id,))
                       ).fetchall()
        return segments(session_id, links)

    async def steps(self, session_id: str) -> list[StepRow]:
        rows = await (await self._conn.execute(
            "SELECT step_id, update_type, payload_json, updated_at FROM step_updates "
            "WHERE session_id = %s ORDER BY updated_at, id", (session_id,))).fetchall()
        return [StepRow(*r) for r in rows]

    async def events(self, session_id: str) -> AsyncIterator[EventRow]:
        async with self._conn.cursor(name="nonoka_export_events") as cur:
            cur.itersize = BATCH
            await cur.execute("SELECT seq, at, kind, data_json::text FROM events "
                              "WHERE session_id = %s ORDER BY seq", (session_id,))
            async for seq, at, kind, data in cur:
                yield EventRow(int(seq), float(at), kind, data)

    async def index(self, session_id: str) -> dict[str, Any] | None:
        row = await (await self._conn.execute(f"{index_sql.SELECT} WHERE session_id = %s",
                                              (session_id,))).fetchone()
        if row is None:
            return None
        record = dict(zip(index_sql.COLUMNS, row, strict=True))
        if isinstance(record["metadata"], str):
            record["metadata"] = json.loads(record["metadata"])
        return record

    async def files(self, session_id: str) -> list[str]:
        found: dict[str, None] = {}
        for sid, first, stop in await self._chain(session_id):
            rows = await (await self._conn.execute(
                "SELECT media FROM session_entries WHERE session_id = %s AND seq >= %s "
                "AND seq < %s AND media IS NOT NULL ORDER BY seq",
                (sid, first, 2**62 if stop is None else stop))).fetchall()
            for (value,) in rows:
                found.update(dict.fromkeys(digests(value)))
        return list(found)

    async def file(self, digest: str) -> Media | None:
        row = await (await self._conn.execute(
            "SELECT media_type, data FROM media WHERE digest = %s", (digest,))).fetchone()
        return None if row is None else Media(digest, row[0], bytes(row[1]))
