"""Branches on SQLite: a session that shares its parent's first entries, standard library
only (the bridge's early dispatch resolves a branch's entries before pydantic loads).

A branch's ``checkpoints`` row names its ``base_session_id`` and ``base_count``: its
first ``base_count`` entries are the base session's, read through the base's own base if
it has one; its own ``session_entries`` rows start at ``seq = base_count``, in its own
block (``nonoka.store.sqlite.entries``). Shared rows
are never copied until the session they live in is about to rewrite or delete them; then
``detach_branches`` gives every branch built on them its own copy first.
"""

from __future__ import annotations

import sqlite3

from nonoka.store.sqlite.entries import LAST_SEQ, doc

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from typing import Any

_MAX_DEPTH = 10_000
"""More bases than this in one chain can only be a cycle (a corrupt file)."""


def resolved_entries(db: sqlite3.Connection, session_id: str, start: int = 0,
                     stop: int | None = None, columns: str = "entry_json") -> list[Any]:
    """The session's entry texts ``start`` to ``stop`` (default: all), bases included.

    Only the rows in that window are read, whatever the length of the chain's sessions.
    """
    chain: list[tuple[str, object, int, int | None]] = []  # (session, block, from, to)
    sid = session_id
    for _ in range(_MAX_DEPTH):
        row = db.execute("SELECT base_session_id, base_count, entry_block FROM checkpoints "
                         "WHERE session_id = ?", (sid,)).fetchone()
        base, count, block = (None, 0, None) if row is None else (row[0], int(row[1]), row[2])
        if base is None:
            chain.append((sid, block, start, stop))
            break
        if stop is None or stop > count:
            chain.append((sid, block, max(start, count), stop))
        if start >= count:
            break
        sid, stop = base, count if stop is None else min(stop, count)
    else:
        raise sqlite3.DatabaseError(f"session {session_id}: its chain of bases does not end")
    entries: list[Any] = []
    for sid, block, first, last in reversed(chain):
        if not isinstance(block, int) or first > LAST_SEQ:
            continue  # no checkpoint row, no block: no rows (the caller counts them)
        end = LAST_SEQ if last is None else min(last - 1, LAST_SEQ)
        rows = db.execute(f"SELECT {columns} FROM session_entries WHERE doc BETWEEN ? AND ? "
                          "AND session_id = ? ORDER BY doc",
                          (doc(block, first), doc(block, end), sid))
        if "," in columns:
            entries.extend(rows)
        else:
            entries.extend(r[0] for r in rows)
    return entries


def is_branch(db: sqlite3.Connection, session_id: str) -> bool:
    """Whether the session shares entries with a base session."""
    row = db.execute("SELECT base_session_id FROM checkpoints WHERE session_id = ?",
                     (session_id,)).fetchone()
    return row is not None and row[0] is not None


def entry_row(db: sqlite3.Connection, session_id: str, seq: int,
              columns: str) -> tuple[object, ...] | None:
    """``columns`` of the session's entry ``seq``, from whichever session in its chain of
    bases holds the row (a branch's first entries are its base's rows)."""
    sid = session_id
    for _ in range(_MAX_DEPTH):
        base = db.execute("SELECT base_session_id, base_count, entry_block FROM checkpoints "
                          "WHERE session_id = ?", (sid,)).fetchone()
        if base is None or not isinstance(base[2], int) or not 0 <= seq <= LAST_SEQ:
            return None
        if base[0] is None or seq >= int(base[1]):
            row: tuple[object, ...] | None = db.execute(
                f"SELECT {columns} FROM session_entries WHERE doc = ? AND session_id = ?",
                (doc(base[2], seq), sid)).fetchone()
            return row
        sid = base[0]
    raise sqlite3.DatabaseError(f"session {session_id}: its chain of bases does not end")


def detach_branches(db: sqlite3.Connection, session_id: str) -> int:
    """Give every branch based on ``session_id`` its own copy of the shared entries, so the
    session may rewrite or delete its rows; returns how many branches were detached.
    The copies refer to the same stored files (``media``): the files are not copied."""
    children = db.execute("SELECT session_id, base_count, entry_block FROM checkpoints "
                          "WHERE base_session_id = ?", (session_id,)).fetchall()
    for child, count, block in children:
        shared = resolved_entries(db, session_id, 0, int(count),
                                  "entry_json, key_chain, media")
        db.executemany(
            "INSERT INTO session_entries (doc, session_id, seq, entry_json, key_chain, media) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(doc(block, seq) if isinstance(block, int) else None, child, seq, *row)
             for seq, row in enumerate(shared)])
        db.execute("UPDATE checkpoints SET base_session_id = NULL, base_count = 0 "
                   "WHERE session_id = ?", (child,))
    return len(children)
