"""What only the SQLite engine has: the file, its modes, its pragmas, its migrations."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from nonoka.errors import StoreError, UnsupportedVersionError
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.ledger import apply_migrations
from nonoka.store.sqlite.migrations import MIGRATIONS
from tests.support.stores import raw_sqlite


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _state(session_id: str = "s1", entries: int = 4) -> SessionState:
    return SessionState(session_id=session_id, memory_entries=[
        MemoryEntry.make("user", f"entry {i} " + "x" * 300) for i in range(entries)
    ])


async def test_wal_and_pragmas(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    try:
        db = store.connection
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        assert store.path == tmp_path / "s.db"
    finally:
        await store.close()
    with raw_sqlite(tmp_path / "s.db") as db:  # WAL is a property of the file
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.usefixtures("open_umask")
async def test_new_files_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "sessions.db"
    store = SQLiteCheckpointStore(path)
    try:
        await store.save_session(_state())
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        for file in files:
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        await store.close()


async def test_existing_file_mode_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await SQLiteCheckpointStore(path).close()
    path.chmod(0o640)
    store = SQLiteCheckpointStore(path)
    await store.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


async def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await SQLiteCheckpointStore(path).close()
    with raw_sqlite(path) as db:
        first = db.execute("SELECT name, applied_at FROM nonoka_migrations").fetchall()
    assert [name for name, _ in first] == [m.__name__ for m in MIGRATIONS]
    store = SQLiteCheckpointStore(path)
    try:
        assert apply_migrations(store.connection, str(path)) == []
    finally:
        await store.close()
    with raw_sqlite(path) as db:
        assert db.execute("SELECT name, applied_at FROM nonoka_migrations").fetchall() == first


async def test_database_from_a_newer_nonoka_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    await store.save_session(_state())
    await store.close()
    with raw_sqlite(path) as db:
        db.execute("INSERT INTO nonoka_migrations VALUES ('m999_from_the_future', 0)")
    before = _bytes(path)
    with pytest.raises(UnsupportedVersionError, match=r"m999_from_the_future") as info:
        SQLiteCheckpointStore(path)
    assert str(path) in str(info.value)
    assert _bytes(path) == before


@pytest.mark.parametrize(
    "content",
    [os.urandom(8192), b"hello, I am a text file\n", b"SQLite format 3\x00" + b"\x00" * 20],
    ids=["random", "text", "short-header"],
)
def test_not_a_database_is_refused_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=str(path)):
        SQLiteCheckpointStore(path)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]  # no -wal, no -shm


async def _database_with_data(path: Path) -> bytes:
    store = SQLiteCheckpointStore(path)
    await store.save_session(_state(entries=200))
    await store.close()
    return _bytes(path)


@pytest.mark.parametrize("keep", [0.5, 0.9, 50])
async def test_truncated_file_is_refused_untouched(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "s.db"
    data = await _database_with_data(path)
    cut = data[: int(len(data) * keep) if keep < 1 else int(keep)]
    _write(path, cut)
    with pytest.raises(StoreError, match=r"truncated|not a SQLite database"):
        SQLiteCheckpointStore(path)
    assert _bytes(path) == cut


async def _damage(path: Path, first_bad: float, *, schema: bool = True) -> None:
    """Overwrite the pages from ``first_bad`` (a fraction of the file) on, page 1 kept
    (and with ``schema=False`` every page of the schema)."""
    data = bytearray(await _database_with_data(path))
    page = int.from_bytes(data[16:18], "big")
    with closing(sqlite3.connect(path)) as db:
        last = max(n for (n,) in db.execute(
            "SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'"))
    floor = page if schema else last * page
    start = max(floor, int(len(data) * first_bad) // page * page)
    data[start:] = b"\xa5" * (len(data) - start)
    _write(path, bytes(data))


async def test_damaged_schema_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _damage(path, 0.0)
    with pytest.raises(StoreError, match=rf"{path} is not a usable SQLite database"):
        SQLiteCheckpointStore(path)


async def test_damaged_data_pages_give_store_errors_at_load(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _damage(path, 0.5, schema=False)
    store = SQLiteCheckpointStore(path)
    try:
        with pytest.raises(StoreError, match=str(path)):
            await store.load_session("s1")
    finally:
        await store.close()


async def test_closed_store_says_so(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.load_session("s1")


async def test_transaction_is_shared_and_rolls_back(tmp_path: Path) -> None:
    """Other components (the CLI's index) write through the same connection and lock."""
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    try:
        with store.transaction() as db:
            db.execute("CREATE TABLE extra (x INTEGER)")
        def insert_then_fail() -> None:
            with store.transaction() as db:
                db.execute("INSERT INTO extra VALUES (1)")
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            insert_then_fail()
        with store.transaction(write=False) as db:
            assert db.execute("SELECT count(*) FROM extra").fetchone()[0] == 0
        with pytest.raises(StoreError, match="no such table"), store.transaction() as db:
            db.execute("SELECT * FROM missing")
        assert not store.connection.in_transaction
    finally:
        await store.close()


OPENER = """
import sys, time, asyncio
from nonoka.state.session_state import SessionState
from nonoka.store.sqlite import SQLiteCheckpointStore
path, name, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start_at:
    time.sleep(0.0005)
async def main():
    store = SQLiteCheckpointStore(path)
    await store.save_session(SessionState(session_id=name))
    await store.close()
asyncio.run(main())
"""


async def test_processes_opening_a_fresh_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "s.db"
    start_at = time.time() + 1.5
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", OPENER, str(path), f"p{n}", str(start_at),
            stderr=asyncio.subprocess.PIPE,
        )
        for n in range(8)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
    with raw_sqlite(path) as db:
        names = [r[0] for r in db.execute("SELECT name FROM nonoka_migrations")]
        sessions = {r[0] for r in db.execute("SELECT session_id FROM checkpoints")}
    assert names == [m.__name__ for m in MIGRATIONS]
    assert sessions == {f"p{n}" for n in range(8)}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_snapshot_rows_are_padded_to_a_size_step_and_load_back(tmp_path: Path) -> None:
    """Padded with JSON whitespace so that a save of about the same size rewrites the
    row in place; the padding is not part of what loads."""
    from nonoka.store.sqlite.checkpoints import SNAPSHOT_SIZE_STEP

    store = SQLiteCheckpointStore(tmp_path / "pad.db")
    state = SessionState(session_id="pad", extension_state={"x": {"text": "é" * 333}})
    revision = await store.save_session(state)
    state = state.model_copy(update={"revision": revision, "turn_count": 12345})
    await store.save_session(state)
    (text, size), = store.connection.execute(
        "SELECT state_json, length(CAST(state_json AS BLOB)) FROM checkpoints").fetchall()
    assert size % SNAPSHOT_SIZE_STEP == 0 and text.endswith(" ")
    assert json.loads(text)["turn_count"] == 12345
    loaded = await store.load_session("pad")
    assert loaded is not None and loaded.extension_state == state.extension_state
    await store.close()


