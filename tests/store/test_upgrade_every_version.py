"""A file of every earlier schema version, upgraded: every session loads, is found by
search and takes its next turn.

The sessions are written with each version's own tables as a program of that time
wrote them (the columns that version has; no search document, block or digest chain
given where that version's migrations or triggers made them), then the file is opened
by today's store, which applies the rest.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import encode_entry, snapshot_json
from nonoka.store.sqlite import SQLiteCheckpointStore, ledger, migrations
from nonoka.store.sqlite.digests import Chain
from nonoka.store.sqlite.entries import catch_up, doc

VERSIONS = [m.__name__ for m in migrations.MIGRATIONS[:-1]]

_SESSIONS = {
    "alpha": ["the okapi grazes", "an answer about okapis", "alpha third"],
    "beta": ["a question on quokkas", "beta reply"],
}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _write_old(db: sqlite3.Connection) -> None:
    entry_columns = _columns(db, "session_entries")
    # From m015 on, the store chooses a checkpoint row's block and each row's place
    # itself (no trigger does it for a writer that leaves them out).
    places = "entry_block" in _columns(db, "checkpoints") and db.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'checkpoints_insert'").fetchone() is None
    for created, (sid, texts) in enumerate(_SESSIONS.items()):
        entries = [MemoryEntry.make("user" if n % 2 == 0 else "assistant", text)
                   for n, text in enumerate(texts)]
        state = SessionState(session_id=sid, memory_entries=entries)
        db.execute("INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
                   "memory_generation, created_at, updated_at) VALUES (?, ?, 1, ?, 0, ?, ?)",
                   (sid, snapshot_json(state), len(entries), 1.0 + created, 2.0 + created))
        block = created + 1
        if places:
            db.execute("UPDATE checkpoints SET entry_block = ? WHERE session_id = ?",
                       (block, sid))
        chain = Chain()
        for seq, entry in enumerate(entries):
            text = encode_entry(entry)[0]
            chain = chain.add(text)
            if places:
                db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json, "
                           "key_chain) VALUES (?, ?, ?, ?, ?)",
                           (doc(block, seq), sid, seq, text, chain.encode()))
            elif "key_chain" in entry_columns:
                db.execute("INSERT INTO session_entries (session_id, seq, entry_json, "
                           "key_chain) VALUES (?, ?, ?, ?)", (sid, seq, text, chain.encode()))
            else:
                db.execute("INSERT INTO session_entries (session_id, seq, entry_json) "
                           "VALUES (?, ?, ?)", (sid, seq, text))


def _found(path: Path, word: str) -> set[tuple[str, int]]:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        catch_up(db)
        return set(db.execute(
            "SELECT d.session_id, d.seq FROM session_search f JOIN session_entries d ON "
            "d.doc = f.rowid WHERE session_search MATCH ?", (f'"{word}"',)))
    finally:
        db.close()


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_file_of_this_version_upgrades_whole(tmp_path: Path, version: str) -> None:
    path = tmp_path / "old.db"
    older = migrations.MIGRATIONS[:VERSIONS.index(version) + 1]
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        ledger.apply_migrations(db, "test", older)
        _write_old(db)
    finally:
        db.close()
    store = SQLiteCheckpointStore(path)
    try:
        for sid, texts in _SESSIONS.items():
            state = await store.load_session(sid)
            assert state is not None
            assert [e.content for e in state.memory_entries] == texts
        assert _found(path, "okapi") == {("alpha", 0)}
        assert _found(path, "quokkas") == {("beta", 0)}
        alpha = await store.load_session("alpha")
        assert alpha is not None
        more = [*alpha.memory_entries, MemoryEntry.make("user", "a fourth about tapirs")]
        await store.save_session(alpha.model_copy(update={"memory_entries": more}))
        again = await store.load_session("alpha")
        assert again is not None and again.memory_entries[-1].content == "a fourth about tapirs"
        assert _found(path, "tapirs") == {("alpha", 3)}
        await store.save_session(SessionState(session_id="gamma", memory_entries=[
            MemoryEntry.make("user", "a new session after the upgrade")]))
        assert _found(path, "upgrade") == {("gamma", 0)}
    finally:
        await store.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert [r[0] for r in db.execute("SELECT name FROM nonoka_migrations ORDER BY rowid")
                ] == [m.__name__ for m in migrations.MIGRATIONS]
    finally:
        db.close()
