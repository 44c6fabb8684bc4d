"""Everything ``nonoka ui`` reads from a project's database, and the actions it may take.

The rest of the ui package never imports the store: it calls ``UiData`` and gets back
the types re-exported here. Store modules, table names and the two SQL dialects are
known in this module only, so when storage is reorganised, lineage gets its own
columns or full-text search arrives, this is the one file to change (``_text_match`` is
the search switch; ``lineage_of`` reads ``forked_from``/``fork_point`` from the index
row's metadata; ``fork_session`` makes a branch, ``export_session`` writes JSON lines).

Reads go through the stores' own connections (``SQLiteCheckpointStore.transaction``, a
PostgreSQL store's ``database``), each in one read transaction, and page everything
that grows: sessions by keyset (no ``OFFSET``), conversation entries and events by
``seq``. A 10,000-entry session is never decoded whole to draw its first screen.

What the pages show is redacted here, on the way out (``nonoka.redact``): the
conversation, the timeline, titles. The database keeps what was stored; the export
action writes it unchanged (JSON lines are the lossless backup).
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nonoka.errors import ConfigurationError
from nonoka.redact import redact, redact_text
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import MediaStore, decode_entries, decode_session
from nonoka.store.media import IMAGE_TYPES, Media, describe, file_parts, is_digest
from nonoka.store.project import ProjectStores
from nonoka.store.records import EventRecord, SessionRecord, UsageSummary
from nonoka.store.sqlite.entries import LAST_SEQ, rows_of
from nonoka.store.sqlite.packing import unpack
from nonoka.turn.partial import CLOSING, PARTIAL, STORED

__all__ = (
    "IMAGE_TYPES",
    "EntryPage",
    "EntryRow",
    "EventRecord",
    "LineageNode",
    "Media",
    "NotAvailableError",
    "SessionPage",
    "SessionQuery",
    "SessionRecord",
    "SessionState",
    "UiData",
    "UsageSummary",
    "describe",
    "file_parts",
    "is_digest",
)

SORTS = {
    "last_active": "list_order",  # the same order, from an index (nonoka.store.index_sql)
    "created": "created_at",
    "turns": "turn_count",
    "tokens": "(input_tokens + output_tokens)",
    "cost": "cost_usd",
    "title": "title",
}
"""Sort keys the sessions page offers, and the SQL expression behind each."""
STATUSES = ("created", "running", "paused", "completed", "failed", "cancelled")
_COLUMNS = ("session_id", "title", "model", "created_at", "last_active", "status",
            "turn_count", "message_count", "input_tokens", "output_tokens", "cost_usd",
            "metadata")
COUNT_CAP = 10_000
"""Matches are counted up to here (``total`` is then ``COUNT_CAP + 1``): an exact count
of 100,000 rows costs more than the page itself."""
LINEAGE_DEPTH = 6
LINEAGE_BREADTH = 25


class NotAvailableError(ConfigurationError):
    """An action this version of nonoka cannot carry out yet."""


@dataclass(frozen=True)
class SessionQuery:
    """What the sessions page asks for: a search, filters, a sort and a page."""

    text: str = ""
    status: str = ""
    since: float | None = None
    until: float | None = None
    sort: str = "last_active"
    descending: bool = True
    after: str | None = None
    """Cursor: the page after the row it names."""
    before: str | None = None
    """Cursor: the page before the row it names."""
    everything: bool = False
    """Title-generation sessions too."""
    limit: int = 50


@dataclass(frozen=True)
class SessionPage:
    rows: list[SessionRecord]
    total: int
    """Matching sessions, counted up to ``COUNT_CAP + 1`` (see ``more_than_cap``)."""
    next_cursor: str | None
    prev_cursor: str | None

    @property
    def more_than_cap(self) -> bool:
        return self.total > COUNT_CAP


@dataclass(frozen=True)
class EntryRow:
    seq: int
    entry: MemoryEntry


@dataclass(frozen=True)
class EntryPage:
    """Entries ``rows`` (oldest first) of a conversation of ``total`` entries."""

    rows: list[EntryRow]
    total: int

    @property
    def first_seq(self) -> int:
        return self.rows[0].seq if self.rows else self.total

    @property
    def last_seq(self) -> int:
        return self.rows[-1].seq if self.rows else -1


@dataclass
class LineageNode:
    record: SessionRecord
    fork_point: int | None = None
    children: list[LineageNode] = field(default_factory=list)
    more: bool = False
    """Further branches exist beyond the ones listed."""
    label: str = ""
    """What the branch changed: its entry at the fork point (the edited message)."""
    subagent: bool = False
    """A subagent's session under the session of the conversation that started it."""


