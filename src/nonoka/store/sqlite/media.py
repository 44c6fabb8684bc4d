"""The SQLite engine's ``media`` table (migration ``m009_media``; ``nonoka.store.media``).

Every function runs inside a transaction its caller opened. SQLite runs one writer at a
time, so a delete's garbage collection and a save that refers to the same file again
cannot interleave: the save checks, inside its own write transaction, that the file is
stored, and stores it again if a delete took it. Standard library only (the early
dispatch reads files before pydantic loads).
"""

from __future__ import annotations

import sqlite3
import time

from nonoka.store.media import Media, base64_text, column, digests
from nonoka.store.sqlite.entries import rows_of

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from collections.abc import Iterable

REFS = "json_each(CASE WHEN json_valid({m}) THEN {m} ELSE '[]' END)"
"""The digests a ``media`` column names, as a table (a damaged value names none)."""

REFERENCED = ("(EXISTS (SELECT 1 FROM session_entries e, " + REFS.format(m="e.media")
               + " j WHERE e.media IS NOT NULL AND j.value = {d}) OR EXISTS (SELECT 1 "
               "FROM serve_files f WHERE f.deleted_at IS NULL AND f.digest = {d}))")
"""Whether any entry row (read through the partial index of the rows that refer to
files) or any file of ``nonoka serve``'s Files API not deleted refers to the digest
``{d}``."""


def keep(db: sqlite3.Connection, files: Iterable[Media]) -> None:
    """Store each file that is not stored yet; one that is is not written again."""
    now = time.time()
    for file in {f.digest: f for f in files}.values():
        if db.execute("SELECT 1 FROM media WHERE digest = ?", (file.digest,)).fetchone():
            continue
        db.execute("INSERT INTO media (digest, media_type, size, created_at, data) "
                   "VALUES (?, ?, ?, ?, ?)",
                   (file.digest, file.media_type, file.size, now, file.data))


def fetch(db: sqlite3.Connection, wanted: list[str]) -> dict[str, str]:
    """The files ``wanted`` names that are stored, as base64 text, in one query."""
    rows = db.execute("SELECT digest, data FROM media WHERE digest IN "
                      "(SELECT value FROM json_each(?))", (column(wanted),))
    return {digest: base64_text(bytes(data)) for digest, data in rows}


def load(db: sqlite3.Connection, digest: str) -> Media | None:
    row = db.execute("SELECT media_type, data FROM media WHERE digest = ?",
                     (digest,)).fetchone()
    return None if row is None else Media(digest, row[0], bytes(row[1]))


def referenced_by(db: sqlite3.Connection, session_id: str) -> list[str]:
    """The digests the session's own entry rows refer to (the candidates its delete or
    rewrite may leave without a reference), rows stored without a checkpoint included."""
    rows = db.execute("SELECT media FROM session_entries WHERE (doc < 0 AND session_id = ?1 "
                      f"OR {rows_of('?1')}) AND media IS NOT NULL", (session_id,))
    return list(dict.fromkeys(d for (value,) in rows for d in digests(value)))


def collect(db: sqlite3.Connection, candidates: list[str]) -> int:
    """Delete the files among ``candidates`` that no entry row and no live uploaded file
    refers to any more; how many. Runs in the transaction that removed the references."""
    if not candidates:
        return 0
    return db.execute("DELETE FROM media WHERE digest IN (SELECT value FROM json_each(?)) "
                      "AND NOT " + REFERENCED.format(d="media.digest"),
                      (column(candidates),)).rowcount
