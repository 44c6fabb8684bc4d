"""Bringing a SQLite file's full-text index up to date (migrations ``m007_search_index``,
``m010_compact_tables``, ``m014_entries_by_session``).

A save only writes its entry rows; their words are indexed here, in batches of
``BATCH`` entries, one short write transaction each, so a writer working meanwhile waits
at most one batch. ``search_pending`` names each block of rows (``entry_docs``) with rows
not indexed yet, and the first of them: rows below it are indexed, rows from it on are
not (the triggers of ``m014_entries_by_session`` keep that true whoever writes). Every
search calls ``catch_up`` first, so it always sees every stored entry. Standard library
only.
"""

from __future__ import annotations

import sqlite3

from nonoka.store.sqlite.migrations import SEARCH_BODY

BATCH = 2000

_INDEX = f"""
INSERT INTO session_search (rowid, body)
SELECT doc, {SEARCH_BODY.format(e="entry_json")} FROM session_entries
WHERE doc >= ?1 AND doc <= ?2 ORDER BY doc
"""

WAITING = ("search_pending p JOIN session_entries {e} ON {e}.doc >= p.from_doc "
           "AND {e}.doc < (p.block + 1) << 32")
"""The rows not indexed yet (``{e}``: the entry table's alias), with their block's
watermark row ``p``."""


def pending(db: sqlite3.Connection) -> int:
    """How many entries wait to be indexed."""
    return int(db.execute(f"SELECT count(*) FROM {WAITING.format(e='e')}").fetchone()[0])


def catch_up(db: sqlite3.Connection, batch: int = BATCH) -> int:
    """Index every entry not indexed yet; the number indexed. ``db`` is in autocommit
    mode and not in a transaction."""
    done = 0
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            indexed, finished = _some(db, batch)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        done += indexed
        if finished:
            return done


def _some(db: sqlite3.Connection, batch: int) -> tuple[int, bool]:
    """Index up to ``batch`` rows, block after block, moving each block's watermark;
    how many, and whether none is left."""
    done = 0
    while done < batch:
        row = db.execute("SELECT block, from_doc FROM search_pending ORDER BY block "
                         "LIMIT 1").fetchone()
        if row is None:
            return done, True
        block, first = int(row[0]), int(row[1])
        end = ((block + 1) << 32) - 1
        (last,) = db.execute("SELECT max(doc) FROM (SELECT doc FROM session_entries "
                             "WHERE doc >= ? AND doc <= ? ORDER BY doc LIMIT ?)",
                             (first, end, batch - done)).fetchone()
        if last is not None:
            db.execute(_INDEX, (first, last))
            done += db.execute("SELECT changes()").fetchone()[0]
        if last is None or db.execute("SELECT 1 FROM session_entries WHERE doc > ? AND "
                                      "doc <= ?", (last, end)).fetchone() is None:
            db.execute("DELETE FROM search_pending WHERE block = ?", (block,))
        else:
            db.execute("UPDATE search_pending SET from_doc = ? WHERE block = ?",
                       (last + 1, block))
    return done, False
