"""The full-text index's watermark per block of entry rows (``nonoka.store.sqlite.entries``).

Whoever writes the rows (nonoka's store, another program inserting without a doc or at
a wrong one, deleting or changing rows in the middle), after a catch-up the index holds
exactly the stored rows' words: FTS5's own integrity check against the content, and a
search for every word against the rows that hold it. Rows another program put at a
wrong place stay there until ``db check --repair`` moves them, and are indexed wherever
they are.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from nonoka.store.sqlite import ledger, migrations
from nonoka.store.sqlite.database import open_database
from nonoka.store.sqlite.entries import (
    catch_up,
    doc,
    misplaced,
    new_block,
    pending,
    put_in_place,
)
from nonoka.store.sqlite.packing import pack, unpack


def _entry(text: str) -> str:
    return json.dumps({"role": "user", "content": text, "metadata": {}, "tokens": 3})


def _found(db: sqlite3.Connection, word: str) -> list[tuple[str, int]]:
    catch_up(db)
    return db.execute(
        "SELECT d.session_id, d.seq FROM session_search f JOIN session_entries d ON "
        "d.doc = f.rowid WHERE session_search MATCH ? ORDER BY f.rowid DESC",
        (f'"{word}"',)).fetchall()


def _insert(db: sqlite3.Connection, sid: str, seq: int, text: str) -> None:
    db.execute("INSERT INTO session_entries (session_id, seq, entry_json) VALUES (?, ?, ?)",
               (sid, seq, _entry(text)))


def test_an_older_database_keeps_its_doc_ids_and_index(tmp_path: Path) -> None:
    """Upgraded from ``m007`` to today's schema: every entry is found again, one that
    had lost its doc included, and the old table, counter and marker row are gone."""
    path = tmp_path / "m007.db"
    names = [m.__name__ for m in migrations.MIGRATIONS]
    older = migrations.MIGRATIONS[:names.index("m008_search_doc_in_entry_row")]
    with sqlite3.connect(path, isolation_level=None) as db:
        ledger.apply_migrations(db, "test", older)
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
    db = open_database(path)
    try:
        assert pending(db) == 4  # the index is rebuilt (m010, then m014)
        # no checkpoint owns these rows (written by hand): kept, below zero; "c" had lost
        # its doc row, not its entry
        assert sorted(_found(db, "okapi")) == [("a", 0), ("a", 2), ("b", 0), ("c", 0)]
        assert db.execute("SELECT max(doc) FROM session_entries").fetchone()[0] < 0
        kinds = dict(db.execute("SELECT name, type FROM sqlite_master WHERE name IN "
                                "('search_docs', 'search_state', 'search_pending')"))
        assert kinds == {"search_pending": "table"}
        assert db.execute("SELECT count(*) FROM sqlite_sequence "
                          "WHERE name = 'search_docs'").fetchone() == (0,)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        _index_matches_content(db)
    finally:
        db.close()


def _index_matches_content(db: sqlite3.Connection) -> None:
    """After a catch-up: FTS5's check of the index against its content passes, and each
    word finds exactly the rows whose text holds it."""
    catch_up(db)
    assert pending(db) == 0
    db.execute("INSERT INTO session_search (session_search, rank) VALUES "
               "('integrity-check', 1)")
    holders: dict[str, set[tuple[str, int]]] = {}
    for sid, seq, text in db.execute("SELECT session_id, seq, entry_json FROM "
                                     "session_entries"):
        for word in json.loads(unpack(text))["content"].split():
            holders.setdefault(word, set()).add((sid, seq))
    for word, rows in holders.items():
        found = _found(db, word)
        assert len(found) == len(set(found)), word  # one hit a row
        assert set(found) == rows, word


def _checkpoint(db: sqlite3.Connection, sid: str) -> int:
    """A checkpoint row as nonoka's store writes one (its block chosen); its block."""
    block = new_block(db)
    db.execute("INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
               "memory_generation, created_at, updated_at, entry_block) "
               "VALUES (?, '{}', 1, 0, 0, 1, 1, ?)", (sid, block))
    return block


