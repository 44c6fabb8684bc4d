"""The session index and event log in memory: the reference the other engines match.

Rows are kept as JSON text, as a database keeps them, so what comes back has been
through the same encoding (and the same redaction, ``nonoka.store.records.event_json``)
as with SQLite. Several store instances can share one ``MemoryRecordDatabase`` to stand
in for processes reopening a file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from nonoka.store.memory.database import MemoryRecordDatabase, StoredEvent
from nonoka.store.records import (
    EventRecord,
    SessionRecord,
    UsageSummary,
    event_json,
    event_of,
)


class MemoryRecordStore:
    """``SessionIndex`` and ``EventLog`` over a ``MemoryRecordDatabase`` (fresh by default)."""

    def __init__(self, database: MemoryRecordDatabase | None = None) -> None:
        self.database = database if database is not None else MemoryRecordDatabase()

    # -- SessionIndex ---------------------------------------------------------------------

    async def upsert_session(self, record: SessionRecord) -> None:
        with self.database.lock:
            self._upsert(record)

    def _upsert(self, record: SessionRecord) -> None:
        """The row written, keeping its creation time; under the database's lock."""
        db = self.database
        old = db.sessions.get(record.session_id)
        if old is not None:
            created_at = SessionRecord.model_validate_json(old).created_at
            record = record.model_copy(update={"created_at": created_at})
        db.sessions[record.session_id] = record.model_dump_json()

    async def get_session(self, session_id: str) -> SessionRecord | None:
        with self.database.lock:
            text = self.database.sessions.get(session_id)
        return None if text is None else SessionRecord.model_validate_json(text)

    async def find_sessions_by_prefix(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        found = [r for r in self._sorted() if r.session_id.startswith(prefix)]
        return found[: max(limit, 0)]

    async def find_by_conversation_key(
        self, key: str, *, purpose: str = "chat"
    ) -> list[SessionRecord]:
        if not key:
            return []
        return [r for r in self._sorted() if r.conversation_key == key and r.purpose == purpose]

    async def find_by_host_session(self, host_session_id: str, *, purpose: str = "chat"
                                   ) -> list[SessionRecord]:
        if not host_session_id:
            return []
        return [r for r in self._sorted()
                if r.host_session_id == host_session_id and r.purpose == purpose]

    async def list_sessions(
        self, limit: int = 50, *, purpose: str | None = "chat"
    ) -> list[SessionRecord]:
        found = [r for r in self._sorted() if purpose is None or r.purpose == purpose]
        return found[: max(limit, 0)]

    async def delete_session_record(self, session_id: str) -> bool:
        """Remove the row and the session's events; ``False`` when neither existed."""
        db = self.database
        with db.lock:
            row = db.sessions.pop(session_id, None)
            events = db.events.pop(session_id, [])
        return row is not None or bool(events)

    def _sorted(self) -> list[SessionRecord]:
        """Every row, most recently active first (ties by id, as the SQL engines order)."""
        with self.database.lock:
            texts = list(self.database.sessions.values())
        records = [SessionRecord.model_validate_json(t) for t in texts]
        return sorted(records, key=lambda r: (-r.last_active, r.session_id))

    # -- EventLog -------------------------------------------------------------------------

    async def append_event(self, session_id: str, kind: str, data: dict[str, Any]) -> None:
        await self.append_events(session_id, [(kind, data)])

    async def append_events(self, session_id: str,
                            events: Sequence[tuple[str, dict[str, Any]]], *,
                            record: SessionRecord | None = None) -> None:
        """``AppendsTogether``: the events and the row under one lock."""
        texts = [(kind, event_json(data)) for kind, data in events]
        db = self.database
        with db.lock:
            log = db.events.setdefault(session_id, [])
            now = time.time()
            for kind, text in texts:
                log.append(StoredEvent(log[-1].seq + 1 if log else 1, now, kind, text))
            if record is not None:
                self._upsert(record)

    async def list_events(self, session_id: str, limit: int = 50) -> list[EventRecord]:
        with self.database.lock:
            log = list(self.database.events.get(session_id, []))
        newest = log[-limit:] if limit > 0 else []
        return [event_of(session_id, e.seq, e.at, e.kind, e.data_json) for e in newest]

    async def usage_summary(self, session_id: str) -> UsageSummary:
        with self.database.lock:
            log = list(self.database.events.get(session_id, []))
        kinds = [e.kind for e in log]
        calls = [json.loads(e.data_json) for e in log if e.kind == "model_call"]
        return UsageSummary(
            model_calls=len(calls),
            input_tokens=sum(int(_number(c, "input_tokens")) for c in calls),
            output_tokens=sum(int(_number(c, "output_tokens")) for c in calls),
            cost_usd=sum((float(_number(c, "cost_usd")) for c in calls), 0.0),
            tool_calls=kinds.count("tool_call"),
            errors=kinds.count("error"),
            warnings=kinds.count("warning"),
            cache_read_tokens=sum(int(_number(c, "cache_read_tokens")) for c in calls),
            cache_write_tokens=sum(int(_number(c, "cache_write_tokens")) for c in calls),
            reasoning_tokens=sum(int(_number(c, "reasoning_tokens")) for c in calls),
        )

    async def close(self) -> None:
        """Nothing to release; the data lives as long as the ``MemoryRecordDatabase``."""


def _number(data: Any, name: str) -> int | float:
    """``data[name]`` when it is a JSON number (not a boolean), else 0."""
    value = data.get(name) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return value
