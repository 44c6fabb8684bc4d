"""Session operations on a SQLite file.

Reads for export use a connection of their own, one read transaction per session: a
consistent snapshot that never holds the store's lock or blocks a writer (WAL). Writes
(import) are one ``BEGIN IMMEDIATE`` transaction per session on the store's connection,
and store each entry row with its digest chain (``nonoka.store.sqlite.digests``), which
the runtime continues from when it appends.
Search runs on the FTS5 index of the entry rows, brought up to date first
(``nonoka.store.sqlite.entries``: the rules about entry rows, their index included).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, closing, suppress
from typing import Any

from nonoka.ops import stored
from nonoka.ops.backends import sqlite_chains as chains
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
from nonoka.ops.text import document_words, entry_text, fts5_query
from nonoka.store import index_sql
from nonoka.store.media import Media, digests, references
from nonoka.store.project import ProjectStores
from nonoka.store.sqlite import entries as entry_rows
from nonoka.store.sqlite import media as stored_media
from nonoka.store.sqlite import timeline
from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore
from nonoka.store.sqlite.database import connect_read_only, sqlite_error
from nonoka.store.sqlite.digests import Chain
from nonoka.store.sqlite.entries import LAST_SEQ, doc, rows_of
from nonoka.store.sqlite.packing import (
    EVENT_DICTIONARY,
    EVENT_MIN_SIZE,
    pack,
    register,
    unpack,
)
from nonoka.store.sqlite.records import write_index_row

BATCH = 1000
TABLES = ("checkpoints", "session_entries", "step_updates", "cli_sessions", "timeline",
          "session_numbers", "session_leases", "next_calls", "search_pending", "media")
_HEAD = ("SELECT session_id, state_json, revision, entry_count, memory_generation, "
         "created_at, updated_at FROM checkpoints WHERE session_id = ?")
_PURPOSE = "coalesce(json_extract(s.metadata, '$.purpose'), 'chat')"


class SQLiteOps:
    engine = "sqlite"

    def __init__(self, stores: ProjectStores) -> None:
        checkpoints = stores.checkpoints
        assert isinstance(checkpoints, SQLiteCheckpointStore)
        self.store = checkpoints
        self.path = checkpoints.path

    def _connect(self) -> closing[sqlite3.Connection]:
        if self.store.read_only:
            return closing(connect_read_only(self.path))
        db = sqlite3.connect(self.path, isolation_level=None, timeout=5.0)
        register(db)  # ``entry_text``: the search index's view reads entry rows with it
        return closing(db)

    # -- export -----------------------------------------------------------------------

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[_Reader]:
        try:
            with self._connect() as db:
                yield _Reader(db)
        except sqlite3.Error as exc:  # a row that is not UTF-8, a damaged page
            raise sqlite_error(self.path, exc) from None

    async def session_ids(self) -> list[str]:
        with self.store.transaction(write=False) as db:
            return [r[0] for r in db.execute(
                "SELECT session_id FROM checkpoints ORDER BY session_id")]

    # -- import -----------------------------------------------------------------------

    async def write_session(self, head: SessionHead, texts: Iterable[str],
                            steps: list[StepRow], events: Iterable[EventRow],
                            index: dict[str, Any] | None,
                            media: Sequence[Media] = ()) -> bool:
        sid = head.session_id
        with self.store.transaction() as db:
            if db.execute("SELECT 1 FROM checkpoints WHERE session_id = ?",
                          (sid,)).fetchone():
                return False
            dropped = stored_media.referenced_by(db, sid)  # rows left without a checkpoint
            entry_rows.delete_rows(db, sid, None)
            for table in ("step_updates", "cli_sessions"):
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
            timeline.delete(db, sid)
            stored_media.keep(db, media)
            block = entry_rows.new_block(db)
            db.execute(
                "INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
                "memory_generation, created_at, updated_at, entry_block) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (sid, head.snapshot, head.revision, head.entry_count, head.memory_generation,
                 head.created_at, head.updated_at, block))
            chain = Chain()  # the runtime appends after the digest of the last row
            for batch in batches(enumerate(texts)):
                rows = []
                for n, text in batch:
                    chain = chain.add(text)
                    rows.append((doc(block, n), sid, n, pack(text), chain.stored(),
                                 references(text)))
                db.executemany(entry_rows.INSERT, rows)
            stored_media.collect(db, dropped)
            db.executemany(
                "INSERT INTO step_updates (session_id, step_id, update_type, payload_json, "
                "updated_at) VALUES (?, ?, ?, ?, ?)",
                [(sid, s.step_id, s.update_type, s.payload, s.updated_at) for s in steps])
            for chunk in batches(events):
                number = timeline.number(db, sid)
                db.executemany(
                    timeline.INSERT,
                    [(number, e.seq, e.at, timeline.code(db, e.kind),
                      pack(e.data, EVENT_DICTIONARY, EVENT_MIN_SIZE)) for e in chunk])
            if index is not None:
                row = dict(index)
                row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False,
                                             allow_nan=False)
                write_index_row(db, [row[c] for c in index_sql.COLUMNS])
        return True

    # -- search -----------------------------------------------------------------------

    async def search(self, query: SearchQuery, words: list[str]) -> list[RawHit]:
        kept, params = kept_sessions(query, _PURPOSE, _mark)
        titles, title_params = title_match(words, "LIKE", _mark)
        params.update(title_params, q=fts5_query(words), limit=query.limit, one=query.session)
        self.catch_up()
        with self.store.transaction(write=False) as db:
            lineage = Lineage(db.execute(
                "SELECT session_id, base_session_id, base_count FROM checkpoints "
                "WHERE base_session_id IS NOT NULL"))
            facts = _facts(db) if lineage else {}
            one = "" if query.session is None else " AND s.session_id = :one"
            rows = [RawHit(*r) for r in db.execute(
                "SELECT s.session_id, -1, s.title, s.title, s.status, s.last_active "
                f"FROM cli_sessions s WHERE {titles} AND {kept}{one} "
                "ORDER BY s.last_active DESC, s.session_id LIMIT :limit", params)]
            # A branch's base is kept whatever the filters: the branch may hold its rows.
            owners = f"({kept} OR d.session_id IN ({_BASES}))" if lineage else kept
            if query.session is not None:
                holders = {f"h{n}": h for n, h in enumerate(lineage.holders(query.session))}
                params.update(holders)
                owners += f" AND d.session_id IN ({', '.join(map(_mark, holders))})"
            if self.store.read_only:  # not indexed yet, and cannot be here: read them
                wanted = set(words)
                for *_, sid, seq, text, title, status, last in db.execute(
                        f"{_PENDING} AND {owners} ORDER BY d.doc DESC", params):
                    text = unpack(text)
                    if len(rows) < query.limit and wanted <= document_words(
                            entry_text(text)[1]):
                        self._add(rows, RawHit(sid, int(seq), text, title, status, last),
                                  lineage, facts, query)
            # The FTS table drives the loop (CROSS JOIN) in doc order, newest session first
            # (``entries``: by when it was created), its latest entries first, so the
            # first page stops after ``limit`` matches however many entries match.
            entries = (
                "SELECT f.rowid, d.session_id, d.seq, d.entry_json, coalesce(s.title, ''), "
                "coalesce(s.status, ''), s.last_active "
                "FROM session_search f CROSS JOIN session_entries d ON d.doc = f.rowid "
                "LEFT JOIN cli_sessions s ON s.session_id = d.session_id "
                f"WHERE session_search MATCH :q AND f.rowid < :below AND {owners} "
                "ORDER BY f.rowid DESC LIMIT :limit")
            params["below"] = 2**63 - 1
            while len(rows) < query.limit:
                page = db.execute(entries, params).fetchall()
                for doc, sid, seq, text, title, status, last in page:
                    params["below"] = doc
                    self._add(rows, RawHit(sid, int(seq), unpack(text), title, status, last),
                              lineage, facts, query)
                if len(page) < query.limit:
                    break
        return rows[: query.limit]

    @staticmethod
    def _add(rows: list[RawHit], hit: RawHit, lineage: Lineage, facts: dict[str, Facts],
             query: SearchQuery) -> None:
        reported = attribute(hit, lineage, facts, query)
        if reported is not None:
            rows.append(reported)

    def catch_up(self) -> int:
        """Index the entries saved since the last search (``nonoka.store.sqlite.entries``);
        a read-only database is left as it is (its search reads those entries instead)."""
        if self.store.read_only:
            return 0
        try:
            with self._connect() as db:
                return entry_rows.catch_up(db)
        except sqlite3.Error as exc:  # a damaged index: the message says how to rebuild it
            raise sqlite_error(self.path, exc) from None

    # -- prune ------------------------------------------------------------------------

    async def summaries(self) -> list[SessionSummary]:
        sql = """
        SELECT c.session_id, coalesce(s.status, CASE WHEN json_valid(c.state_json) THEN
               json_extract(c.state_json, '$.status') END, ''),
               coalesce(s.last_active, c.updated_at), coalesce(s.model, ''),
               coalesce(json_extract(s.metadata, '$.purpose'), 'chat'),
               json_extract(s.metadata, '$.forked_from')
        FROM checkpoints c LEFT JOIN cli_sessions s ON s.session_id = c.session_id
        UNION ALL
        SELECT s.session_id, s.status, s.last_active, s.model,
               coalesce(json_extract(s.metadata, '$.purpose'), 'chat'),
               json_extract(s.metadata, '$.forked_from')
        FROM cli_sessions s WHERE s.session_id NOT IN (SELECT session_id FROM checkpoints)
        """
        with self.store.transaction(write=False) as db:
            rows = db.execute(sql).fetchall()
        return [SessionSummary(r[0], str(r[1] or ""), float(r[2] or 0), str(r[3]), str(r[4]),
                               r[5] if isinstance(r[5], str) else None) for r in rows]

    async def session_bytes(self, session_id: str) -> int:
        sql = """SELECT
            (SELECT coalesce(sum(length(CAST(state_json AS BLOB))), 0) FROM checkpoints
             WHERE session_id = ?1) +
            (SELECT coalesce(sum(length(CAST(entry_json AS BLOB))), 0) FROM session_entries
             WHERE {own}) +
            (SELECT coalesce(sum(length(CAST(payload_json AS BLOB))), 0) FROM step_updates
             WHERE session_id = ?1) +
            (SELECT coalesce(sum(length(CAST(data_json AS BLOB))), 0) FROM events
             WHERE session_id = ?1)""".format(own=rows_of("?1"))
        with self.store.transaction(write=False) as db:
            if has_media(db):
                sql += f" + {_FREED_MEDIA}"
            return int(db.execute(sql, (session_id,)).fetchone()[0])

    def settle(self) -> None:
        """Checkpoint the WAL without waiting for anyone (``PASSIVE``), between a bulk
        delete's streaks: the log then stays short, and a writer's commit never becomes
        the one that crosses the auto-checkpoint threshold and copies the bulk's pages."""
        if not self.store.read_only:
            with self._connect() as db:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    # -- maintenance ------------------------------------------------------------------

    async def check(self) -> list[Finding]:
        found: list[Finding] = []
        with self.store.transaction(write=False) as db:
            for (line,) in db.execute("PRAGMA integrity_check"):
                if line != "ok":
                    found.append(Finding("error", "integrity", str(line)))
            bases = has_bases(db)
            own = "c.entry_count - c.base_count" if bases else "c.entry_count"
            for sql, finding in checks(own):
                found += [finding(row) for row in db.execute(sql)]
            moved = _misplaced(db)  # their repair rebuilds the index too
            found += moved or [Finding("error", "search_index", f"{problem}; `nonoka db check "
                                       "--repair` rebuilds it from the entries, which are "
                                       "intact") for problem in entry_rows.index_findings(db)]
            found += chains.check(db, chains.links(db, bases))
            if has_media(db):
                found += media_findings(
                    db.execute(_MISSING_MEDIA), db.execute(_UNREFERENCED_MEDIA),
                    db.execute("SELECT digest, data FROM media ORDER BY digest"))
        return found

    async def repair(self) -> list[Finding]:
        """Move entry rows back to their session's place, rebuild the full-text index
        when they moved or it is damaged, rebuild the digest chain of each session whose
        chain is missing or wrong, one write transaction per session, and the session
        list's order; the findings repaired."""
        with self.store.transaction() as db:
            moved = _misplaced(db)
            damaged = [] if moved else [Finding("error", "search_index", problem)
                                        for problem in entry_rows.index_findings(db)]
            if moved:
                entry_rows.put_in_place(db)
            elif damaged:
                entry_rows.rebuild_index(db)
        with self.store.transaction(write=False) as db:
            bases = has_bases(db)
            broken = chains.check(db, chains.links(db, bases))
        for finding in broken:
            with self.store.transaction() as db:
                chains.rebuild(db, str(finding.session_id), bases)
        with self.store.transaction() as db:
            misplaced = [list_order_finding(sid) for (sid,) in db.execute(
                f"{index_sql.OUT_OF_PLACE} ORDER BY session_id")]
            if misplaced:
                db.execute(index_sql.REORDER)
        return [*moved, *damaged, *broken, *misplaced]

    async def vacuum(self) -> tuple[int, int]:
        before = self._size()
        if not self.store.read_only:
            with self.store.transaction() as db:  # files no entry refers to any more
                db.execute(f"DELETE FROM media WHERE NOT "
                           f"{_REFERENCED.format(d='media.digest')}")
                # released leases of no stored session, left by versions that kept them
                db.execute("DELETE FROM session_leases WHERE expires_at = 0 AND session_id "
                           "NOT IN (SELECT session_id FROM checkpoints)")
        self.catch_up()
        with self.store.transaction() as db:
            db.execute("INSERT INTO session_search (session_search) VALUES ('optimize')")
        db = self.store.connection
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA optimize")
        return before, self._size()

    def _size(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with suppress(OSError):
                total += os.stat(f"{self.path}{suffix}").st_size
        return total

    async def stats(self, largest: int = 10) -> Stats:
        with self.store.transaction(write=False) as db:
            files = ("(SELECT count(*) FROM media), (SELECT coalesce(sum(size), 0) FROM media)"
                     if has_media(db) else "0, 0")
            sessions, entries, events, files, file_bytes = db.execute(
                "SELECT (SELECT count(*) FROM checkpoints), (SELECT count(*) FROM "
                f"session_entries), (SELECT count(*) FROM events), {files}").fetchone()
            by_table: dict[str, int] = {}
            for name, size in db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
                owner = _owner(str(name))
                by_table[owner] = by_table.get(owner, 0) + int(size)
            top = db.execute(
                "SELECT session_id, count(*), sum(length(CAST(entry_json AS BLOB))) AS b "
                "FROM session_entries GROUP BY session_id ORDER BY b DESC LIMIT ?",
                (largest,)).fetchall()
        return Stats("sqlite", int(sessions), int(entries), int(events),
                     dict(sorted(by_table.items(), key=lambda kv: -kv[1])),
                     [(str(s), int(n), int(b)) for s, n, b in top], int(files),
                     int(file_bytes))


def _mark(name: str) -> str:
    return f":{name}"


_REFERENCED = stored_media.REFERENCED
_REFS = stored_media.REFS
_MISSING_MEDIA = (f"SELECT e.session_id, e.seq, j.value FROM session_entries e, "
                  f"{_REFS.format(m='e.media')} j WHERE e.media IS NOT NULL AND NOT EXISTS "
                  "(SELECT 1 FROM media m WHERE m.digest = j.value) ORDER BY 1, 2, 3")
_UNREFERENCED_MEDIA = (f"SELECT digest, size FROM media WHERE NOT "
                       f"{_REFERENCED.format(d='media.digest')} ORDER BY digest")
_FREED_MEDIA = f"""(SELECT coalesce(sum(m.size), 0) FROM media m
    WHERE m.digest IN (SELECT j.value FROM session_entries e, {_REFS.format(m='e.media')} j
                       WHERE {rows_of("?1", "e")} AND e.media IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM session_entries e, {_REFS.format(m='e.media')} j
                    WHERE e.media IS NOT NULL AND e.session_id <> ?1 AND j.value = m.digest)
    AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.base_session_id = ?1)
    AND NOT EXISTS (SELECT 1 FROM serve_files f WHERE f.deleted_at IS NULL
                    AND f.digest = m.digest))"""
"""The bytes of the files only the session refers to (what its delete frees; a session
that branches share keeps its files in the branches)."""


def _misplaced(db: sqlite3.Connection) -> list[Finding]:
    return [Finding("error", "entry_place", f"{n} entry row(s) out of the session's place: "
                    "it does not load until `nonoka db check --repair` moves them back", sid)
            for sid, n in entry_rows.misplaced(db)]


def has_media(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'media'"
                      ).fetchone() is not None




_BASES = "SELECT base_session_id FROM checkpoints WHERE base_session_id IS NOT NULL"
_PENDING = ("SELECT d.doc, d.session_id, d.seq, d.entry_json, coalesce(s.title, ''), "
            f"coalesce(s.status, ''), s.last_active FROM {entry_rows.WAITING.format(e='d')} "
            "LEFT JOIN cli_sessions s ON s.session_id = d.session_id WHERE 1")
"""The entries the full-text index does not hold yet (``nonoka.store.sqlite.entries``)."""


def _facts(db: sqlite3.Connection) -> dict[str, Facts]:
    """The index rows of the sessions in a lineage (bases and branches)."""
    return {sid: Facts(title, status, last, model, purpose)
            for sid, title, status, last, model, purpose in db.execute(
                f"SELECT s.session_id, s.title, s.status, s.last_active, s.model, {_PURPOSE} "
                f"FROM cli_sessions s WHERE s.session_id IN ({_BASES} UNION SELECT "
                "session_id FROM checkpoints WHERE base_session_id IS NOT NULL)")}


def has_bases(db: sqlite3.Connection) -> bool:
    """Whether checkpoints name the session whose entries a branch shares (lineage)."""
    return any(r[1] == "base_session_id" for r in db.execute("PRAGMA table_info(checkpoints)"))


def _owner(name: str) -> str:
    """The table an SQLite b-tree belongs to (indexes and FTS shadow tables folded in)."""
    if name.startswith("session_search"):
        return "session_search"
    if name.startswith("sqlite_autoindex_"):
        return name.removeprefix("sqlite_autoindex_").rsplit("_", 1)[0]
    for table in TABLES:
        if name.startswith(table):
            return table
    return name


_WINDOW = rows_of("?1", first="?2", last="?3")
"""Entries ``?2`` to ``?3`` (inclusive) of session ``?1``'s own rows."""


class _Reader:
    """A ``SessionReader``: each session is read inside one read transaction."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def head(self, session_id: str) -> SessionHead | None:
        db = self._db
        if db.in_transaction:
            db.execute("COMMIT")
        db.execute("BEGIN")  # held until the next session's head: one snapshot per session
        row = db.execute(_HEAD, (session_id,)).fetchone()
        return None if row is None else stored.head(row)

    async def entries(self, session_id: str) -> AsyncIterator[list[tuple[int, str]]]:
        for sid, first, stop in self._chain(session_id):
            last = first - 1
            while True:
                rows = self._db.execute(
                    f"SELECT seq, entry_json FROM session_entries WHERE {_WINDOW} "
                    "ORDER BY doc LIMIT ?4",
                    (sid, last + 1, LAST_SEQ if stop is None else stop - 1, BATCH)).fetchall()
                if rows:
                    yield [(seq, unpack(text)) for seq, text in rows]
                if len(rows) < BATCH:
                    break
                last = rows[-1][0]

    def _chain(self, session_id: str) -> list[tuple[str, int, int | None]]:
        """Where the session's entries live (``sql.segments``)."""
        if not has_bases(self._db):
            return [(session_id, 0, None)]
        return segments(session_id, self._db.execute(CHAIN.format(p="?"), (session_id,)))

    async def steps(self, session_id: str) -> list[StepRow]:
        return [StepRow(*r) for r in self._db.execute(
            "SELECT step_id, update_type, payload_json, updated_at FROM step_updates "
            "WHERE session_id = ? ORDER BY updated_at, rowid", (session_id,))]

    async def events(self, session_id: str) -> AsyncIterator[EventRow]:
        last = 0
        while True:
            rows = self._db.execute(
                "SELECT seq, at, kind, entry_text(data_json) FROM events WHERE session_id = ? "
                "AND seq > ? "
                "ORDER BY seq LIMIT ?", (session_id, last, BATCH)).fetchall()
            for row in rows:
                yield EventRow(*row)
            if len(rows) < BATCH:
                return
            last = rows[-1][0]

    async def index(self, session_id: str) -> dict[str, Any] | None:
        row = self._db.execute(f"{index_sql.SELECT} WHERE session_id = ?",
                               (session_id,)).fetchone()
        if row is None:
            return None
        return dict(zip(index_sql.COLUMNS, row, strict=True))  # metadata as JSON text

    async def files(self, session_id: str) -> list[str]:
        if not has_media(self._db):
            return []
        found: dict[str, None] = {}
        for sid, first, stop in self._chain(session_id):
            for (value,) in self._db.execute(
                    f"SELECT media FROM session_entries WHERE {_WINDOW} "
                    "AND media IS NOT NULL ORDER BY doc",
                    (sid, first, LAST_SEQ if stop is None else stop - 1)):
                found.update(dict.fromkeys(digests(value)))
        return list(found)

    async def file(self, digest: str) -> Media | None:
        return stored_media.load(self._db, digest) if has_media(self._db) else None

