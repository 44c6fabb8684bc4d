"""The session index and event log in SQLite, next to the checkpoints.

The tables come from migration ``m002_session_index_and_events``
(``nonoka.store.sqlite.migrations``), so every opener of the
file (checkpoint store or this one) brings them up to date. A process that already has
a ``SQLiteCheckpointStore`` open shares its connection through ``from_checkpoints`` and
writes through its ``transaction()``: the per-turn bridge opens (and checks and
migrates) the file once, and one lock serialises everything it writes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from nonoka.store import index_sql
from nonoka.store.records import (
    EventRecord,
    SessionRecord,
    UsageSummary,
    event_json,
    event_of,
    record_of,
)
from nonoka.store.sqlite import timeline
from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore
from nonoka.store.sqlite.packing import EVENT_DICTIONARY, EVENT_MIN_SIZE, pack

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nonoka.state.session_state import SessionState

_COLUMNS = index_sql.COLUMNS
_SELECT = index_sql.SELECT
_UPSERT = index_sql.upsert("?")
_KEPT = ("session_id", "created_at", "metadata")
_SET = ", ".join(f"{c} = ?" for c in _COLUMNS if c not in _KEPT)
_SETTLE_TOP = index_sql.settle_top("?")
_UPDATE_IN_PLACE = (
    f"UPDATE cli_sessions SET {_SET} WHERE session_id = ? AND metadata = ? AND "
    + index_sql.keep_order("cli_sessions", "?", "?"))
"""The row again, in the same place in the list and with the metadata it has: the write
of every turn of the most recent session. SQLite updates an index whenever a column it
reads is assigned, whatever the value, so it assigns neither ``list_order`` nor
``metadata``, and no index entry is written."""
_UPDATE_MOVED = (f"UPDATE cli_sessions SET {_SET}, list_order = ? "
                 "WHERE session_id = ? AND metadata = ?")
"""The row again, moved in the list (another session was more recent), same metadata."""
# Must match the index expressions in m012 exactly, or SQLite will not use the indexes.
_KEY = "json_extract(metadata, '$.conversation_key')"
_PURPOSE = "coalesce(json_extract(metadata, '$.purpose'), 'chat')"
_ORDER = index_sql.ORDER
_HOST = "json_extract(metadata, '$.host_session_id')"


def _number(field: str, *, integer: bool = False) -> str:
    """The sum of a model-call data field over the values that are JSON numbers.

    ``json_type`` tells ``true`` from ``1`` (``json_extract`` does not); integers are
    truncated per value, as ``int()`` does in the memory engine.
    """
    value = f"json_extract(entry_text(data_json), '$.{field}')"
    if integer:
        value = f"CAST({value} AS INTEGER)"
    picked = (f"CASE WHEN kind = 'model_call' AND json_type(entry_text(data_json), "
              f"'$.{field}') IN ('integer', 'real') THEN {value} END")
    return f"coalesce(sum({picked}), 0)" if integer else f"total({picked})"


_SUMMARY = f"""
SELECT sum(kind = 'model_call'), {_number('input_tokens', integer=True)},
       {_number('output_tokens', integer=True)}, {_number('cost_usd')},
       sum(kind = 'tool_call'), sum(kind = 'error'), sum(kind = 'warning'),
       {_number('cache_read_tokens', integer=True)},
       {_number('cache_write_tokens', integer=True)},
       {_number('reasoning_tokens', integer=True)}
