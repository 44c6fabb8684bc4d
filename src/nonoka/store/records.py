"""The session index and the event log: what people review after the fact.

The index (``cli_sessions``) has one row per session with what a listing shows and the
``conversation_key`` that recovers a session whose id was lost. The event log is the
timeline of each session: requests, model calls with usage, tool calls, warnings,
errors, recoveries. Both live next to the checkpoints, in the same database. Every
engine encodes an event's data with ``event_json``, so secrets are redacted whatever the
engine.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from nonoka.redact import redact

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nonoka.state.session_state import SessionState


class SessionRecord(BaseModel):
    """One row of the session index."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    title: str = ""
    model: str = ""
    created_at: float = Field(default_factory=time.time)
    last_active: float = Field(default_factory=time.time)
    status: str = "created"
    turn_count: int = 0
    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form; ``conversation_key``, ``purpose`` (chat | title) and ``cwd`` live here."""

    @property
    def conversation_key(self) -> str | None:
        value = self.metadata.get("conversation_key")
        return str(value) if value else None

    @property
    def purpose(self) -> str:
        return str(self.metadata.get("purpose", "chat"))

    @property
    def host_session_id(self) -> str | None:
        """The host's own id of the conversation this session holds (an OpenCode
        session's id), when the host said it."""
        value = self.metadata.get("host_session_id")
        return str(value) if value else None


class EventRecord(BaseModel):
    """One entry of a session's timeline."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    kind: str
    data: dict[str, Any] = Field(default_factory=dict)
    at: float = Field(default_factory=time.time)
    seq: int = 0
    """Assigned by the store: increasing within a session."""


class UsageSummary(BaseModel):
    """Totals over a session's logged model calls."""

    model_config = ConfigDict(frozen=True)

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    errors: int = 0
    warnings: int = 0
    cache_read_tokens: int = 0
    """Of ``input_tokens``, read from the provider's prompt cache."""
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Of ``output_tokens``, spent reasoning."""


@runtime_checkable
class HostSessions(Protocol):
    """Optional capability of a session index: the sessions a host's own conversation id
    maps to (every engine nonoka ships has it)."""

    async def find_by_host_session(self, host_session_id: str, *, purpose: str = "chat"
                                   ) -> list[SessionRecord]:
        """Rows whose ``host_session_id`` is this one, most recently active first."""
        ...


@runtime_checkable
class SessionIndex(Protocol):
    """The ``cli_sessions`` table."""

    async def upsert_session(self, record: SessionRecord) -> None:
        """Insert or replace the row (``created_at`` of an existing row is kept)."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def find_sessions_by_prefix(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        """Rows whose id starts with ``prefix`` (for ``sessions show <prefix>``)."""
        ...

    async def find_by_conversation_key(
        self, key: str, *, purpose: str = "chat"
    ) -> list[SessionRecord]:
        """Rows tagged with ``key``, most recently active first."""
        ...

    async def list_sessions(
        self, limit: int = 50, *, purpose: str | None = "chat"
    ) -> list[SessionRecord]:
        """Most recently active first; ``purpose=None`` lists every kind."""
        ...

    async def delete_session_record(self, session_id: str) -> bool: ...


@runtime_checkable
class CreatesIndexed(Protocol):
    """An index that stores a new session's first snapshot and its row in one transaction.

    Written one after the other, a process killed in between leaves a snapshot nobody
    can find (no row); the engines that share one database with their checkpoint store
    offer this instead.
    """

    async def create_session(self, state: SessionState, record: SessionRecord) -> int:
        """Save ``state`` (a new session, revision 0) and upsert ``record`` at once; the
        stored revision."""
        ...


@runtime_checkable
class EventLog(Protocol):
    """Each session's timeline. Secrets are redacted before anything is written."""

    async def append_event(self, session_id: str, kind: str, data: dict[str, Any]) -> None: ...

    async def list_events(self, session_id: str, limit: int = 50) -> list[EventRecord]:
        """The newest ``limit`` events, oldest first."""
        ...

    async def usage_summary(self, session_id: str) -> UsageSummary:
        """Totals over ``model_call`` events (``input_tokens``, ``output_tokens``,
        ``cost_usd`` in their data), ``tool_call`` events, ``error`` and ``warning`` events."""
        ...


@runtime_checkable
class AppendsTogether(Protocol):
    """An event log that is also the session index and writes several entries, and the
    session's index row, in one transaction: a turn's closing writes commit once, and no
    reader sees the row of a finished turn without the ``finish`` entry that ends it."""

    async def append_events(self, session_id: str,
                            events: Sequence[tuple[str, dict[str, Any]]], *,
                            record: SessionRecord | None = None) -> None:
        """Append ``events`` (kind, data) in order and upsert ``record`` if given; all of
        it or, on an error, none of it."""
        ...


def record_of(row: dict[str, Any]) -> SessionRecord:
    """An index row as a ``SessionRecord``; a ``StoreError`` that names the session and
    the column when one holds the wrong type (a row edited by hand)."""
    from pydantic import ValidationError

    from nonoka.errors import StoreError

    try:
        return SessionRecord.model_validate(row)
    except ValidationError as exc:
        fields = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors())
        raise StoreError(
            f"the session index row of {str(row.get('session_id'))!r:.60} is damaged "
            f"({fields} of the wrong type); nothing was changed. Fix or delete that row "
            "of cli_sessions (the session itself is stored apart)") from None


def event_of(session_id: str, seq: object, at: object, kind: object,
             data: object) -> EventRecord:
    """A stored event row as an ``EventRecord``, also when the row was damaged (edited by
    hand; SQLite keeps any value in any column): one bad event must not hide a session's
    whole timeline. Such a row becomes a ``damaged`` event whose data holds what is
    stored (``kind`` and ``stored``); a time that is not a finite number becomes 0."""
    value: object = data
    if isinstance(data, str | bytes):
        try:
            value = json.loads(data)
        except ValueError:
            value = None
    if not (isinstance(value, dict) and isinstance(kind, str)):
        stored = data if isinstance(data, str) else repr(data)
        value, kind = {"kind": kind if isinstance(kind, str) else repr(kind),
                       "stored": stored}, "damaged"
    when = at if isinstance(at, int | float) and not isinstance(at, bool) else 0.0
    return EventRecord(session_id=session_id, kind=str(kind), data=value,
                       at=when if math.isfinite(when) else 0.0,
                       seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else 0)


def event_json(data: dict[str, Any]) -> str:
    """Redacted JSON text for an event's data; what JSON cannot encode becomes ``str()``.

    A log entry should not fail a turn over a stray ``datetime``; non-finite floats are
    still refused (``ValueError``), since they are not JSON and no database accepts them.
    """
    return json.dumps(redact(data), ensure_ascii=False, separators=(",", ":"), default=str,
                      allow_nan=False)
