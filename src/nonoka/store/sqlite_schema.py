"""The SQLite schema, as an ordered list of named migrations.

Every nonoka table in a database file (the checkpoint tables, the CLI's session index
and the event log) is created by a migration in ``MIGRATIONS``. The runner
records applied names in ``nonoka_migrations`` and applies the missing ones, in order,
inside one ``BEGIN IMMEDIATE`` transaction, so two processes opening a fresh file at once
apply each migration exactly once. A file that lists a name this code does not know was
written by a newer nonoka and is refused before anything is changed.

Adding a migration is one decorated function after the last one below. Never rename,
reorder or edit one that has shipped: its name is what databases remember.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from nonoka.errors import UnsupportedVersionError

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []
"""Every migration, oldest first; each one's ``__name__`` is its recorded name."""


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration."""
    if any(m.__name__ == fn.__name__ for m in MIGRATIONS):
        raise ValueError(f"duplicate migration name {fn.__name__!r}")
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_checkpoint_tables(db: sqlite3.Connection) -> None:
    """Snapshots, append-only conversation entries, and the latest step updates."""
    db.execute(
        """CREATE TABLE checkpoints (
            session_id TEXT PRIMARY KEY,
            state_json TEXT NOT NULL,
            revision INTEGER NOT NULL,
            entry_count INTEGER NOT NULL,
            memory_generation INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )"""
    )
    # Clustered on the key: a session's entries sit together, with no separate index.
    db.execute(
        """CREATE TABLE session_entries (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            entry_json TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE step_updates (
            session_id TEXT NOT NULL,
            step_id TEXT NOT NULL,
            update_type TEXT NOT NULL,
            payload_json TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (session_id, step_id, update_type)
        )"""
    )


@migration
def m002_session_index_and_events(db: sqlite3.Connection) -> None:
    """The CLI's session index and each session's event log (see ``nonoka.store.records``).

    ``IF NOT EXISTS`` keeps the step idempotent. The conversation-key index is on the
    same ``json_extract`` expression the lookup uses (SQLite only uses an expression
    index for an identical expression), with ``last_active`` so the newest comes first
    without a sort.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS cli_sessions (
            session_id TEXT PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            last_active REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'created',
            turn_count INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata))
        )"""
    )
    db.execute(
        "CREATE INDEX IF NOT EXISTS cli_sessions_last_active ON cli_sessions (last_active)"
    )
    db.execute(
        """CREATE INDEX IF NOT EXISTS cli_sessions_conversation_key ON cli_sessions (
            json_extract(metadata, '$.conversation_key'), last_active
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            data_json TEXT NOT NULL CHECK (json_valid(data_json)),
            PRIMARY KEY (session_id, seq)
        )"""
    )


@migration
def m003_session_leases(db: sqlite3.Connection) -> None:
    """Who runs each session now (``nonoka.store.base.SessionLeases``).

    One row per leased session; ``expires_at`` is a ``time.time()`` timestamp, so a row
    left by a killed process stops counting once it has passed. Released leases are
    deleted; expired ones are overwritten by the next owner.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS session_leases (
            session_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL,
            acquired_at REAL NOT NULL
        )"""
    )


@migration
def m004_next_calls(db: sqlite3.Connection) -> None:
    """The request each session's next turn is expected to send (``nonoka.bridge.early``).

    One row per session, replaced after each bridge turn; ``revision`` is the checkpoint
    revision it was computed from, so a row that a later save outdated is ignored.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS next_calls (
            session_id TEXT PRIMARY KEY,
            revision INTEGER NOT NULL,
            template_json TEXT NOT NULL
        )"""
    )


# -- runner -------------------------------------------------------------------------------

_LEDGER = """CREATE TABLE IF NOT EXISTS nonoka_migrations (
    name TEXT PRIMARY KEY,
    applied_at REAL NOT NULL
)"""


def applied_migrations(db: sqlite3.Connection) -> list[str]:
    """Names recorded in the database, oldest first; empty for a fresh file."""
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nonoka_migrations'"
    ).fetchone()
    if exists is None:
        return []
    return [row[0] for row in db.execute("SELECT name FROM nonoka_migrations ORDER BY rowid")]


def check_known(
    db: sqlite3.Connection, where: str, migrations: Sequence[Migration] = MIGRATIONS
) -> list[str]:
    """The applied names; ``UnsupportedVersionError`` if any is unknown to this code."""
    applied = applied_migrations(db)
    known = {m.__name__ for m in migrations}
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise UnsupportedVersionError(
            f"{where} was written by a newer nonoka (unknown schema migrations: "
            f"{', '.join(unknown)}). Upgrade nonoka to open it; the file was not changed."
        )
    return applied


def apply_migrations(
    db: sqlite3.Connection, where: str, migrations: Sequence[Migration] = MIGRATIONS
) -> list[str]:
    """Apply the missing migrations in one write transaction; return the names applied.

    ``db`` must be in autocommit mode (``isolation_level=None``). When nothing is
    missing this only reads, so the common open takes no write lock.
    """
    applied = check_known(db, where, migrations)
    if len(applied) == len(migrations):
        return []
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_LEDGER)
        # Another process may have migrated while we waited for the write lock.
        done = set(check_known(db, where, migrations))
        new = [m for m in migrations if m.__name__ not in done]
        for step in new:
            step(db)
            db.execute(
                "INSERT INTO nonoka_migrations (name, applied_at) VALUES (?, ?)",
                (step.__name__, time.time()),
            )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return [m.__name__ for m in new]
