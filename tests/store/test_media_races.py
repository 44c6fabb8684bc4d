"""A save and a delete racing on one stored file, on PostgreSQL (where writers run at
once; SQLite runs one writer at a time).

The other side of each race is a raw transaction held open at the worst moment: the
store's statements must wait for it, then do the right thing — never leave a reference
without its file, never keep a file nothing refers to.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import AsyncIterator

import psycopg
import pytest

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import encode_entry
from nonoka.store.media import digest_of
from nonoka.store.postgres import PostgresCheckpointStore
from nonoka.store.postgres.checkpoints import write_session
from tests import pg

IMAGE = random.Random(11).randbytes(50_000)
DIGEST = digest_of(IMAGE)
WAIT = 0.5
"""How long a blocked statement is given to show that it waits."""


def session(session_id: str) -> SessionState:
    return SessionState(session_id=session_id, memory_entries=[MemoryEntry.make(
        "user", "look", parts=[{"type": "text", "text": "look"}, {
            "type": "file", "media_type": "image/png",
            "data": base64.b64encode(IMAGE).decode()}])])


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    with pg.temp_schema() as name:
        yield name


async def _raw(schema: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    conn = await psycopg.AsyncConnection.connect(pg.PG_URL, autocommit=True,
                                                 options=f"-c search_path={schema}")
    await conn.execute("BEGIN")
    return conn


async def _stored(schema: str) -> list[tuple[object, ...]]:
    with pg.connect(schema) as conn:
        return conn.execute("SELECT digest FROM media").fetchall()


async def test_a_save_waits_for_a_delete_that_takes_the_file_and_stores_it_again(
        schema: str) -> None:
    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    try:
        await store.save_session(session("old"))
        other = await _raw(schema)  # a delete of "old", collecting the file, not committed
        await other.execute("DELETE FROM session_entries WHERE session_id = 'old'")
        await other.execute("SELECT digest FROM media WHERE digest = %s FOR UPDATE",
                            (DIGEST,))
        await other.execute("DELETE FROM media WHERE digest = %s", (DIGEST,))
        saving = asyncio.ensure_future(store.save_session(session("new")))
        await asyncio.sleep(WAIT)
        assert not saving.done(), "the save did not wait for the delete"
        await other.execute("COMMIT")
        await other.close()
        assert await saving == 1
        loaded = await store.load_session("new")
        assert loaded is not None and loaded.memory_entries == session("new").memory_entries
        assert await _stored(schema) == [(DIGEST,)]
    finally:
        await store.close()


async def test_a_delete_waits_for_a_save_that_refers_to_the_file_and_keeps_it(
        schema: str) -> None:
    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    try:
        await store.save_session(session("old"))
        text, _ = encode_entry(session("x").memory_entries[0])
        other = await _raw(schema)  # a save referring to the file, not committed
        await other.execute("SELECT digest FROM media WHERE digest = %s FOR KEY SHARE",
                            (DIGEST,))
        await other.execute("INSERT INTO session_entries (session_id, seq, entry_json, media) "
                            "VALUES ('other', 0, %s, %s)", (text, f'["{DIGEST}"]'))
        deleting = asyncio.ensure_future(store.delete_session("old"))
        await asyncio.sleep(WAIT)
        assert not deleting.done(), "the delete did not wait for the save"
        await other.execute("COMMIT")
        await other.close()
        assert await deleting is True
        assert await _stored(schema) == [(DIGEST,)]  # the other session's row needs it
    finally:
        await store.close()


async def test_a_delete_waits_for_a_save_holding_the_file_until_it_commits(
        schema: str) -> None:
    """The save found the file stored: its lock, held to its commit, is what keeps a
    delete's collection (which cannot see the save's uncommitted rows) from taking it."""
    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    other = PostgresCheckpointStore(pg.schema_url(schema))
    try:
        await store.save_session(session("old"))
        async with store.database.transaction() as conn:
            assert await write_session(conn, session("new")) == 1
            deleting = asyncio.ensure_future(other.delete_session("old"))
            await asyncio.sleep(WAIT)
            assert not deleting.done(), "the delete did not wait for the save"
        assert await deleting is True
        loaded = await store.load_session("new")
        assert loaded is not None and loaded.memory_entries == session("new").memory_entries
        assert await _stored(schema) == [(DIGEST,)]
    finally:
        await store.close()
        await other.close()


async def test_stores_deleting_and_saving_one_file_at_once_never_lose_it(schema: str) -> None:
    churner = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    keeper = PostgresCheckpointStore(pg.schema_url(schema))
    try:
        async def churn() -> None:
            for n in range(25):
                await churner.save_session(session(f"gone-{n}"))
                await churner.delete_session(f"gone-{n}")

        async def keep() -> None:
            for n in range(25):
                await keeper.save_session(session(f"kept-{n}"))
                if n % 5 == 4:
                    await keeper.delete_session(f"kept-{n - 1}")

        await asyncio.gather(churn(), keep())
        kept = [f"kept-{n}" for n in range(25) if n % 5 != 3]
        for sid in kept:
            loaded = await churner.load_session(sid)
            assert loaded is not None and loaded.memory_entries == session(sid).memory_entries
        assert await _stored(schema) == [(DIGEST,)]
        for sid in kept:
            await keeper.delete_session(sid)
        assert await _stored(schema) == []
    finally:
        await churner.close()
        await keeper.close()
