"""The timeline (each session's event log) of a SQLite file: its rows keyed by a small
number per session instead of the session's id.

A session's timeline rows are the ``timeline`` rows of its number, which
``session_numbers`` gives it the first time something is logged for it (the number
stays until the session is deleted; two sessions never share one), and a row's kind is
a code ``timeline_kinds`` gives each kind the first time it is logged. The key
``(number, seq)`` and the code take a few bytes where the id and the kind's name took
45 or so in every row, of which a ``nonoka serve`` turn logs five (bench/README.md).
``events`` is a view with the columns the log always had (``session_id, seq, at, kind,
data_json``): readers, and other programs' writes, go through it (its ``INSTEAD OF``
triggers number what is new and write the table); nonoka's own appends, copies and
deletes write the table (``APPEND``, ``INSERT``, ``delete``). The migration that made
it, ``m019_timeline_numbered`` (``nonoka.store.sqlite.migrations``), holds the schema's
text.

Standard library only.
"""

from __future__ import annotations

import sqlite3

APPEND = """
INSERT INTO timeline (number, seq, at, kind_code, data_json)
SELECT ?1, coalesce(max(seq), 0) + 1, ?2, ?3, ?4 FROM timeline WHERE number = ?1
"""
"""The next row of the session numbered ``?1`` (its ``seq`` computed inside the write,
so it is unique): ``at``, kind code, stored JSON."""

INSERT = ("INSERT INTO timeline (number, seq, at, kind_code, data_json) "
          "VALUES (?, ?, ?, ?, ?)")
"""A row as it was stored elsewhere (a copy), its ``seq`` kept."""

_NUMBER = "SELECT number FROM session_numbers WHERE session_id = ?"


def number(db: sqlite3.Connection, session_id: str) -> int:
    """The session's number, given now if it has none yet; inside the caller's write
    transaction."""
    row = db.execute(_NUMBER, (session_id,)).fetchone()
    if row is not None:
        return int(row[0])
    cursor = db.execute("INSERT INTO session_numbers (session_id) VALUES (?)", (session_id,))
    return int(cursor.lastrowid or 0)


def code(db: sqlite3.Connection, kind: str) -> int:
    """The kind's code, given now if it has none yet; inside the caller's write
    transaction."""
    row = db.execute("SELECT code FROM timeline_kinds WHERE kind = ?", (kind,)).fetchone()
    if row is not None:
        return int(row[0])
    return int(db.execute("INSERT INTO timeline_kinds (kind) VALUES (?)",
                          (kind,)).lastrowid or 0)


def delete(db: sqlite3.Connection, session_id: str) -> int:
    """Delete the session's timeline rows and its number; how many rows. Inside the
    caller's write transaction (a number is never given again while rows carry it)."""
    removed = db.execute(f"DELETE FROM timeline WHERE number = ({_NUMBER})",
                         (session_id,)).rowcount
    db.execute("DELETE FROM session_numbers WHERE session_id = ?", (session_id,))
    return removed
