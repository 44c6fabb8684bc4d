"""Databases written before files were stored apart (every migration up to the one that
adds ``media``), upgraded in place on both SQL engines.

The rows are written as that nonoka wrote them: each file's base64 bytes inline in its
entry row. After the upgrade they load unchanged (nothing is rewritten), the session goes
on, its new files are stored once by digest, and the schema is the one a fresh install
creates.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import entry_json, snapshot_json
from nonoka.store.media import digest_of
from nonoka.store.postgres import PostgresCheckpointStore
from nonoka.store.postgres import ledger as pg_ledger
from nonoka.store.postgres import migrations as pg_migrations
from nonoka.store.sqlite import SQLiteCheckpointStore, ledger
from nonoka.store.sqlite import migrations as sqlite_migrations
from nonoka.store.sqlite.digests import Chain
from tests import pg
from tests.store.test_postgres_upgrade import _catalog, _ledger
from tests.support.stores import raw_sqlite

IMAGE = os.urandom(40_000)
DATA = base64.b64encode(IMAGE).decode()


M = TypeVar("M", bound=Callable[..., Any])


def _before(migrations: list[M], name: str) -> list[M]:
    """The migrations a database had before ``name``."""
    return migrations[:[m.__name__ for m in migrations].index(name)]


def _session() -> SessionState:
    look = MemoryEntry.make("user", "look", parts=[
        {"type": "text", "text": "look"},
        {"type": "file", "media_type": "image/png", "data": DATA, "filename": "shot.png"}])
    return SessionState(session_id="before-media", turn_count=1, memory_entries=[
        MemoryEntry.make("system", "be brief"), look, MemoryEntry.assistant("a cat")])


def _again() -> list[MemoryEntry]:
    return [MemoryEntry.make("user", "and this one?", parts=[
        {"type": "text", "text": "and this one?"},
        {"type": "file", "media_type": "image/png", "data": DATA, "filename": "again.png"}])]


async def test_a_sqlite_file_from_before_media_upgrades_in_place(tmp_path: Path) -> None:
    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    state = _session()
    with raw_sqlite(old) as db:
        ledger.apply_migrations(db, str(old), _before(
            sqlite_migrations.MIGRATIONS, "m009_media"))
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
                   "memory_generation, created_at, updated_at) VALUES (?, ?, 1, 3, 0, 1, 2)",
                   (state.session_id, snapshot_json(state)))
        chain = Chain()
        for seq, entry in enumerate(state.memory_entries):
            chain = chain.add(entry_json(entry))
            db.execute("INSERT INTO session_entries (session_id, seq, entry_json, key_chain, "
                       f"doc) VALUES (?, ?, ?, ?, {sqlite_migrations.NEXT_DOC})",
                       (state.session_id, seq, entry_json(entry), chain.encode()))
        rows_before = db.execute("SELECT seq, entry_json FROM session_entries").fetchall()
    store = SQLiteCheckpointStore(old)
    try:
        loaded = await store.load_session(state.session_id)
        assert loaded is not None
        assert loaded.memory_entries == state.memory_entries
        with raw_sqlite(old) as db:
            assert db.execute("SELECT seq, entry_json FROM session_entries").fetchall() \
                == rows_before  # nothing rewritten
            assert db.execute("SELECT count(*) FROM media").fetchone() == (0,)
        grown = loaded.model_copy(update={"memory_entries": [*loaded.memory_entries,
                                                             *_again()]})
        assert await store.save_session(grown) == 2
        reloaded = await store.load_session(state.session_id)
        assert reloaded is not None and reloaded.memory_entries == grown.memory_entries
    finally:
        await store.close()
    with raw_sqlite(old) as db:
        assert db.execute("SELECT digest, size FROM media").fetchall() == [
            (digest_of(IMAGE), len(IMAGE))]
        assert db.execute("SELECT seq FROM session_entries WHERE media IS NOT NULL"
                          ).fetchall() == [(3,)]
        assert [r[0] for r in db.execute("SELECT name FROM nonoka_migrations")] == [
            m.__name__ for m in sqlite_migrations.MIGRATIONS]

    await SQLiteCheckpointStore(fresh).close()

    def schema(path: Path) -> list[tuple[str, str, str, str | None]]:
        with raw_sqlite(path) as db:
            return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))

    assert schema(old) == schema(fresh)


async def test_a_postgres_schema_from_before_media_upgrades_in_place() -> None:
    state = _session()
    with pg.temp_schema() as old, pg.temp_schema() as fresh:
        async with await psycopg.AsyncConnection.connect(pg.PG_URL, autocommit=True) as conn:
            await conn.execute(f"SET search_path = {old}")
            await pg_ledger.migrate(conn, "test", old, _before(
                pg_migrations.MIGRATIONS, "m007_media"))
        with pg.connect(old) as raw:
            raw.execute("INSERT INTO checkpoints (session_id, state_json, revision, "
                        "entry_count, memory_generation, created_at, updated_at) VALUES "
                        "(%s, %s, 1, 3, 0, 1, 2)", (state.session_id, snapshot_json(state)))
            for seq, entry in enumerate(state.memory_entries):
                raw.execute("INSERT INTO session_entries (session_id, seq, entry_json) "
                            "VALUES (%s, %s, %s)", (state.session_id, seq, entry_json(entry)))
        store = PostgresCheckpointStore(pg.PG_URL, schema=old)
        try:
            loaded = await store.load_session(state.session_id)
            assert loaded is not None
            assert loaded.memory_entries == state.memory_entries
            grown = loaded.model_copy(update={"memory_entries": [*loaded.memory_entries,
                                                                 *_again()]})
            assert await store.save_session(grown) == 2
            reloaded = await store.load_session(state.session_id)
            assert reloaded is not None and reloaded.memory_entries == grown.memory_entries
        finally:
            await store.close()
        with pg.connect(old) as raw:
            assert raw.execute("SELECT digest, size FROM media").fetchall() == [
                (digest_of(IMAGE), len(IMAGE))]
            assert raw.execute("SELECT seq FROM session_entries WHERE media IS NOT NULL"
                               ).fetchall() == [(3,)]
        fresh_store = PostgresCheckpointStore(pg.PG_URL, schema=fresh)
        try:
            await fresh_store.database.open()
        finally:
            await fresh_store.close()
        assert _catalog(old) == _catalog(fresh)
        assert _ledger(old) == _ledger(fresh) == [m.__name__ for m in pg_migrations.MIGRATIONS]
