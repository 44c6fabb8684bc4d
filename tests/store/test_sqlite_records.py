"""What only the SQLite record store has: its migration, its shared connection, its
indexes, and several processes appending to one log."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from nonoka.errors import StoreError
from nonoka.state.session_state import SessionState
from nonoka.store.base import snapshot_json
from nonoka.store.records import SessionRecord
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.ledger import apply_migrations
from nonoka.store.sqlite.migrations import MIGRATIONS, m002_session_index_and_events
from nonoka.store.sqlite.records import SQLiteRecordStore
from tests.support.stores import raw_sqlite

ALL = [m.__name__ for m in MIGRATIONS]


def _tables(path: Path) -> set[str]:
    with raw_sqlite(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master")}


def _old_file(path: Path) -> SessionState:
    """A file as the previous nonoka left it: only m001, with one session stored."""
    state = SessionState(session_id="old-session")
    with raw_sqlite(path) as db:
        assert apply_migrations(db, str(path), MIGRATIONS[:1]) == ["m001_checkpoint_tables"]
        db.execute("INSERT INTO checkpoints VALUES (?, ?, 1, 0, 0, 0, 0)",
                   (state.session_id, snapshot_json(state)))
    assert "cli_sessions" not in _tables(path)
    return state.model_copy(update={"revision": 1})


def test_m002_comes_after_m001() -> None:
    assert ALL[:2] == ["m001_checkpoint_tables", "m002_session_index_and_events"]


async def test_old_file_is_upgraded_by_the_record_store(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    old = _old_file(path)
    records = SQLiteRecordStore(path)
    try:
        await records.upsert_session(SessionRecord(session_id=old.session_id, title="t"))
        await records.append_event(old.session_id, "request", {"n": 1})
        assert [e.seq for e in await records.list_events(old.session_id)] == [1]
    finally:
        await records.close()
    with raw_sqlite(path) as db:
        assert [r[0] for r in db.execute("SELECT name FROM nonoka_migrations")] == ALL
    assert {"cli_sessions", "events", "cli_sessions_list_order",
            "cli_sessions_conversation_key"} <= _tables(path)
    store = SQLiteCheckpointStore(path)
    try:
        assert await store.load_session(old.session_id) == old  # the old data is intact
    finally:
        await store.close()


async def test_old_file_is_upgraded_by_the_checkpoint_store(tmp_path: Path) -> None:
    """Any opener migrates, so the bridge's first open of an old file adds the tables."""
    path = tmp_path / "s.db"
    old = _old_file(path)
    store = SQLiteCheckpointStore(path)
    try:
        assert await store.load_session(old.session_id) == old
    finally:
        await store.close()
    assert {"cli_sessions", "events"} <= _tables(path)


async def test_an_upgraded_file_has_the_schema_of_a_fresh_one(tmp_path: Path) -> None:
    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    _old_file(old)
    for path in (old, fresh):
        await SQLiteCheckpointStore(path).close()

    def schema(path: Path) -> list[tuple[str, str, str, str | None]]:
        with raw_sqlite(path) as db:
            return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))

    assert schema(old) == schema(fresh)
    with raw_sqlite(old) as db:
        assert [r[0] for r in db.execute("SELECT name FROM nonoka_migrations")] == ALL


def test_m002_is_idempotent(tmp_path: Path) -> None:
    with raw_sqlite(tmp_path / "s.db") as db:
        m002_session_index_and_events(db)
        m002_session_index_and_events(db)
        assert db.execute("SELECT count(*) FROM cli_sessions").fetchone() == (0,)


