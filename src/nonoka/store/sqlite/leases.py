"""SQLite's statement for taking a session lease, on the standard library only.

The SQLite checkpoint store takes its leases with it, and so does the early path
(``nonoka.store.sqlite.next_calls``), which must hold the session before the bridge
sends a model request and runs before pydantic (and so ``nonoka.store.base``) is loaded.
Expiry is a ``time.time()`` timestamp: every process sharing a file runs on one machine.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    import sqlite3

ACQUIRE = """
INSERT INTO session_leases (session_id, owner, expires_at, acquired_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (session_id) DO UPDATE SET
    owner = excluded.owner,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN session_leases.owner = excluded.owner
                            AND session_leases.expires_at <> 0
                       THEN session_leases.acquired_at ELSE excluded.acquired_at END
WHERE session_leases.expires_at <= excluded.acquired_at
   OR (session_leases.owner = excluded.owner
       AND session_leases.expires_at < (excluded.acquired_at + excluded.expires_at) / 2)
"""
"""Take a lease that is free (released) or expired, or renew ours when less than half of
its ttl is left. Ours with more left is not written (``HELD`` then tells it from a lease
another owner holds): the runtime takes again, at the start of a turn, the lease the
bridge's early path took a moment before, and that renewal wrote a page every turn."""

HELD = "SELECT 1 FROM session_leases WHERE session_id = ? AND owner = ? AND expires_at > ?"
"""Whether ``owner`` holds the live lease."""

RENEW = ("UPDATE session_leases SET expires_at = ? WHERE session_id = ? AND owner = ? "
         "AND expires_at <> 0")
"""Renew a lease still held (an expired one too: nobody took it over), not a released one."""

RELEASE = ("UPDATE session_leases SET expires_at = 0 WHERE session_id = ? AND owner = ? "
           "AND expires_at <> 0")
"""Give a lease up: its expiry becomes 0 and the row stays, so the next turn's lease is
an ``UPDATE`` of the row's page rather than an insert into the table and its key index
(and the release not a delete from both): one page each instead of two."""

FORGET = ("DELETE FROM session_leases WHERE session_id = ?1 AND expires_at = 0 "
          "AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE session_id = ?1)")
"""After ``RELEASE``: the row of a lease that names no stored session goes (a lock's
name, such as a ``nonoka serve`` client line's, or a session deleted while it was
held): no next turn of it takes that row again, and kept it would stay for ever."""


def acquire(db: sqlite3.Connection, session_id: str, owner: str, ttl: float,
            now: float) -> bool:
    """Take the lease inside the caller's write transaction; whether it is ours, for at
    least half of ``ttl`` from ``now``."""
    if db.execute(ACQUIRE, (session_id, owner, now + ttl, now)).rowcount == 1:
        return True
    return db.execute(HELD, (session_id, owner, now)).fetchone() is not None