def _stored_chain(path: Path, session_id: str) -> tuple[bytes | str, bytes | str]:
    """The stored digest chain of the session's last entry, and the one its rows give."""
    from nonoka.store.sqlite.digests import Chain
    from nonoka.store.sqlite.packing import unpack

    with raw_sqlite(path) as db:
        rows = db.execute("SELECT entry_json, key_chain FROM session_entries "
                          "WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
    chain = Chain()
    for text, _ in rows:
        chain = chain.add(unpack(text))
    return rows[-1][1], chain.stored()


async def test_a_store_saving_on_what_another_wrote_is_refused_or_right(
        tmp_path: Path) -> None:
    """A store appends on what it saved itself without reading the row back; a save by
    another process in between is still a conflict, and once reloaded it appends right."""
    from nonoka.errors import SessionConflictError

    path = tmp_path / "two.db"
    ours, theirs = SQLiteCheckpointStore(path), SQLiteCheckpointStore(path)
    try:
        state = _state("s", 2)
        state = state.model_copy(update={"revision": await ours.save_session(state)})
        state = _append(state, "ours")
        state = state.model_copy(update={"revision": await ours.save_session(state)})
        other = await theirs.load_session("s")
        assert other is not None
        await theirs.save_session(_append(other, "theirs"))
        with pytest.raises(SessionConflictError):
            await ours.save_session(_append(state, "stale"))
        again = await ours.load_session("s")
        assert again is not None
        again = _append(again, "after")
        await ours.save_session(again)
        loaded = await theirs.load_session("s")
        assert loaded is not None and loaded.memory_entries == again.memory_entries
        assert len(set(_stored_chain(path, "s"))) == 1
    finally:
        await ours.close()
        await theirs.close()


async def test_a_rolled_back_save_is_not_taken_for_stored(tmp_path: Path) -> None:
    """What a store remembers of its last save is forgotten when the transaction rolls
    back: another process may then write the same revision and count, other entries."""
    path = tmp_path / "rollback.db"
    ours, theirs = SQLiteCheckpointStore(path), SQLiteCheckpointStore(path)
    try:
        state = _state("s", 2)
        state = state.model_copy(update={"revision": await ours.save_session(state)})
        with pytest.raises(RuntimeError, match="failed"):
            _write_then_fail(ours, _append(state, "rolled back"))
        await theirs.save_session(_append(state, "kept instead"))
        loaded = await ours.load_session("s")
        assert loaded is not None
        assert loaded.memory_entries[-1].content == "kept instead"
        await ours.save_session(_append(loaded, "next"))
        assert len(set(_stored_chain(path, "s"))) == 1
    finally:
        await ours.close()
        await theirs.close()


def _append(state: SessionState, text: str) -> SessionState:
    return state.model_copy(update={
        "memory_entries": [*state.memory_entries, MemoryEntry.make("user", text)]})


def _write_then_fail(store: SQLiteCheckpointStore, state: SessionState) -> None:
    with store.transaction() as db:
        store.write_session(db, state)
        raise RuntimeError("the rest of the transaction failed")


async def test_a_new_session_never_takes_the_block_of_rows_left_behind(tmp_path: Path) -> None:
    """Another program deleted the newest session's checkpoint row and not its entries:
    the next new session gets a block of its own, not the one those rows still hold."""
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        await store.save_session(_state("left", entries=3))
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("DELETE FROM checkpoints WHERE session_id = 'left'")
        fresh = _state("fresh", entries=4)
        await store.save_session(fresh)
        loaded = await store.load_session("fresh")
        assert loaded is not None and loaded.memory_entries == fresh.memory_entries
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("SELECT session_id, count(*) FROM session_entries GROUP BY 1 "
                              "ORDER BY 1").fetchall() == [("fresh", 4), ("left", 3)]
    finally:
        await store.close()


async def test_an_append_writes_the_entry_page_and_the_checkpoint_page(tmp_path: Path) -> None:
    """A save that appends one entry commits two pages: the entry table's leaf (the
    table is its own key, ``m014_entries_by_session``) and the checkpoint row's page;
    not an index page as well. Counted in write-ahead-log frames."""
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        state = _state("s", entries=50)
        state = state.model_copy(update={"revision": await store.save_session(state)})
        page = store.connection.execute("PRAGMA page_size").fetchone()[0]
        frames = []
        for n in range(20):
            before = os.stat(f"{path}-wal").st_size
            grown = state.model_copy(update={"memory_entries": [
                *state.memory_entries, MemoryEntry.make("user", f"more {n} " + "y" * 300)]})
            revision = await store.save_session(grown)
            state = grown.model_copy(update={"revision": revision})
            frames.append((os.stat(f"{path}-wal").st_size - before) // (page + 24))
        assert sorted(frames)[len(frames) // 2] == 2, frames
    finally:
        await store.close()


def _lease_rows(path: Path) -> dict[str, float]:
    with raw_sqlite(path) as db:
        return dict(db.execute("SELECT session_id, expires_at FROM session_leases"))


async def test_a_released_lease_of_no_stored_session_leaves_no_row(tmp_path: Path) -> None:
    """A released lease keeps its row for the session's next turn, but a lock's name
    (``nonoka serve``'s client lines) or a session deleted while held is no session: its
    row goes at release rather than staying for ever. ``db vacuum`` removes the ones an
    older nonoka left."""
    from nonoka.ops.maintenance import vacuum
    from nonoka.store.project import open_project_stores

    path = tmp_path / ".nonoka" / "sessions.db"
    async with open_project_stores(tmp_path) as stores:
        store, leases = stores.checkpoints, stores.leases
        await store.save_session(_state("kept"))
        await store.save_session(_state("deleted"))
        for name in ("kept", "deleted", "line-0123abcd"):
            assert await leases.acquire_lease(name, "host:1:me", 30)
        assert await store.delete_session("deleted")
        for name in ("kept", "deleted", "line-0123abcd"):
            assert await leases.release_lease(name, "host:1:me")
        assert _lease_rows(path) == {"kept": 0}
        assert await leases.acquire_lease("line-0123abcd", "host:1:me", 30)  # taken again
        assert await leases.release_lease("line-0123abcd", "host:1:me")
        assert _lease_rows(path) == {"kept": 0}

        with raw_sqlite(path) as db:  # as an older nonoka left them
            db.execute("INSERT INTO session_leases (session_id, owner, expires_at, "
                       "acquired_at) VALUES ('line-old', 'host:1:me', 0, 0), "
                       "('line-live', 'host:1:me', ?, 0)", (time.time() + 60,))
        await vacuum(stores)
        assert set(_lease_rows(path)) == {"kept", "line-live"}
