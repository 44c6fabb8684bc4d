"""What every session lease shares, on the standard library only.

The owner token, the ttl, and SQLite's statement for taking a lease. The SQLite engine
takes its leases with this statement, and so does the bridge's early dispatch, which
must hold the session before it sends a model request and runs before pydantic (and
so ``nonoka.store.base``) is loaded.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

DEFAULT_TTL = 30.0
"""Seconds a lease outlives its last renewal: how long a crash keeps a session busy."""

SQLITE_ACQUIRE = """
INSERT INTO session_leases (session_id, owner, expires_at, acquired_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (session_id) DO UPDATE SET
    owner = excluded.owner,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN session_leases.owner = excluded.owner
                       THEN session_leases.acquired_at ELSE excluded.acquired_at END
WHERE session_leases.owner = excluded.owner OR session_leases.expires_at <= excluded.acquired_at
"""
"""Take (or renew, for the same owner) a lease that is free, expired or ours."""


def new_lease_owner() -> str:
    """A token unique to this process and call: ``host:pid:random``.

    Readable in a busy message (which machine and process hold the session), unique even
    when two requests of one process run the same session.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def sqlite_acquire(db: sqlite3.Connection, session_id: str, owner: str, ttl: float,
                   now: float) -> bool:
    """Take the lease inside the caller's write transaction; whether it was taken."""
    return db.execute(SQLITE_ACQUIRE, (session_id, owner, now + ttl, now)).rowcount == 1