def _write_something(db: sqlite3.Connection, rng: random.Random, step: int,
                     blocks: dict[str, int], counts: dict[str, int],
                     text: Callable[[], str | bytes]) -> None:
    """One write of a random kind, by nonoka's store or by another program."""
    far = 1 << 20  # a block no checkpoint holds: other programs' rows there collide with none
    sid = rng.choice(list(blocks))
    block, count = blocks[sid], counts[sid]
    kind = rng.randrange(9)
    if kind <= 2:  # an append, as nonoka writes it (its doc given)
        db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                   "VALUES (?, ?, ?, ?)", (doc(block, count), sid, count, text()))
        counts[sid] += 1
    elif kind == 3:  # an append by another program, at a wrong place
        wrong = rng.choice([7 + step * 10, -10**12 - step, doc(far, step)])
        db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                   "VALUES (?, ?, ?, ?)", (wrong, sid, count, text()))
        counts[sid] += 1
    elif kind == 4 and count:  # a changed row
        db.execute("UPDATE session_entries SET entry_json = ? WHERE doc = ?",
                   (text(), doc(block, rng.randrange(count))))
    elif kind == 5 and count:  # the last row deleted (if it is in its place)
        if db.execute("DELETE FROM session_entries WHERE doc = ?",
                      (doc(block, count - 1),)).rowcount:
            counts[sid] -= 1
    elif kind == 6 and count > 2:  # a row deleted in the middle, then put back
        seq = rng.randrange(count - 1)
        if db.execute("DELETE FROM session_entries WHERE doc = ?",
                      (doc(block, seq),)).rowcount:
            if rng.random() < 0.5:
                _index_matches_content(db)
            db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json)"
                       " VALUES (?, ?, ?, ?)", (doc(block, seq), sid, seq, text()))
    elif kind == 7:  # a rewrite: every row deleted, the first ones written again
        db.execute("DELETE FROM session_entries WHERE session_id = ?", (sid,))
        counts[sid] = rng.randrange(3)
        db.executemany("INSERT INTO session_entries (doc, session_id, seq, "
                       "entry_json) VALUES (?, ?, ?, ?)",
                       [(doc(block, n), sid, n, text()) for n in range(counts[sid])])
    elif kind == 8:
        catch_up(db, batch=3) if rng.random() < 0.3 else _index_matches_content(db)


@pytest.mark.parametrize("seed", [20261204, 7, 99])
def test_rows_written_anywhere_by_anyone_are_indexed_exactly_once(tmp_path: Path,
                                                                  seed: int) -> None:
    """Seeded runs of 600 writes of every kind, of rows kept as text or deflated, with
    catch-ups between them (and partial ones: batches of 3), checked after each full
    catch-up; then the repair moves the
    rows another program misplaced into their blocks, and the index still holds each
    row once."""
    rng = random.Random(seed)
    db = open_database(tmp_path / "any.db")
    vocabulary = [f"w{n}" for n in range(40)]
    blocks = {sid: _checkpoint(db, sid) for sid in ("s1", "s2", "s3")}
    counts = dict.fromkeys(blocks, 0)

    def text() -> str | bytes:
        """An entry's JSON; every other one long enough to be stored deflated."""
        words = rng.sample(vocabulary, 3)
        if rng.random() < 0.5:
            return _entry(" ".join(words))
        packed = pack(_entry(" ".join(words * 20)))
        assert isinstance(packed, bytes)
        return packed

    try:
        for step in range(600):
            _write_something(db, rng, step, blocks, counts, text)
        _index_matches_content(db)
        assert misplaced(db)  # another program's rows stayed where it put them
        db.execute("BEGIN IMMEDIATE")
        put_in_place(db)
        db.execute("COMMIT")
        assert misplaced(db) == []
        _index_matches_content(db)
        assert {sid: n for sid, n in db.execute(
            "SELECT e.session_id, count(*) FROM session_entries e JOIN checkpoints c USING "
            "(session_id) WHERE e.doc BETWEEN c.entry_block << 32 AND "
            "(c.entry_block << 32) + 4294967295 GROUP BY e.session_id")} == {
            sid: n for sid, n in counts.items() if n}
    finally:
        db.close()


def test_a_checkpoint_row_gets_a_block_after_every_row_stored(tmp_path: Path) -> None:
    """The store chooses a new session's block: after every block a checkpoint holds and
    every block a row lies in (a row another program stored far away included), so a
    new session's rows never meet an older row."""
    db = open_database(tmp_path / "blocks.db")
    try:
        first = _checkpoint(db, "a")
        assert _checkpoint(db, "b") == first + 1
        db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                   "VALUES (?, 'gone', 0, ?)", (doc(first + 50, 3), _entry("left")))
        assert _checkpoint(db, "c") == first + 51
    finally:
        db.close()


def test_an_append_at_the_end_waits_for_the_catch_up(tmp_path: Path) -> None:
    """Appends are not indexed as they are saved (the catch-up does it in batches): the
    first one after a catch-up marks its block as waiting, the next ones change nothing
    there."""
    db = open_database(tmp_path / "wait.db")
    try:
        block = _checkpoint(db, "s")
        for seq in range(3):
            db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                       "VALUES (?, 's', ?, ?)", (doc(block, seq), seq, _entry(f"okapi {seq}")))
            assert db.execute("SELECT block, from_doc FROM search_pending").fetchall() == [
                (block, doc(block, 0))]
        assert db.execute("SELECT count(*) FROM session_search WHERE session_search MATCH "
                          "'okapi'").fetchone() == (0,)  # nothing indexed yet
        assert pending(db) == 3
        assert _found(db, "okapi") == [("s", 2), ("s", 1), ("s", 0)]
        assert db.execute("SELECT count(*) FROM search_pending").fetchone() == (0,)
    finally:
        db.close()


def test_entries_have_no_index_of_their_own(tmp_path: Path) -> None:
    """The table is its own key: only partial indexes that an append does not write."""
    db = open_database(tmp_path / "schema.db")
    try:
        indexes = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                                  "AND tbl_name = 'session_entries'"))
        assert set(indexes) == {"session_entries_media"}
        assert all("WHERE" in sql for sql in indexes.values())
    finally:
        db.close()
