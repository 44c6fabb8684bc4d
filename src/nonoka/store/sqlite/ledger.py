"""The SQLite side of the migration runner (``nonoka.store.migrations``): which
migrations a file has applied, and applying the missing ones.

Applied names are recorded in ``nonoka_migrations``; the missing ones are applied in
order inside one ``BEGIN IMMEDIATE`` transaction (so two processes opening a fresh file
at once apply each exactly once), and a file that lists a name this code does not know
was written by a newer nonoka and is refused before anything is changed. The only
importer of the history (``nonoka.store.sqlite.migrations``). Standard library only.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from nonoka.store import migrations as runner
from nonoka.store.sqlite.migrations import MIGRATIONS, Migration

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
    runner.check_known(applied, migrations, where)
    return applied


def apply_migrations(
    db: sqlite3.Connection, where: str, migrations: Sequence[Migration] = MIGRATIONS
) -> list[str]:
    """Apply the missing migrations in one write transaction; return the names applied.

    ``db`` must be in autocommit mode (``isolation_level=None``). When nothing is
    missing this only reads, so the common open takes no write lock.
    """
    return runner.run_sync(runner.migrate(_Ledger(db), migrations, where))


class _Ledger:
    """``nonoka.store.migrations.Ledger`` over a sqlite3 connection: nothing here
    suspends, so ``run_sync`` drives the runner without an event loop."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def applied(self) -> list[str]:
        return applied_migrations(self._db)

    def exclusive(self) -> _Immediate:
        return _Immediate(self._db)

    async def apply(self, migration: Migration) -> None:
        migration(self._db)
        self._db.execute("INSERT INTO nonoka_migrations (name, applied_at) VALUES (?, ?)",
                         (migration.__name__, time.time()))


class _Immediate:
    """``BEGIN IMMEDIATE``: the file's write lock, which serialises migrating openers."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def __aenter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(_LEDGER)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    async def __aexit__(self, kind: object, value: object, traceback: object, /) -> None:
        if kind is None:
            self._db.execute("COMMIT")
        elif self._db.in_transaction:
            self._db.execute("ROLLBACK")


def missing(db: sqlite3.Connection, where: str) -> int:
    """How many migrations the file lacks (``UnsupportedVersionError`` for a name this
    code does not know)."""
    return len(MIGRATIONS) - len(check_known(db, where))
