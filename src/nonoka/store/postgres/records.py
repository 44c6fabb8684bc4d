"""The session index and event log in PostgreSQL, next to the checkpoints.

The tables come from migration ``m002_session_index_and_events`` of
``nonoka.store.postgres.migrations``. Index metadata is ``jsonb`` with an expression index
for the conversation-key lookup; event data is ``json`` (kept as written) and the usage
summary is aggregated in SQL, so only the totals leave the database. Each session's
event ``seq`` is computed under a per-session advisory lock, so concurrent writers from
any number of processes never pick the same number.
"""

from __future__ import annotations

import time
from typing import Any

from nonoka.store import index_sql
from nonoka.store.postgres.database import Jsonb, PostgresDatabase
from nonoka.store.postgres.schema import EVENT_LOCK
from nonoka.store.records import (
    EventRecord,
    SessionRecord,
    UsageSummary,
    event_json,
    event_of,
    record_of,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nonoka.state.session_state import SessionState

_COLUMNS = index_sql.COLUMNS
_SELECT = index_sql.SELECT
_UPSERT = index_sql.upsert("%s")
_WRITE_ROW = f"WITH settled AS ({index_sql.settle_top('%s')} RETURNING 1) {_UPSERT}"
"""``index_sql``'s two steps in one statement (one round trip). The upsert does not see
the settled row's new ``list_order`` (one snapshot), and need not: a row below a stale
top is never kept in place, whatever the top's value."""
# Must match the index expressions in m009 exactly, or the planner will not use them.
_KEY = "(metadata ->> 'conversation_key')"
_PURPOSE = "coalesce(metadata ->> 'purpose', 'chat')"
_ORDER = index_sql.ORDER
_HOST = "(metadata ->> 'host_session_id')"

_APPEND = """
INSERT INTO events (session_id, seq, at, kind, data_json)
SELECT %(sid)s, coalesce(max(seq), 0) + 1, %(at)s, %(kind)s, %(data)s::json
FROM events WHERE session_id = %(sid)s
"""


def _number(field: str, *, integer: bool = False) -> str:
    """The sum of a model-call data field over the values that are JSON numbers.

    ``json_typeof`` tells ``true`` from ``1``; integers are truncated per value, as
    ``int()`` does in the memory engine.
    """
    value = f"(data_json ->> '{field}')::numeric"
    if integer:
        value = f"trunc({value})"
    picked = (f"CASE WHEN kind = 'model_call' AND json_typeof(data_json -> '{field}') "
              f"= 'number' THEN {value} END")
    return f"coalesce(sum({picked}), 0)::{'bigint' if integer else 'float8'}"


_SUMMARY = f"""
SELECT count(*) FILTER (WHERE kind = 'model_call'), {_number('input_tokens', integer=True)},
       {_number('output_tokens', integer=True)}, {_number('cost_usd')},
       count(*) FILTER (WHERE kind = 'tool_call'), count(*) FILTER (WHERE kind = 'error'),
       count(*) FILTER (WHERE kind = 'warning'),
       {_number('cache_read_tokens', integer=True)},
       {_number('cache_write_tokens', integer=True)},
       {_number('reasoning_tokens', integer=True)}
FROM events WHERE session_id = %s
"""


class PostgresRecordStore:
    """``SessionIndex`` and ``EventLog`` in a PostgreSQL database.

    Given a URL it opens and owns its own ``PostgresDatabase``; given one (e.g. a
    checkpoint store's ``database``) it borrows it, and ``close()`` leaves it open.
    """

    def __init__(self, database: str | PostgresDatabase, *, schema: str | None = None) -> None:
        self._owned = not isinstance(database, PostgresDatabase)
        self.database = (database if isinstance(database, PostgresDatabase) else
                         PostgresDatabase(database, schema=schema))

    # -- SessionIndex ---------------------------------------------------------------------

    async def upsert_session(self, record: SessionRecord) -> None:
        async def write(conn: Any) -> None:
            await _write_row(conn, record)

        await self.database.run(write)

    async def create_session(self, state: SessionState, record: SessionRecord) -> int:
        """``CreatesIndexed``: the first snapshot and the row in one transaction."""
        from nonoka.store.postgres.checkpoints import write_session

        async def write(conn: Any) -> int:
            revision = await write_session(conn, state)
            await _write_row(conn, record)
            return revision

        return await self.database.run(write, transaction=True)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        found = await self._select("WHERE session_id = %s", session_id)
        return found[0] if found else None

    async def find_sessions_by_prefix(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        # LIKE is case-sensitive, and on a "C"-collated key it uses the primary key.
        pattern = "".join(f"\\{c}" if c in "\\%_" else c for c in prefix) + "%"
        return await self._select(f"WHERE session_id LIKE %s {_ORDER} LIMIT %s", pattern,
                                  max(limit, 0))

    async def find_by_conversation_key(
        self, key: str, *, purpose: str = "chat"
    ) -> list[SessionRecord]:
        if not key:
            return []
        return await self._select(f"WHERE {_KEY} = %s AND {_PURPOSE} = %s {_ORDER}", key,
                                  purpose)

    async def find_by_host_session(self, host_session_id: str, *, purpose: str = "chat"
                                   ) -> list[SessionRecord]:
        if not host_session_id:
            return []
        return await self._select(f"WHERE {_HOST} = %s AND {_PURPOSE} = %s {_ORDER}",
                                host_session_id, purpose)

    async def list_sessions(
        self, limit: int = 50, *, purpose: str | None = "chat"
    ) -> list[SessionRecord]:
        if purpose is None:
            return await self._select(f"{_ORDER} LIMIT %s", max(limit, 0))
        return await self._select(f"WHERE {_PURPOSE} = %s {_ORDER} LIMIT %s", purpose,
                                  max(limit, 0))

    async def delete_session_record(self, session_id: str) -> bool:
        """Remove the row and the session's events; ``False`` when neither existed."""
        removed = 0
        async with self.database.transaction() as conn:
            for table in ("cli_sessions", "events"):
                cur = await conn.execute(f"DELETE FROM {table} WHERE session_id = %s",
                                         (session_id,))
                removed += cur.rowcount
        return removed > 0

    async def _select(self, where: str, *params: object) -> list[SessionRecord]:
        async def read(conn: Any) -> list[Any]:
            return list(await (await conn.execute(f"{_SELECT} {where}", params)).fetchall())

        rows = await self.database.run(read)
        return [record_of(dict(zip(_COLUMNS, r, strict=True))) for r in rows]

    # -- EventLog -------------------------------------------------------------------------

    async def append_event(self, session_id: str, kind: str, data: dict[str, Any]) -> None:
        await self.append_events(session_id, [(kind, data)])

    async def append_events(self, session_id: str,
                            events: Sequence[tuple[str, dict[str, Any]]], *,
                            record: SessionRecord | None = None) -> None:
        """``AppendsTogether``: the events and the row in one transaction. Each event gets
        the next ``seq``, computed under the session's advisory lock."""
        now = time.time()
        rows = [{"sid": session_id, "at": now, "kind": kind, "data": event_json(data)}
                for kind, data in events]

        async def write(conn: Any) -> None:
            if rows:
                await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                                   (EVENT_LOCK, session_id))
            for params in rows:
                await conn.execute(_APPEND, params)
            if record is not None:
                await _write_row(conn, record)

        await self.database.run(write, transaction=True)

    async def list_events(self, session_id: str, limit: int = 50) -> list[EventRecord]:
        async with self.database.connection() as conn:
            rows = await (await conn.execute(
                "SELECT seq, at, kind, data_json::text FROM events WHERE session_id = %s "
                "ORDER BY seq DESC LIMIT %s",
                (session_id, max(limit, 0)),
            )).fetchall()
        return [event_of(session_id, *row) for row in reversed(rows)]

    async def usage_summary(self, session_id: str) -> UsageSummary:
        async with self.database.connection() as conn:
            row = await (await conn.execute(_SUMMARY, (session_id,))).fetchone()
        assert row is not None  # an aggregate always returns one row
        calls, tin, tout, cost, tools, errors, warnings, read, written, thought = row
        return UsageSummary(model_calls=calls, input_tokens=tin, output_tokens=tout,
                            cost_usd=cost, tool_calls=tools, errors=errors, warnings=warnings,
                            cache_read_tokens=read, cache_write_tokens=written,
                            reasoning_tokens=thought)

    async def close(self) -> None:
        """Close the database if this store opened it (idempotent)."""
        if self._owned:
            await self.database.close()


async def _write_row(conn: Any, record: SessionRecord) -> None:
    await write_index_row(conn, _row(record))


async def write_index_row(conn: Any, values: list[Any]) -> None:
    """Insert or replace the row of ``COLUMNS`` ``values``, its place in the list kept
    when it stays on top (``index_sql``): every writer of the session list, the record
    store's and an import's."""
    await conn.execute(_WRITE_ROW, [values[0], *index_sql.upsert_values(values)])


def _row(record: SessionRecord) -> list[Any]:
    row = record.model_dump(mode="json")
    row["metadata"] = Jsonb(row["metadata"])
    return [row[c] for c in _COLUMNS]