async def test_shares_the_checkpoint_store_connection(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    records = SQLiteRecordStore.from_checkpoints(store)
    try:
        assert records.connection is store.connection
        assert records.path == store.path
        await store.save_session(SessionState(session_id="s1"))
        await records.upsert_session(SessionRecord(session_id="s1", title="hello"))
        await records.append_event("s1", "request", {"n": 1})
        with store.transaction(write=False) as db:
            assert db.execute("SELECT title FROM cli_sessions").fetchall() == [("hello",)]
            assert db.execute("SELECT seq, kind FROM events").fetchall() == [(1, "request")]
        with pytest.raises(ValueError, match="JSON"):
            await records.append_event("s1", "model_call", {"cost_usd": float("nan")})
        assert not store.connection.in_transaction
        await records.close()  # borrowed: the checkpoint store stays open
        assert await store.load_session("s1") is not None
        assert await records.get_session("s1") is not None
    finally:
        await store.close()
    with pytest.raises(StoreError, match="closed"):
        await records.get_session("s1")


def _plans(db: sqlite3.Connection, statements: list[str]) -> list[str]:
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert selects
    return [" ".join(str(r[-1]) for r in db.execute(f"EXPLAIN QUERY PLAN {s}"))
            for s in selects]


async def test_lookups_use_the_indexes(tmp_path: Path) -> None:
    records = SQLiteRecordStore(tmp_path / "s.db")
    try:
        for n in range(50):
            await records.upsert_session(SessionRecord(
                session_id=f"s{n:03}", last_active=n, metadata={
                    "conversation_key": f"k{n % 5}", "host_session_id": f"ses_{n % 10}"}))
            await records.append_event(f"s{n:03}", "request", {})
        db = records.connection
        with Trace(db) as statements:
            assert len(await records.find_by_conversation_key("k1")) == 10
        assert all("cli_sessions_conversation_key" in p for p in _plans(db, statements))
        with Trace(db) as statements:  # the bridge's lookup on every request
            assert len(await records.find_by_host_session("ses_3")) == 5
        assert all("cli_sessions_host_session" in p for p in _plans(db, statements))
        with Trace(db) as statements:
            assert len(await records.list_sessions(5, purpose=None)) == 5
        assert all("cli_sessions_list_order" in p for p in _plans(db, statements))
        with Trace(db) as statements:
            assert len(await records.find_sessions_by_prefix("s00")) == 10
        assert all("USING INDEX sqlite_autoindex_cli_sessions_1 (session_id>? AND session_id<?)"
                   in p for p in _plans(db, statements))
        with Trace(db) as statements:
            assert len(await records.list_events("s001")) == 1
        assert all("USING PRIMARY KEY" in p or "USING INDEX sqlite_autoindex_events_1" in p
                   for p in _plans(db, statements))
    finally:
        await records.close()


def _wal_frames(db_path: Path) -> int:
    """Pages appended to the WAL so far (its header is 32 bytes, a frame's 24)."""
    page_size = 4096
    wal = Path(f"{db_path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(size - 32, 0) // (page_size + 24)


async def test_a_turns_row_writes_only_its_own_page(tmp_path: Path) -> None:
    """The row written after every turn (counters, status, ``last_active``) of the most
    recent session, with the metadata it had, writes its leaf and no index page: not the
    list order's (``m013``), not the lookups' on the metadata (``m012``). When another
    session becomes the most recent, the order moves; new metadata is still written, and
    found by the lookups."""
    records = SQLiteRecordStore(tmp_path / "s.db")
    try:
        metadata = {"conversation_key": "k", "host_session_id": "ses_1", "purpose": "chat"}
        for n in range(300):  # enough rows that the table and each index have many pages
            await records.upsert_session(SessionRecord(
                session_id=f"s{n:03}", last_active=n, metadata={
                    **metadata, "conversation_key": f"k{n}", "host_session_id": f"ses_{n}"}))
        db = records.connection
        turn = SessionRecord(session_id="s150", last_active=1000.0, turn_count=7,
                             metadata={**metadata, "conversation_key": "k150",
                                       "host_session_id": "ses_150"})

        async def pages_written(record: SessionRecord) -> int:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = _wal_frames(records.path)
            await records.upsert_session(record)
            return _wal_frames(records.path) - before

        assert await pages_written(turn) == 2  # to the top: the row's leaf, the order's
        for n in range(1, 4):  # its next turns
            assert await pages_written(turn.model_copy(update={
                "last_active": 1000.0 + n, "turn_count": 7 + n})) == 1
        stored = await records.get_session("s150")
        assert stored is not None and (stored.turn_count, stored.last_active) == (10, 1003.0)
        assert [r.session_id for r in await records.list_sessions(2)] == ["s150", "s299"]
        assert await pages_written(SessionRecord(  # another session's turn
            session_id="s010", last_active=1004.0, metadata={
                **metadata, "conversation_key": "k10", "host_session_id": "ses_10"})) > 1
        assert [r.session_id for r in await records.list_sessions(3)] == [
            "s010", "s150", "s299"]
        assert db.execute("SELECT list_order FROM cli_sessions WHERE session_id = 's150'"
                          ).fetchone() == (1003.0,)  # settled when it left the top
        await records.upsert_session(turn.model_copy(update={"metadata": {
            **metadata, "conversation_key": "moved", "host_session_id": "ses_moved"}}))
        assert [r.session_id for r in await records.find_by_conversation_key("moved")] == [
            "s150"]
        assert [r.session_id for r in await records.find_by_host_session("ses_moved")] == [
            "s150"]
        assert await records.find_by_conversation_key("k150") == []
    finally:
        await records.close()


async def test_an_m011_file_gets_the_host_lookup(tmp_path: Path) -> None:
    """A file from before ``m012_session_list_lookups``, its rows written as that nonoka
    wrote them: upgraded, its host conversations are found through the new index, newest
    first, and the conversation key's index no longer holds ``last_active``."""
    path = tmp_path / "s.db"
    with raw_sqlite(path) as db:
        apply_migrations(db, str(path), MIGRATIONS[:ALL.index("m012_session_list_lookups")])
        for sid, at, host in (("a", 1.0, "ses_1"), ("b", 3.0, "ses_1"), ("c", 2.0, "ses_2")):
            db.execute("INSERT INTO cli_sessions (session_id, created_at, last_active, "
                       "metadata) VALUES (?, ?, ?, ?)", (sid, at, at, json.dumps(
                           {"conversation_key": "k", "host_session_id": host})))
    records = SQLiteRecordStore(path)
    try:
        db = records.connection
        with Trace(db) as statements:
            assert [r.session_id for r in await records.find_by_host_session("ses_1")] == [
                "b", "a"]
        assert all("cli_sessions_host_session" in p for p in _plans(db, statements))
        columns = db.execute("SELECT name FROM pragma_index_xinfo("
                             "'cli_sessions_conversation_key') WHERE key").fetchall()
        assert columns == [(None,)]  # one key column, the expression
        assert [r.session_id for r in await records.find_by_conversation_key("k")] == [
            "b", "c", "a"]
    finally:
        await records.close()


class Trace:
    """Collect the statements a connection runs inside the block."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.statements: list[str] = []

    def __enter__(self) -> list[str]:
        self.db.set_trace_callback(self.statements.append)
        return self.statements

    def __exit__(self, *_exc: object) -> None:
        self.db.set_trace_callback(None)


APPENDER = """
import asyncio, sys, time
from nonoka.store.sqlite.records import SQLiteRecordStore
path, name, count, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
async def main():
    records = SQLiteRecordStore(path)
    try:
        while time.time() < start_at:
            time.sleep(0.0005)
        for n in range(count):
            await records.append_event("shared", "request", {"who": name, "n": n})
    finally:
        await records.close()
asyncio.run(main())
"""


async def test_processes_appending_to_one_log(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    workers, count = 4, 25
    start_at = time.time() + 1.5
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", APPENDER, str(path), f"w{n}", str(count), str(start_at),
            stderr=asyncio.subprocess.PIPE,
        )
        for n in range(workers)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
    records = SQLiteRecordStore(path)
    try:
        events = await records.list_events("shared", 1000)
    finally:
        await records.close()
    assert [e.seq for e in events] == list(range(1, workers * count + 1))
    for n in range(workers):  # each writer's events landed, in its own order
        assert [e.data["n"] for e in events if e.data["who"] == f"w{n}"] == list(range(count))
