"""What every session lease shares, on the standard library only.

The owner token, the ttl, and SQLite's statement for taking a lease. The SQLite engine
takes its leases with this statement, and so does the bridge's early dispatch, which
must hold the session before it sends a model request and runs before pydantic (and
so ``nonoka.store.base``) is loaded.
"""

from __future__ import annotations

import os
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
    when two requests of one process run the same session. ``host`` is ``lease_host()``.
    """
    return f"{lease_host()}:{os.getpid()}:{os.urandom(6).hex()}"  # what secrets.token_hex does


_host: str | None = None


def lease_host() -> str:
    """This host as lease owners name it: ``hostname/boot.pidns`` on Linux.

    A pid means something only within one pid namespace of one boot, and containers
    sharing a database file often share a hostname too; an owner is judged dead by its
    pid (``nonoka.store.leases.holder_is_dead``) only when this whole name matches.
    Elsewhere it is the hostname alone.
    """
    global _host
    if _host is None:
        name = socket.gethostname()
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
                name += f"/{boot.read().strip()[:8]}.{os.stat('/proc/self/ns/pid').st_ino}"
        except OSError:
            pass
        _host = name
    return _host


def sqlite_acquire(db: sqlite3.Connection, session_id: str, owner: str, ttl: float,
                   now: float) -> bool:
    """Take the lease inside the caller's write transaction; whether it was taken."""
    return db.execute(SQLITE_ACQUIRE, (session_id, owner, now + ttl, now)).rowcount == 1
