"""Stored values as the session operations read them: each checked for the type the
export carries, so a row edited by hand, or imported by an older nonoka, is a one-line
``StoreError`` naming the session and the column, never a failure deep in a command.

SQLite keeps any value in any column, and both SQL engines keep ``NaN`` and infinities
in a float column; JSON carries neither.
"""

from __future__ import annotations

import json
import math
from typing import Any

from nonoka.errors import StoreError
from nonoka.ops.model import SessionHead
from nonoka.store.records import SessionRecord, record_of

INT64 = 2**63
"""Integers both SQL engines store: ``-INT64 <= n < INT64``."""


def broken(session_id: str, problem: str) -> StoreError:
    return StoreError(
        f"session {session_id}: {problem}; nothing was changed. Fix or delete that row "
        "(`nonoka db check` lists every session with such a row)")


def damaged(session_id: str, what: str, value: object, wanted: str) -> StoreError:
    return broken(session_id, f"its stored {what} is {_shown(value)}, not {wanted}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def integer(session_id: str, what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value < INT64:
        raise damaged(session_id, what, value, "an integer")
    return value


def number(session_id: str, what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise damaged(session_id, what, value, "a finite number")
    return float(value)


def text(session_id: str, what: str, value: object) -> str:
    if not isinstance(value, str):
        raise damaged(session_id, what, value, "text")
    return value


def head(row: tuple[Any, ...]) -> SessionHead:
    """A checkpoint row ``(session_id, state_json, revision, entry_count,
    memory_generation, created_at, updated_at)`` as a ``SessionHead``."""
    sid, snapshot, revision, count, generation, created, updated = row
    sid = str(sid)
    return SessionHead(sid, text(sid, "snapshot", snapshot),
                       integer(sid, "revision", revision),
                       integer(sid, "entry count", count),
                       integer(sid, "memory generation", generation),
                       number(sid, "created_at", created), number(sid, "updated_at", updated))


def index_record(session_id: str, record: dict[str, Any]) -> SessionRecord:
    """An index row (its ``metadata`` as stored: JSON text, or already decoded) as a
    ``SessionRecord`` whose every number is finite."""
    metadata = record.get("metadata")
    if isinstance(metadata, str | bytes):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            raise damaged(session_id, "index row's metadata", metadata, "JSON") from None
    checked = record_of({**record, "metadata": metadata})
    for name in ("created_at", "last_active", "cost_usd"):
        number(session_id, f"index row's {name}", getattr(checked, name))
    try:
        json.dumps(checked.metadata, allow_nan=False)
    except ValueError:
        raise damaged(session_id, "index row's metadata", checked.metadata,
                      "JSON with finite numbers") from None
    return checked
