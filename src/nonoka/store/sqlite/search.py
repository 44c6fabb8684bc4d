"""Bringing a SQLite file's full-text index up to date (migrations ``m007_search_index``,
``m008_search_doc_in_entry_row``, ``m010_compact_tables``).

A save only gives each new entry its ``doc`` number (the row's rowid); their words are
indexed here, in batches of ``BATCH`` entries, one short write transaction each, so a
writer working meanwhile waits at most one batch. Every search calls ``catch_up`` first,
so it always sees every stored entry. Standard library only.
"""

from __future__ import annotations

import sqlite3

from nonoka.store.sqlite.migrations import INDEXED_UPTO, SEARCH_BODY

BATCH = 2000

_INDEX = f"""
INSERT INTO session_search (rowid, body)
SELECT doc, {SEARCH_BODY.format(e="entry_json")} FROM session_entries
WHERE doc > ?1 AND doc <= ?2 ORDER BY doc
"""


def pending(db: sqlite3.Connection) -> int:
    """How many entries wait to be indexed."""
    row = db.execute(f"SELECT count(*) FROM session_entries WHERE doc > {INDEXED_UPTO}"
                     ).fetchone()
    return int(row[0])


def catch_up(db: sqlite3.Connection, batch: int = BATCH) -> int:
    """Index every entry not indexed yet; the number indexed. ``db`` is in autocommit
    mode and not in a transaction."""
    done = 0
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            upto = int(db.execute(INDEXED_UPTO.strip("()")).fetchone()[0])
            row = db.execute("SELECT max(doc) FROM (SELECT doc FROM session_entries "
                             "WHERE doc > ? ORDER BY doc LIMIT ?)", (upto, batch)).fetchone()
            last = row[0]
            if last is None:
                db.execute("COMMIT")
                return done
            db.execute(_INDEX, (upto, last))
            done += db.execute("SELECT changes()").fetchone()[0]
            db.execute("UPDATE search_state SET indexed = ?", (last,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
