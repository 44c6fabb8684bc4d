"""Where a session's entry rows live in a SQLite file (migration ``m014_entries_by_session``).

Each checkpoint row has an ``entry_block`` number, given once when the row is first
written; entry ``seq`` of that session is the ``session_entries`` row whose rowid
(``doc``, also its full-text document id) is ``entry_block << 32 | seq``. A session's
entries are one run of rowids, so the table is its own key: an append writes the page
the session's last rows are on, with no index to update, and every read of a session's
entries is a range of rowids. Readers still check ``session_id``: a row another program
put at a wrong place is moved by a trigger, never read as another session's.

Standard library only (the bridge's early dispatch reads entries before pydantic loads).
"""

from __future__ import annotations

SEQ_BITS = 32
LAST_SEQ = (1 << SEQ_BITS) - 1
"""The largest ``seq`` a block holds (the table's ``CHECK`` refuses more)."""

NEW_BLOCK = ("(SELECT max(coalesce((SELECT max(entry_block) FROM checkpoints), 0), "
             "coalesce((SELECT max(doc) FROM session_entries), 0) >> 32) + 1)")
"""A block no row uses: after every block a checkpoint holds and every block a row is
stored in (rows whose checkpoint row another program deleted keep theirs). Two seeks.
The ``checkpoints_insert`` trigger gives each new checkpoint row this; code uses it only
for a row whose block another program cleared."""


def doc(block: int, seq: int) -> int:
    """The rowid of entry ``seq`` of the session in ``block``."""
    return (block << SEQ_BITS) | seq


def place(block: str, seq: str) -> str:
    """``doc`` in SQL: the rowid of entry ``seq`` in ``block`` (SQL expressions)."""
    return f"(({block}) << {SEQ_BITS}) + ({seq})"


def rows_of(session: str, alias: str = "", first: str = "0", last: str = str(LAST_SEQ)
            ) -> str:
    """A condition on ``session_entries`` rows (``alias``) that holds for the entries
    ``first`` to ``last`` (SQL expressions, inclusive) stored by the session that the SQL
    expression ``session`` names, read as a range of rowids. ``session`` may be a column
    of an outer query; a session without a checkpoint row has none."""
    p = f"{alias}." if alias else ""
    block = f"SELECT entry_block FROM checkpoints WHERE session_id = {session}"
    return (f"{p}doc BETWEEN {place(block, first)} AND {place(block, last)} "
            f"AND {p}session_id = {session}")