FROM events WHERE session_id = ?
"""


class SQLiteRecordStore:
    """``SessionIndex`` and ``EventLog`` over the nonoka SQLite file at ``path``.

    ``SQLiteRecordStore(path)`` opens its own connection (closed by ``close()``);
    ``from_checkpoints(store)`` borrows an open checkpoint store's, which then stays the
    owner. Like the checkpoint store, calls run synchronously: each is one short
    transaction.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._store = SQLiteCheckpointStore(path)
        self._owned = True

    @classmethod
    def from_checkpoints(cls, store: SQLiteCheckpointStore) -> SQLiteRecordStore:
        """A record store on ``store``'s connection; closing it leaves ``store`` open."""
        self = cls.__new__(cls)
        self._store = store
        self._owned = False
        return self

    @property
    def path(self) -> Path:
        return self._store.path

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection in use (the checkpoint store's when shared)."""
        return self._store.connection

    # -- SessionIndex ---------------------------------------------------------------------

    async def upsert_session(self, record: SessionRecord) -> None:
        with self._store.transaction() as db:
            _write_row(db, record)

    async def create_session(self, state: SessionState, record: SessionRecord) -> int:
        """``CreatesIndexed``: the first snapshot and the row in one transaction."""
        with self._store.transaction() as db:
            revision = self._store.write_session(db, state)
            _write_row(db, record)
        return revision

    async def get_session(self, session_id: str) -> SessionRecord | None:
        found = self._select("WHERE session_id = ?", session_id)
        return found[0] if found else None

    async def find_sessions_by_prefix(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        # GLOB is case-sensitive and can use the primary key; escape its wildcards.
        pattern = "".join(f"[{c}]" if c in "*?[" else c for c in prefix) + "*"
        return self._select(f"WHERE session_id GLOB ? {_ORDER} LIMIT ?", pattern,
                            max(limit, 0))

    async def find_by_conversation_key(
        self, key: str, *, purpose: str = "chat"
    ) -> list[SessionRecord]:
        if not key:
            return []
        return self._select(f"WHERE {_KEY} = ? AND {_PURPOSE} = ? {_ORDER}", key, purpose)

    async def find_by_host_session(self, host_session_id: str, *, purpose: str = "chat"
                                   ) -> list[SessionRecord]:
        if not host_session_id:
            return []
        return self._select(f"WHERE {_HOST} = ? AND {_PURPOSE} = ? {_ORDER}",
                                host_session_id, purpose)

    async def list_sessions(
        self, limit: int = 50, *, purpose: str | None = "chat"
    ) -> list[SessionRecord]:
        if purpose is None:
            return self._select(f"{_ORDER} LIMIT ?", max(limit, 0))
        return self._select(f"WHERE {_PURPOSE} = ? {_ORDER} LIMIT ?", purpose, max(limit, 0))

    async def delete_session_record(self, session_id: str) -> bool:
        """Remove the row and the session's events; ``False`` when neither existed."""
        with self._store.transaction() as db:
            removed = db.execute("DELETE FROM cli_sessions WHERE session_id = ?",
                                 (session_id,)).rowcount
            removed += timeline.delete(db, session_id)
        return removed > 0

    def _select(self, where: str, *params: object) -> list[SessionRecord]:
        with self._store.transaction(write=False) as db:
            rows = db.execute(f"{_SELECT} {where}", params).fetchall()
        return [
            record_of({**dict(zip(_COLUMNS, r, strict=True)), "metadata": json.loads(r[-1])})
            for r in rows
        ]

    # -- EventLog -------------------------------------------------------------------------

    async def append_event(self, session_id: str, kind: str, data: dict[str, Any]) -> None:
        await self.append_events(session_id, [(kind, data)])

    async def append_events(self, session_id: str,
                            events: Sequence[tuple[str, dict[str, Any]]], *,
                            record: SessionRecord | None = None) -> None:
        """``AppendsTogether``: the events and the row in one transaction. Each event gets
        the next ``seq``; computing it inside the write makes it unique. The rows are the
        table's (``nonoka.store.sqlite.timeline``), under the session's number."""
        now = time.time()
        rows = [(now, kind, pack(event_json(data), EVENT_DICTIONARY, EVENT_MIN_SIZE))
                for kind, data in events]
        with self._store.transaction() as db:
            number = timeline.number(db, session_id) if rows else 0
            codes = {kind: timeline.code(db, kind) for _, kind, _ in rows}
            for at, kind, data in rows:
                db.execute(timeline.APPEND, (number, at, codes[kind], data))
            if record is not None:
                _write_row(db, record)

    async def list_events(self, session_id: str, limit: int = 50) -> list[EventRecord]:
        with self._store.transaction(write=False) as db:
            rows = db.execute(
                "SELECT seq, at, kind, entry_text(data_json) FROM events WHERE session_id = ? "
                "ORDER BY seq DESC LIMIT ?",
                (session_id, max(limit, 0)),
            ).fetchall()
        return [event_of(session_id, *row) for row in reversed(rows)]

    async def usage_summary(self, session_id: str) -> UsageSummary:
        """Aggregated in SQL: only the numbers leave the database, however long the log."""
        with self._store.transaction(write=False) as db:
            calls, tin, tout, cost, tools, errors, warnings, read, written, thought = (
                db.execute(_SUMMARY, (session_id,)).fetchone())
        return UsageSummary(
            model_calls=calls or 0, input_tokens=tin, output_tokens=tout,
            cost_usd=cost, tool_calls=tools or 0, errors=errors or 0, warnings=warnings or 0,
            cache_read_tokens=read, cache_write_tokens=written, reasoning_tokens=thought,
        )

    async def close(self) -> None:
        """Close the connection if this store opened it (idempotent)."""
        if self._owned:
            await self._store.close()


def _write_row(db: sqlite3.Connection, record: SessionRecord) -> None:
    write_index_row(db, _row(record))


def write_index_row(db: sqlite3.Connection, values: Sequence[object]) -> None:
    """Insert or replace the row of ``COLUMNS`` ``values`` (``metadata`` as JSON text),
    assigning ``list_order`` and ``metadata`` only when they change (``index_sql``):
    every writer of the session list, the record store's and an import's."""
    row = dict(zip(_COLUMNS, values, strict=True))
    sid, metadata, last_active = row["session_id"], row["metadata"], row["last_active"]
    changed = [row[c] for c in _COLUMNS if c not in _KEPT]
    db.execute(_SETTLE_TOP, (sid,))
    if db.execute(_UPDATE_IN_PLACE, (*changed, sid, metadata, last_active, sid)).rowcount:
        return
    if db.execute(_UPDATE_MOVED, (*changed, last_active, sid, metadata)).rowcount == 0:
        db.execute(_UPSERT, index_sql.upsert_values(list(values)))


def _row(record: SessionRecord) -> list[Any]:
    row = record.model_dump(mode="json")
    row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False, allow_nan=False)
    return [row[c] for c in _COLUMNS]