def fork_point_of(record: SessionRecord) -> int | None:
    value = record.metadata.get("fork_point")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parent_of(record: SessionRecord) -> str | None:
    value = record.metadata.get("forked_from")
    return value if isinstance(value, str) and value else None


# -- the two SQL engines -------------------------------------------------------------------


@runtime_checkable
class _SQLiteStore(Protocol):
    def transaction(self, *, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        ...


@runtime_checkable
class _PostgresStore(Protocol):
    @property
    def database(self) -> Any: ...


Statement = tuple[str, Sequence[object]]


_SHARED = """WITH RECURSIVE up (branch, base, upto, depth) AS (
    SELECT session_id, base_session_id, base_count, 0 FROM checkpoints
    WHERE base_session_id IS NOT NULL
    UNION ALL
    SELECT up.branch, c.base_session_id, {least}(up.upto, c.base_count), up.depth + 1
    FROM up JOIN checkpoints c ON c.session_id = up.base
    WHERE c.base_session_id IS NOT NULL AND up.depth < 10000)
SELECT up.branch FROM up JOIN session_entries e ON {own}
WHERE {content} {like} ? ESCAPE '\\'"""
"""The branches whose shared entries (stored with the sessions they came from, up each
branch's chain of bases) match a pattern."""


class _Dialect:
    """SQL written with ``?`` placeholders and ``{meta:name}`` JSON look-ups."""

    like = "LIKE"
    least = "min"

    def meta(self, name: str) -> str:
        return f"json_extract(metadata, '$.{name}')"

    def entry_content(self) -> str:
        return "json_extract(entry_text(e.entry_json), '$.content')"

    entry_order = "doc"
    """What orders a session's entry rows (here their rowids, ``nonoka.store.sqlite.entries``)."""

    def own_entries(self, session: str, first: str = "0", last: str = str(LAST_SEQ)) -> str:
        """A condition on entry rows ``e``: the session's own rows ``first`` to ``last``
        (SQL expressions; ``session`` appears in it three times, ``first`` and ``last``
        once, in that order: session, first, session, last, session)."""
        return rows_of(session, "e", first, last)

    def window(self, session_id: str, first: int, last: int) -> tuple[str, list[object]]:
        """``own_entries`` for parameters: the condition and its values."""
        return rows_of("?", "", "?", "?"), [session_id, first, session_id, last, session_id]

    def sql(self, text: str) -> str:
        return text


class _PostgresDialect(_Dialect):
    like = "ILIKE"
    least = "least"

    def meta(self, name: str) -> str:
        return f"(metadata ->> '{name}')"

    def entry_content(self) -> str:
        return "(e.entry_json::json ->> 'content')"

    entry_order = "seq"

    def own_entries(self, session: str, first: str = "0", last: str = str(LAST_SEQ)) -> str:
        return f"e.session_id = {session} AND e.seq BETWEEN {first} AND {last}"

    def window(self, session_id: str, first: int, last: int) -> tuple[str, list[object]]:
        return "session_id = ? AND seq BETWEEN ? AND ?", [session_id, first, last]

    def sql(self, text: str) -> str:
        return text.replace("%", "%%").replace("?", "%s")


class UiData:
    """Reads (and the allowed actions) over one project's open stores."""

    def __init__(self, stores: ProjectStores) -> None:
        self.stores = stores
        checkpoints = stores.checkpoints
        if isinstance(checkpoints, _SQLiteStore):
            self._dialect = _Dialect()
            self.engine = "sqlite"
        elif isinstance(checkpoints, _PostgresStore):
            self._dialect = _PostgresDialect()
            self.engine = "postgresql"
        else:
            raise ConfigurationError(
                f"nonoka ui reads a SQLite file or a PostgreSQL database, not {stores.url}")

    @property
    def url(self) -> str:
        return self.stores.url

    async def _query(self, *statements: Statement) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` in one read transaction; one row list per statement."""
        sqls = [(self._dialect.sql(text), list(params)) for text, params in statements]
        checkpoints = self.stores.checkpoints
        if isinstance(checkpoints, _SQLiteStore):
            with checkpoints.transaction(write=False) as db:
                return [db.execute(text, params).fetchall() for text, params in sqls]
        async with self._pg_transaction() as conn:
            return [await (await conn.execute(text, params)).fetchall() for text, params in sqls]

    @asynccontextmanager
    async def _pg_transaction(self) -> AsyncIterator[Any]:
        database = self.stores.checkpoints.database  # type: ignore[attr-defined]
        async with database.transaction() as conn:
            yield conn

    # -- sessions ---------------------------------------------------------------------

    async def list_sessions(self, query: SessionQuery) -> SessionPage:
        """One page of the index, by keyset on the sort key (fast at any depth)."""
        key = SORTS.get(query.sort, SORTS["last_active"])
        if query.text.strip():
            from nonoka.ops.search import prepare

            await prepare(self.stores)
        where, params = self._filters(query)
        cursor = _decode_cursor(query.before or query.after, textual=key == SORTS["title"])
        backwards = query.before is not None and cursor is not None
        # Going back reads the other way and flips the rows afterwards.
        descending = query.descending != backwards
        page_where = list(where)
        page_params = list(params)
        if cursor is not None:
            page_where.append(f"({key}, session_id) {'<' if descending else '>'} (?, ?)")
            page_params += cursor
        direction = "DESC" if descending else "ASC"
        select = (f"SELECT {', '.join(_COLUMNS)}, {key} FROM cli_sessions "
                  f"{_where(page_where)} "
                  f"ORDER BY {key} {direction}, session_id {direction} LIMIT ?")
        count = (f"SELECT count(*) FROM (SELECT 1 FROM cli_sessions {_where(where)} "
                 f"LIMIT {COUNT_CAP + 1}) AS capped")
        rows, total = await self._query((select, [*page_params, query.limit + 1]),
                                        (count, params))
        records = await self._live([self._record(r[:-1]) for r in rows[: query.limit]])
        sort_values = {r[0]: r[-1] for r in rows}
        more = len(rows) > query.limit
        if backwards:
            records.reverse()
        first, last = (records[0], records[-1]) if records else (None, None)
        has_prev = more if backwards else cursor is not None
        has_next = True if backwards else more
        return SessionPage(
            rows=[_shown_record(r) for r in records], total=int(total[0][0]),
            next_cursor=(_encode_cursor(last, sort_values[last.session_id])
                         if has_next and last else None),
            prev_cursor=(_encode_cursor(first, sort_values[first.session_id])
                         if has_prev and first else None))

    def _filters(self, query: SessionQuery) -> tuple[list[str], list[object]]:
        where: list[str] = []
        params: list[object] = []
        if not query.everything:
            where.append(f"coalesce({self._dialect.meta('purpose')}, 'chat') = 'chat'")
        if query.status:
            where.append("status = ?")
            params.append(query.status)
        # Each time bound also bounds ``list_order`` (implied by it: every row but the
        # list's top has ``list_order = last_active``, and the top's is the highest and
        # at most its ``last_active``), so the list order's index reads only the window.
        if query.since is not None:
            where.append(f"last_active >= ? AND list_order >= {self._dialect.least}(?, "
                         "(SELECT max(list_order) FROM cli_sessions))")
            params += [query.since, query.since]
        if query.until is not None:
            where.append("last_active < ? AND list_order < ?")
            params += [query.until, query.until]
        text = query.text.strip()
        if text:
            clause, values = self._text_match(text)
            where.append(clause)
            params += values
        return where, params

    def _text_match(self, text: str) -> tuple[str, list[object]]:
        """The search: title, model, id prefix and the conversation's text, literally.

        The full-text index (``nonoka.ops.search``) picks the sessions whose entries hold
        the words of ``text``; only their entries are then matched by pattern, so a
        search over a large database does not read every entry.
        """
        from nonoka.ops.search import session_match

        like = self._dialect.like
        pattern = "%" + _escape_like(text) + "%"
        own = self._dialect.own_entries("cli_sessions.session_id")
        entries = (f"EXISTS (SELECT 1 FROM session_entries e WHERE {own} AND "
                   f"{self._dialect.entry_content()} {like} ? ESCAPE '\\')")
        params: list[object] = [pattern, pattern, _escape_like(text) + "%"]
        indexed = session_match(self.engine, text)
        if indexed is None:
            params.append(pattern)
        else:
            entries = f"({indexed[0]} AND {entries})"
            params += [*indexed[1], pattern]
        shared = _SHARED.format(least=self._dialect.least, content=self._dialect.entry_content(),
                                own=self._dialect.own_entries("up.base", last="up.upto - 1"),
                                like=like)
        params.append(pattern)
        clause = (f"(title {like} ? ESCAPE '\\' OR model {like} ? ESCAPE '\\' OR "
                  f"session_id LIKE ? ESCAPE '\\' OR {entries} OR "
                  f"cli_sessions.session_id IN ({shared}))")
        return clause, params

    async def get_session(self, ref: str) -> SessionRecord | None:
        """The session whose id is ``ref`` (or the only one starting with it)."""
        if not ref:
            return None
        found = await self.stores.index.get_session(ref)
        if found is None:
            candidates = await self.stores.index.find_sessions_by_prefix(ref, limit=2)
            found = candidates[0] if len(candidates) == 1 else None
        return None if found is None else _shown_record((await self._live([found]))[0])

    async def _live(self, records: list[SessionRecord]) -> list[SessionRecord]:
        """``records`` showing their live status: ``running`` while a process runs a turn,
        ``interrupted`` when one died mid-turn (``nonoka.turn.status``)."""
        from nonoka.turn.status import live_statuses, with_live_status

        live = await live_statuses(self.stores, records)
        return [with_live_status(r, live[r.session_id]) for r in records]

    def _record(self, row: Sequence[Any]) -> SessionRecord:
        values = dict(zip(_COLUMNS, row, strict=True))
        meta = values["metadata"]
        values["metadata"] = json.loads(meta) if isinstance(meta, str | bytes) else meta
        return SessionRecord.model_validate(values)

    # -- one session ------------------------------------------------------------------

    async def snapshot(self, session_id: str) -> SessionState | None:
        """The stored state without its conversation (plan, steps, ledger, counters)."""
        order = "updated_at, rowid" if self.engine == "sqlite" else "updated_at, id"
        head, steps = await self._query(
            ("SELECT state_json, revision FROM checkpoints WHERE session_id = ?", [session_id]),
            ("SELECT step_id, update_type, payload_json, updated_at FROM step_updates "
             f"WHERE session_id = ? ORDER BY {order}", [session_id]))
        if not head:
            return None
        snapshot, revision = head[0]
        return decode_session(session_id, snapshot, [], int(revision), steps)

    async def entries(self, session_id: str, *, before: int | None = None,
                      after: int | None = None, limit: int = 50) -> EntryPage:
        """A page of the conversation: the ``limit`` entries before ``before`` (the latest
        when neither bound is given) or after ``after``; ``total`` is the entry count."""
        order = self._dialect.entry_order
        if after is not None:
            where, params = self._dialect.window(session_id, max(0, min(after, LAST_SEQ) + 1),
                                                 LAST_SEQ)
            select: Statement = (f"SELECT seq, entry_json FROM session_entries WHERE {where} "
                                 f"ORDER BY {order} LIMIT ?", [*params, limit])
        else:
            bound = min(before, LAST_SEQ + 1) if before is not None else LAST_SEQ + 1
            where, params = self._dialect.window(session_id, 0, bound - 1)
            select = (f"SELECT seq, entry_json FROM session_entries WHERE {where} "
                      f"ORDER BY {order} DESC LIMIT ?", [*params, limit])
        rows, count = await self._query(
            select, ("SELECT entry_count FROM checkpoints WHERE session_id = ?", [session_id]))
        rows = sorted(rows)
        decoded = decode_entries(session_id, [unpack(r[1]) for r in rows])
        return EntryPage([EntryRow(int(r[0]), _shown_entry(e))
                          for r, e in zip(rows, decoded, strict=True)],
                         int(count[0][0]) if count else 0)

    async def events(self, session_id: str, *, after: int = 0,
                     limit: int = 500) -> list[EventRecord]:
        """Events after ``seq`` ``after``, oldest first; with ``after=0`` the latest
        ``limit`` (the head of a very long log is left out)."""
        data = "entry_text(data_json)" if self.engine == "sqlite" else "data_json::text"
        if after:
            statement: Statement = (f"SELECT seq, at, kind, {data} FROM events WHERE "
                                    "session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                                    [session_id, after, limit])
        else:
            statement = (f"SELECT seq, at, kind, {data} FROM events WHERE session_id = ? "
                         "ORDER BY seq DESC LIMIT ?", [session_id, limit])
        (rows,) = await self._query(statement)
        return [EventRecord(session_id=session_id, seq=int(seq), at=float(at), kind=kind,
                            data=redact(json.loads(text)))
                for seq, at, kind, text in sorted(rows)]

    async def unfinished_events(self, session_id: str) -> list[EventRecord]:
        """The pieces of every streamed answer no stored answer followed, with the entry
        that closed each (``nonoka.turn.partial``), from the whole log however long: an
        answer cut short stays on the page after ``events``' window has moved on. The
        pieces a stored answer followed (most of them) are not read."""
        data = "entry_text(data_json)" if self.engine == "sqlite" else "data_json::text"
        closing = ", ".join(f"'{kind}'" for kind in CLOSING)
        next_closing = (f"(SELECT e.seq FROM events e WHERE e.session_id = p.session_id "
                        f"AND e.seq > p.seq AND e.kind IN ({closing}) ORDER BY e.seq LIMIT 1)")
        statement: Statement = (
            f"WITH pieces AS (SELECT p.seq, {next_closing} AS closed FROM events p "
            f"WHERE p.session_id = ? AND p.kind = '{PARTIAL}'), "
            "cut AS (SELECT p.seq, p.closed FROM pieces p LEFT JOIN events c ON "
            "c.session_id = ? AND c.seq = p.closed "
            f"WHERE c.kind IS NULL OR c.kind <> '{STORED}') "
            f"SELECT seq, at, kind, {data} FROM events WHERE session_id = ? AND seq IN ("
            "SELECT seq FROM cut UNION SELECT closed FROM cut WHERE closed IS NOT NULL) "
            "ORDER BY seq", [session_id, session_id, session_id])
        (rows,) = await self._query(statement)
        return [EventRecord(session_id=session_id, seq=int(seq), at=float(at), kind=kind,
                            data=redact(json.loads(text)))
                for seq, at, kind, text in rows]

    async def usage(self, session_id: str) -> UsageSummary:
        return await self.stores.events.usage_summary(session_id)

    async def media(self, digest: str) -> Media | None:
        """A stored file by its digest (``nonoka.store.media``). Entries come back from
        ``entries`` with their files' references, never their bytes: the page asks for
        each image on its own."""
        checkpoints = self.stores.checkpoints
        if not is_digest(digest) or not isinstance(checkpoints, MediaStore):
            return None
        return await checkpoints.load_media(digest)

    async def is_running(self, session_id: str) -> bool:
        """Whether a live process runs a turn of the session now (``nonoka.turn.status``)."""
        from nonoka.turn.status import RUNNING, live_status

        record = await self.stores.index.get_session(session_id)
        if record is None:
            return await self.stores.leases.get_lease(session_id) is not None
        return (await live_status(self.stores, record)).status == RUNNING

    async def revision(self, session_id: str) -> str:
        """A token that changes whenever anything shown for the session changes."""
        head, events, row = await self._query(
            ("SELECT revision, entry_count FROM checkpoints WHERE session_id = ?", [session_id]),
            ("SELECT max(seq) FROM events WHERE session_id = ?", [session_id]),
            ("SELECT last_active, status FROM cli_sessions WHERE session_id = ?", [session_id]))
        parts = [*(head[0] if head else (0, 0)), events[0][0] if events else 0,
                 *(row[0] if row else (0, ""))]
        return ".".join(str(p or 0) for p in parts)

    # -- lineage ----------------------------------------------------------------------

    async def lineage_of(self, record: SessionRecord) -> LineageNode:
        """The tree ``record`` belongs to: from its oldest known ancestor down, at most
        ``LINEAGE_DEPTH`` levels and ``LINEAGE_BREADTH`` branches a node."""
        root = record
        seen = {record.session_id}
        for _ in range(LINEAGE_DEPTH):
            parent_id = parent_of(root) or await self._subagent_parent(root)
            if parent_id is None or parent_id in seen:
                break
            parent = await self.stores.index.get_session(parent_id)
            if parent is None:
                break
            seen.add(parent_id)
            root = _shown_record(parent)
        node = LineageNode(root, fork_point_of(root))
        await self._grow(node, LINEAGE_DEPTH, {root.session_id})
        return node

    async def _grow(self, node: LineageNode, depth: int, seen: set[str]) -> None:
        if depth <= 0:
            return
        meta = self._dialect.meta("forked_from")
        (rows,) = await self._query(
            (f"SELECT {', '.join(_COLUMNS)} FROM cli_sessions WHERE {meta} = ? "
             "ORDER BY created_at, session_id LIMIT ?",
             [node.record.session_id, LINEAGE_BREADTH + 1]))
        children = [_shown_record(self._record(r)) for r in rows]
        node.more = len(children) > LINEAGE_BREADTH
        for child in children[:LINEAGE_BREADTH]:
            if child.session_id in seen:
                continue
            seen.add(child.session_id)
            branch = LineageNode(child, fork_point_of(child))
            branch.label = await self._entry_text(child.session_id, branch.fork_point)
            node.children.append(branch)
            await self._grow(branch, depth - 1, seen)
        await self._grow_subagents(node, depth, seen)

    async def _subagent_parent(self, record: SessionRecord) -> str | None:
        """The session of the host conversation that started ``record`` (a subagent's)."""
        from nonoka.turn.lineage import parent_line

        host = record.metadata.get("host_parent_session_id")
        if not isinstance(host, str) or not host:
            return None
        return parent_line(record, await self._host_line(host))

    async def _host_line(self, host: str) -> list[SessionRecord]:
        """The sessions of the host conversation ``host`` (an index that cannot tell: none)."""
        from nonoka.store.records import HostSessions

        index = self.stores.index
        return (await index.find_by_host_session(host)
                if isinstance(index, HostSessions) else [])

    async def _grow_subagents(self, node: LineageNode, depth: int, seen: set[str]) -> None:
        """The subagents' sessions that ``node``'s host conversation started and that
        belong under ``node`` (``nonoka.turn.lineage.parent_line``)."""
        from nonoka.turn.lineage import parent_line

        host = node.record.host_session_id
        if not host:
            return
        meta = self._dialect.meta("host_parent_session_id")
        (rows,) = await self._query(
            (f"SELECT {', '.join(_COLUMNS)} FROM cli_sessions WHERE {meta} = ? "
             "ORDER BY created_at, session_id LIMIT ?", [host, LINEAGE_BREADTH + 1]))
        line = await self._host_line(host)
        kids = [_shown_record(self._record(r)) for r in rows]
        node.more = node.more or len(kids) > LINEAGE_BREADTH
        for child in kids[:LINEAGE_BREADTH]:
            if child.session_id in seen or child.metadata.get("forked_from") or (
                    parent_line(child, line) != node.record.session_id):
                continue
            seen.add(child.session_id)
            kid = LineageNode(child, None, subagent=True)
            node.children.append(kid)
            await self._grow(kid, depth - 1, seen)

    async def _entry_text(self, session_id: str, seq: int | None) -> str:
        if seq is None:
            return ""
        page = await self.entries(session_id, after=seq - 1, limit=1)
        return page.rows[0].entry.content if page.rows and page.rows[0].seq == seq else ""

    # -- actions ----------------------------------------------------------------------

    async def cancel_session(self, session_id: str) -> bool:
        """Cancel the session as ``Runner.cancel_session`` does (the running process
        stops at its next save); the index row and the timeline record it."""
        from nonoka.runtime.runner import Runner

        cancelled = await Runner(self.stores.checkpoints).cancel_session(session_id)
        if cancelled:
            row = await self.stores.index.get_session(session_id)
            if row is not None:
                await self.stores.index.upsert_session(
                    row.model_copy(update={"status": "cancelled", "last_active": time.time()}))
            await self.stores.events.append_event(
                session_id, "cancel", {"source": "nonoka ui", "detail": "cancelled on request"})
        return cancelled

    async def fork_session(self, session_id: str, entry: int) -> str:
        """A new session holding the conversation up to and including entry ``entry``
        (a branch: ``nonoka.turn.lineage``); its id."""
        from nonoka.turn.lineage import fork_session

        try:
            return await fork_session(self.stores, session_id, entry + 1, reason="nonoka ui")
        except ConfigurationError as exc:
            raise NotAvailableError(str(exc)) from None

    async def export_session(self, session_id: str) -> bytes:
        """The session as JSON lines, the lossless format of ``nonoka sessions export``."""
        from io import StringIO

        from nonoka.ops.export import export_jsonl

        out = StringIO()
        try:
            await export_jsonl(self.stores, [session_id], out)
        except KeyError as exc:
            raise NotAvailableError(f"session {session_id} is not stored") from exc
        return out.getvalue().encode()


def _shown_record(record: SessionRecord) -> SessionRecord:
    """An index row as the pages show it: its title redacted (again: it was when written,
    perhaps before a shape was known)."""
    return record.model_copy(update={"title": redact_text(record.title)})


def _shown_entry(entry: MemoryEntry) -> MemoryEntry:
    """A conversation entry as the pages show it: its text and tool-call arguments
    redacted whole."""
    return entry.model_copy(update={"content": redact_text(entry.content),
                                    "metadata": redact(entry.metadata)})


def _where(clauses: Sequence[str]) -> str:
    return "WHERE " + " AND ".join(clauses) if clauses else ""


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _encode_cursor(record: SessionRecord, sort_value: object) -> str:
    """Where a page ends: the row's value of the sort key, as the database gave it, and
    its id."""
    raw = json.dumps([sort_value, record.session_id])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str | None, *, textual: bool) -> list[object] | None:
    """``[sort value, session id]``, or ``None`` for a missing or malformed cursor, or one
    whose sort value the database could not compare with the sort key (``textual``: the
    key is text)."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)
            and _sortable(value[0], textual)):
        return value
    return None


def _sortable(value: object, textual: bool) -> bool:
    """Text for a text key; for a numeric key a number inside 64 bits (JSON also spells
    ``1e999``, ``NaN`` and integers of any length)."""
    if textual or isinstance(value, str | bool):
        return textual and isinstance(value, str)
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return isinstance(value, float) and math.isfinite(value)
