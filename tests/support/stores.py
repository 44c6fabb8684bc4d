"""What a process left in the database, read back the way a new process reads it."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

from nonoka.state.session_state import SessionState
from nonoka.store.sqlite import SQLiteCheckpointStore


def load_stored(db: Path, session_id: str) -> SessionState | None:
    """One session from a SQLite file (migrations and step updates applied), or ``None``."""
    async def go() -> SessionState | None:
        store = SQLiteCheckpointStore(db)
        try:
            return await store.load_session(session_id)
        finally:
            await store.close()

    return asyncio.run(go())


def raw_sqlite(path: Path) -> closing[sqlite3.Connection]:
    """A plain autocommit connection, to look at (or damage) a file under the engine's feet."""
    return closing(sqlite3.connect(path, isolation_level=None, timeout=5))
