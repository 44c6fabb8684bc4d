"""Search doc numbers kept in the entry rows (migration ``m008_search_doc_in_entry_row``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nonoka.store.sqlite import migrations
from nonoka.store.sqlite.database import open_database
from nonoka.store.sqlite.search import catch_up, pending


def _entry(text: str) -> str:
    return json.dumps({"role": "user", "content": text, "metadata": {}, "tokens": 3})


def _found(db: sqlite3.Connection, word: str) -> list[tuple[str, int]]:
    catch_up(db)
    return db.execute(
        "SELECT d.session_id, d.seq FROM session_search f JOIN search_docs d ON "
        "d.doc = f.rowid WHERE session_search MATCH ? ORDER BY f.rowid DESC",
        (f'"{word}"',)).fetchall()


def _insert(db: sqlite3.Connection, sid: str, seq: int, text: str) -> None:
    db.execute("INSERT INTO session_entries (session_id, seq, entry_json) VALUES (?, ?, ?)",
               (sid, seq, _entry(text)))


def test_an_older_database_keeps_its_doc_ids_and_index(tmp_path: Path) -> None:
    """Upgraded from ``m007``: entries keep their doc numbers (so what was indexed stays
    found, newest first), an entry that had lost its doc gets a new one, what was not
    indexed yet is indexed by the next catch-up, and the old table, counter and marker
    row are gone."""
    path = tmp_path / "m007.db"
    names = [m.__name__ for m in migrations.MIGRATIONS]
    older = migrations.MIGRATIONS[:names.index("m008_search_doc_in_entry_row")]
    with sqlite3.connect(path, isolation_level=None) as db:
        migrations.apply_migrations(db, "test", older)
        for seq in range(3):
            _insert(db, "a", seq, f"okapi indexed {seq}")
        # what m007's catch-up did: index the docs, then move the marker row
        db.execute(f"INSERT INTO session_search (rowid, body) SELECT d.doc, "
                   f"{migrations.SEARCH_BODY.format(e='e.entry_json')} FROM search_docs d "
                   "JOIN session_entries e USING (session_id, seq) WHERE d.doc > 0")
        db.execute("UPDATE search_docs SET seq = (SELECT max(doc) FROM search_docs) "
                   "WHERE doc = 0")
        _insert(db, "b", 0, "okapi waiting")
        db.execute("DELETE FROM session_entries WHERE session_id = 'a' AND seq = 1")
        _insert(db, "c", 0, "okapi without a doc")  # its doc row lost (edited by hand)
        db.execute("DELETE FROM search_docs WHERE session_id = 'c'")
        docs = dict(db.execute("SELECT seq, doc FROM search_docs WHERE session_id = 'a'"))
    db = open_database(path)
    try:
        assert dict(db.execute("SELECT seq, doc FROM session_entries "
                               "WHERE session_id = 'a'")) == docs
        (lost,) = db.execute("SELECT doc FROM session_entries WHERE session_id = 'c'"
                             ).fetchone()
        assert lost > max(docs.values())  # numbered by the migration, after the others
        assert pending(db) == 4  # m010_compact_tables has the index rebuilt
        assert _found(db, "okapi") == [("c", 0), ("b", 0), ("a", 2), ("a", 0)]
        kinds = dict(db.execute("SELECT name, type FROM sqlite_master "
                                "WHERE name IN ('search_docs', 'search_state')"))
        assert kinds == {"search_docs": "view", "search_state": "table"}
        assert db.execute("SELECT count(*) FROM sqlite_sequence "
                          "WHERE name = 'search_docs'").fetchone() == (0,)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()


def _insert_numbered(db: sqlite3.Connection, sid: str, seq: int, text: str) -> int:
    """An entry as nonoka's writers insert it, with its doc; the doc."""
    db.execute("INSERT INTO session_entries (session_id, seq, entry_json, doc) "
               f"VALUES (?, ?, ?, {migrations.NEXT_DOC})", (sid, seq, _entry(text)))
    return int(db.execute("SELECT doc FROM session_entries WHERE session_id = ? AND "
                          "seq = ?", (sid, seq)).fetchone()[0])


@pytest.mark.parametrize("numbered", [True, False], ids=["nonoka", "another-writer"])
def test_the_newest_docs_number_of_an_indexed_entry_is_never_given_again(
        tmp_path: Path, numbered: bool) -> None:
    """Without a counter, deleting the newest entry frees the largest doc number; once
    indexed it must not come back, or the catch-up would take the new entry for indexed
    and search would never find it. Rows inserted without a doc (not by nonoka) are
    numbered by the catch-up, after every doc there is."""
    db = open_database(tmp_path / "docs.db")
    try:
        _insert_numbered(db, "s", 0, "first words")
        gone = _insert_numbered(db, "s", 1, "newest okapi")
        assert _found(db, "okapi") == [("s", 1)]
        db.execute("DELETE FROM session_entries WHERE session_id = 's' AND seq = 1")
        assert _found(db, "okapi") == []
        if numbered:
            assert _insert_numbered(db, "s", 1, "replacement zebra") > gone
        else:
            _insert(db, "s", 1, "replacement zebra")
            assert pending(db) == 1
        assert _found(db, "zebra") == [("s", 1)]
        (doc,) = db.execute("SELECT doc FROM session_entries WHERE seq = 1").fetchone()
        assert doc > gone
        assert pending(db) == 0
    finally:
        db.close()


def test_a_changed_entry_is_indexed_again_under_a_new_doc(tmp_path: Path) -> None:
    db = open_database(tmp_path / "update.db")
    try:
        _insert(db, "s", 0, "old okapi")
        _insert(db, "s", 1, "other words")
        assert _found(db, "okapi") == [("s", 0)]
        db.execute("UPDATE session_entries SET entry_json = ? WHERE seq = 0",
                   (_entry("new zebra"),))
        assert _found(db, "okapi") == []
        assert _found(db, "zebra") == [("s", 0)]  # newest first: it was written last
        (doc,) = db.execute("SELECT doc FROM session_entries WHERE seq = 0").fetchone()
        assert doc == db.execute("SELECT max(doc) FROM session_entries").fetchone()[0]
        db.execute("UPDATE session_entries SET key_chain = 'x' WHERE seq = 1")
        assert pending(db) == 0  # only a change of the text is indexed again
    finally:
        db.close()
