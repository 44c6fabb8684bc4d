"""SQLite files from before ``m010_compact_tables`` (entries in a ``WITHOUT ROWID`` table,
the snapshot in the middle of the checkpoint row, a full-text index with word
positions), upgraded in place.

The rows are written as that nonoka wrote them. After the upgrade every session loads
unchanged, keeps its branch, goes on, and is found by search again (the index is rebuilt
by the next search); every entry row sits in its session's block
(``m014_entries_by_session``), a row no checkpoint owns below zero; the schema is the
one a fresh install creates.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from nonoka.ops.text import fts5_query, words
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import entry_json, snapshot_json
from nonoka.store.sqlite import SQLiteCheckpointStore, ledger, migrations
from nonoka.store.sqlite.digests import Chain
from nonoka.store.sqlite.entries import catch_up, pending
from tests.support.stores import raw_sqlite

BEFORE = migrations.MIGRATIONS[:[m.__name__ for m in migrations.MIGRATIONS].index(
    "m010_compact_tables")]


def _state(sid: str, *texts: str) -> SessionState:
    return SessionState(session_id=sid, turn_count=len(texts) // 2, memory_entries=[
        MemoryEntry.make("user" if n % 2 == 0 else "assistant", text)
        for n, text in enumerate(texts)])


def _write_old(db: sqlite3.Connection, state: SessionState, *, base: str | None = None,
               base_count: int = 0) -> None:
    """A session as the store wrote it before ``m010``: snapshot row, entry rows with
    their digest chain and doc (a branch's own rows start at ``base_count``)."""
    entries = state.memory_entries
    db.execute("INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
               "memory_generation, created_at, updated_at, base_session_id, base_count) "
               "VALUES (?, ?, 1, ?, 0, 1, 2, ?, ?)",
               (state.session_id, snapshot_json(state), len(entries), base, base_count))
    chain = Chain()
    if base is not None:
        (text,) = db.execute("SELECT key_chain FROM session_entries WHERE session_id = ? "
                             "AND seq = ?", (base, base_count - 1)).fetchone()
        chain = Chain.decode(text)
    for seq in range(base_count, len(entries)):
        text = entry_json(entries[seq])
        chain = chain.add(text)
        db.execute("INSERT INTO session_entries (session_id, seq, entry_json, key_chain, "
                   f"doc) VALUES (?, ?, ?, ?, {migrations.NEXT_DOC})",
                   (state.session_id, seq, text, chain.encode()))


def _found(db: sqlite3.Connection, text: str) -> list[tuple[str, int]]:
    catch_up(db)
    return db.execute(
        "SELECT d.session_id, d.seq FROM session_search f JOIN session_entries d ON "
        "d.doc = f.rowid WHERE session_search MATCH ? ORDER BY f.rowid DESC",
        (fts5_query(words(text)),)).fetchall()


def _schema(path: Path) -> list[tuple[str, str, str, str | None]]:
    with raw_sqlite(path) as db:
        return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


async def test_a_file_from_before_compact_tables_upgrades_in_place(tmp_path: Path) -> None:
    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    parent = _state("parent", "find the okapi", "the okapi is here", "and the zebra?")
    branch = _state("branch", "find the okapi", "the okapi is here", "a giraffe then")
    with raw_sqlite(old) as db:
        ledger.apply_migrations(db, str(old), BEFORE)
        db.execute("PRAGMA journal_mode = WAL")
        _write_old(db, parent)
        _write_old(db, branch, base="parent", base_count=2)
        # what the old catch-up did: index every doc, then record how far
        db.execute("INSERT INTO session_search (rowid, body) SELECT doc, "
                   f"{migrations.SEARCH_BODY.format(e='entry_json')} FROM session_entries")
        db.execute("UPDATE search_state SET indexed = (SELECT max(doc) FROM session_entries)")
        # a row another writer inserted without a doc, not indexed yet
        db.execute("INSERT INTO session_entries (session_id, seq, entry_json) VALUES "
                   "('stray', 0, ?)", (json.dumps({"role": "user", "content": "lone okapi"}),))

    store = SQLiteCheckpointStore(old)
    try:
        for state in (parent, branch):
            loaded = await store.load_session(state.session_id)
            assert loaded is not None and loaded.memory_entries == state.memory_entries
        assert loaded is not None  # the branch
        grown = loaded.model_copy(update={"memory_entries": [
            *loaded.memory_entries, MemoryEntry.assistant("a tall one")]})
        assert await store.save_session(grown) == 2
        reloaded = await store.load_session("branch")
        assert reloaded is not None and reloaded.memory_entries == grown.memory_entries
    finally:
        await store.close()

    with raw_sqlite(old) as db:
        placed = db.execute("SELECT e.session_id, e.seq, e.doc - (c.entry_block << 32) "
                            "FROM session_entries e JOIN checkpoints c USING (session_id) "
                            "ORDER BY e.doc").fetchall()
        assert placed == [("parent", 0, 0), ("parent", 1, 1), ("parent", 2, 2),
                          ("branch", 2, 2), ("branch", 3, 3)]
        assert dict(db.execute("SELECT session_id, entry_block FROM checkpoints")) == {
            "parent": 1, "branch": 2}
        (stray,) = db.execute("SELECT doc FROM session_entries WHERE session_id = 'stray'"
                              ).fetchone()
        assert stray < 0
        assert pending(db) == 6  # every row: the index is rebuilt by the next search
        # newest session first (blocks follow creation), the row no session owns last
        assert _found(db, "okapi") == [("parent", 1), ("parent", 0), ("stray", 0)]
        assert _found(db, "tall") == [("branch", 3)]
        assert db.execute("SELECT base_session_id, base_count FROM checkpoints "
                          "WHERE session_id = 'branch'").fetchone() == ("parent", 2)
        columns = [r[1] for r in db.execute("PRAGMA table_info(checkpoints)")]
        assert columns[-1] == "state_json"
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert [r[0] for r in db.execute("SELECT name FROM nonoka_migrations")] == [
            m.__name__ for m in migrations.MIGRATIONS]

    await SQLiteCheckpointStore(fresh).close()
    assert _schema(old) == _schema(fresh)
    table = next(r[3] for r in _schema(fresh) if r[:2] == ("table", "session_entries"))
    assert table is not None and "WITHOUT ROWID" not in table


async def test_a_word_the_index_splits_in_two_is_searched_as_two(tmp_path: Path) -> None:
    """The index keeps no word positions, so a quoted phrase of two tokens is an error
    there; U+19B0 is a letter to Python but a separator to SQLite's tokenizer."""
    word = "ok\u19b0api"
    assert words(word) == [word]
    path = tmp_path / "split.db"
    store = SQLiteCheckpointStore(path)
    try:
        await store.save_session(_state("s", f"an {word} here", "noted"))
    finally:
        await store.close()
    with raw_sqlite(path) as db:
        assert _found(db, word) == [("s", 0)]


async def test_the_event_log_is_clustered_on_its_key_damaged_rows_kept(
        tmp_path: Path) -> None:
    """``m011_events_clustered``: the log rewritten as a ``WITHOUT ROWID`` table, every
    row kept in order, one whose JSON was damaged behind the check's back included (the
    readers report it; the upgrade must not refuse the file)."""
    from nonoka.store.sqlite.records import SQLiteRecordStore

    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    names = [m.__name__ for m in migrations.MIGRATIONS]
    with raw_sqlite(old) as db:
        ledger.apply_migrations(db, str(old), migrations.MIGRATIONS[
            :names.index("m011_events_clustered")])
        for seq, kind in enumerate(("request", "model_call", "finish"), 1):
            db.execute("INSERT INTO events VALUES ('s', ?, ?, ?, ?)",
                       (seq, float(seq), kind, json.dumps({"n": seq})))
        db.execute("PRAGMA ignore_check_constraints = ON")
        db.execute("INSERT INTO events VALUES ('s', 4, 4.0, 'warning', '{broken')")
    store = SQLiteCheckpointStore(old)
    try:
        log = SQLiteRecordStore.from_checkpoints(store)
        await log.append_event("s", "request", {"n": 5})
    finally:
        await store.close()
    with raw_sqlite(old) as db:
        rows = db.execute("SELECT seq, kind, data_json FROM events ORDER BY seq").fetchall()
        assert rows == [(1, "request", '{"n": 1}'), (2, "model_call", '{"n": 2}'),
                        (3, "finish", '{"n": 3}'), (4, "warning", "{broken"),
                        (5, "request", '{"n":5}')]
        # The damaged row, as before (in the table under ``events`` since m019).
        assert db.execute("PRAGMA integrity_check").fetchall() == [
            ("CHECK constraint failed in timeline",)]
    await SQLiteCheckpointStore(fresh).close()
    assert _schema(old) == _schema(fresh)
    table = next(r[3] for r in _schema(fresh) if r[:2] == ("table", "timeline"))
    assert table is not None and "WITHOUT ROWID" in table
