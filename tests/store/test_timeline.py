"""The timeline keyed by a number per session (``nonoka.store.sqlite.timeline``): a file
of the schema before it upgrades with every row read back the same, a session keeps its
number and never shares it, a delete takes its rows, and writes through the ``events``
view land in the table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import encode_entry, snapshot_json
from nonoka.store.sqlite import SQLiteCheckpointStore, ledger, migrations
from nonoka.store.sqlite.digests import Chain
from nonoka.store.sqlite.packing import EVENT_DICTIONARY, pack, register
from nonoka.store.sqlite.records import SQLiteRecordStore
from tests.support.stores import raw_sqlite

_NAMES = [m.__name__ for m in migrations.MIGRATIONS]
_BEFORE = migrations.MIGRATIONS[:_NAMES.index("m019_timeline_numbered")]

_REQUEST = ('{"source":"serve /v1/responses","messages":1,"model":"openai:m",'
            '"stream":false,"store":true,"previous_response_id":null,"tools":[]}')
_EVENTS = "SELECT session_id, seq, at, kind, data_json FROM events ORDER BY session_id, seq"
_ENTRIES = "SELECT * FROM session_entries ORDER BY doc"


def _m018_file(path: Path) -> None:
    """A file as nonoka left it before the timeline was numbered: three sessions' logs
    (one deflated row, text rows, a row whose JSON was damaged behind the check's back,
    an ``at`` that is not a number) and entry rows whose chain is text."""
    with raw_sqlite(path) as db:
        ledger.apply_migrations(db, str(path), _BEFORE)
        packed = pack(_REQUEST, EVENT_DICTIONARY, 64)
        assert isinstance(packed, bytes)
        rows = [("b-session", 1, 10.5, "request", packed),
                ("b-session", 2, 10.75, "session", '{"new":true}'),
                ("a-session", 1, 1.0, "model_call", '{"input_tokens":3}'),
                ("a-session", 2, 2.0, "finish", '{"finish_reason":"stop"}'),
                ("a-session", 7, "noon", "warning", '{"message":"late"}'),
                ("c-session", 1, 3.25, "request", '{"n":1}')]
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows)
        db.execute("PRAGMA ignore_check_constraints = ON")
        db.execute("INSERT INTO events VALUES ('c-session', 2, 4.0, 'error', '{broken')")
        db.execute("PRAGMA ignore_check_constraints = OFF")
        db.execute("INSERT INTO checkpoints (session_id, entry_block, revision, entry_count, "
                   "memory_generation, created_at, updated_at, state_json) "
                   "VALUES ('a-session', 1, 1, 2, 0, 1, 1, ?)",
                   (snapshot_json(SessionState(session_id="a-session")),))
        chain = Chain()
        for seq, entry in enumerate((MemoryEntry.make("user", "user says hi"),
                                     MemoryEntry.make("assistant", "assistant says hi"))):
            text = encode_entry(entry)[0]
            chain = chain.add(text)
            db.execute("INSERT INTO session_entries (doc, session_id, seq, key_chain, "
                       "entry_json) VALUES (?, 'a-session', ?, ?, ?)",
                       ((1 << 32) + seq, seq, chain.encode(), text))


def _read(path: Path, sql: str) -> list[tuple[object, ...]]:
    with raw_sqlite(path) as db:
        return db.execute(sql).fetchall()


async def test_an_m018_file_upgrades_with_every_row_read_back_the_same(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _m018_file(path)
    events, entries = _read(path, _EVENTS), _read(path, _ENTRIES)
    store = SQLiteCheckpointStore(path)
    try:
        log = SQLiteRecordStore.from_checkpoints(store)
        assert _read(path, _EVENTS) == events
        assert _read(path, _ENTRIES) == entries  # the entry rows are not rewritten
        listed = await log.list_events("b-session")
        assert [(e.seq, e.at, e.kind) for e in listed] == [(1, 10.5, "request"),
                                                          (2, 10.75, "session")]
        assert listed[0].data["source"] == "serve /v1/responses"
        await log.append_event("a-session", "request", {"n": 8})
        assert [e.seq for e in await log.list_events("a-session")] == [1, 2, 7, 8]
        loaded = await store.load_session("a-session")
        assert loaded is not None
        assert [e.content for e in loaded.memory_entries] == ["user says hi",
                                                              "assistant says hi"]
    finally:
        await store.close()
    with raw_sqlite(path) as db:
        register(db)
        assert db.execute("SELECT seq, kind, entry_text(data_json) FROM events WHERE "
                          "session_id = 'a-session' AND seq = 8").fetchone() == (
            8, "request", '{"n":8}')
        assert db.execute("PRAGMA integrity_check").fetchall() == [
            ("CHECK constraint failed in timeline",)]  # the damaged row, kept as it was
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'events_m018'"
                          ).fetchone() is None
        numbers = dict(db.execute("SELECT session_id, number FROM session_numbers"))
    assert sorted(numbers) == ["a-session", "b-session", "c-session"]
    assert len(set(numbers.values())) == 3


async def test_a_session_keeps_its_number_and_never_shares_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    log = SQLiteRecordStore(path)
    try:
        await log.append_event("one", "request", {"n": 1})
        await log.append_events("two", [("request", {"n": 1}), ("finish", {"n": 2})])
        first = _read(path, "SELECT session_id, number FROM session_numbers ORDER BY 1")
        for n in range(2, 5):
            await log.append_event("one", "model_call", {"n": n})
        await log.append_events("one", [])
        assert _read(path, "SELECT session_id, number FROM session_numbers ORDER BY 1"
                     ) == first
        assert len({number for _, number in first}) == 2
        assert [(e.seq, e.kind) for e in await log.list_events("one")] == [
            (1, "request"), (2, "model_call"), (3, "model_call"), (4, "model_call")]
        assert [(e.seq, e.kind) for e in await log.list_events("two")] == [
            (1, "request"), (2, "finish")]
        assert _read(path, "SELECT count(*) FROM timeline_kinds") == [(3,)]
    finally:
        await log.close()


async def test_deleting_a_session_deletes_its_timeline_rows_and_number(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    log = SQLiteRecordStore(path)
    try:
        await log.append_events("gone", [("request", {"n": 1}), ("finish", {"n": 2})])
        await log.append_event("kept", "request", {"n": 1})
        assert await log.delete_session_record("gone")
        assert not await log.delete_session_record("gone")
        assert await log.list_events("gone") == []
        assert _read(path, "SELECT session_id FROM session_numbers") == [("kept",)]
        assert _read(path, "SELECT count(*) FROM timeline") == [(1,)]
        await log.append_event("gone", "request", {"n": 3})  # a new log from seq 1
        assert [e.seq for e in await log.list_events("gone")] == [1]
        assert [e.seq for e in await log.list_events("kept")] == [1]
    finally:
        await log.close()


def test_writes_through_the_view_land_in_the_table(tmp_path: Path) -> None:
    """Another program inserts, changes and deletes rows through ``events`` with the
    columns it always had; the checks still hold."""
    path = tmp_path / "s.db"
    with raw_sqlite(path) as db:
        ledger.apply_migrations(db, str(path), migrations.MIGRATIONS)
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", [
            ("x", 1, 1.0, "request", "{}"), ("x", 2, 2.0, "custom", '{"a":1}'),
            ("y", 1, 3.0, "request", "[]")])
        db.execute("UPDATE events SET kind = 'other', data_json = '{\"b\":2}' "
                   "WHERE session_id = 'x' AND seq = 2")
        db.execute("UPDATE events SET session_id = 'z' WHERE session_id = 'y'")
        assert db.execute(_EVENTS).fetchall() == [
            ("x", 1, 1.0, "request", "{}"), ("x", 2, 2.0, "other", '{"b":2}'),
            ("z", 1, 3.0, "request", "[]")]
        db.execute("DELETE FROM events WHERE session_id = 'x' AND seq = 1")
        assert db.execute("SELECT count(*) FROM timeline").fetchone() == (2,)
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO events VALUES ('x', 9, 1, 'x', 'not json')")
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO events VALUES (NULL, 9, 1, 'x', '{}')")
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO events VALUES ('x', 2, 1, 'x', '{}')")  # seq taken
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
