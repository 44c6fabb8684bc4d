"""SQL text for the ``cli_sessions`` table that every SQL engine shares.

Only the parameter placeholder differs between SQLite (``?``) and psycopg (``%s``).

The list is ordered by ``list_order``, not by ``last_active`` itself, so the row a turn
rewrites moves no index entry while its session stays the most recent one, which is
how a person works: one session at a time. Every row but the list's top has
``list_order = last_active``; the top may keep an older ``list_order`` (at most its
``last_active``, and above every other row's), so both orders are the same. A write
runs ``settle_top`` first, then keeps the row's ``list_order`` when ``keep_order`` holds
and gives it ``last_active`` otherwise (``upsert`` does the second part for its row).
Every writer of the list goes through its engine's ``write_index_row``
(``nonoka.store.sqlite.records``, ``nonoka.store.postgres.records``), which does both.
"""

from __future__ import annotations

COLUMNS = (
    "session_id", "title", "model", "created_at", "last_active", "status", "turn_count",
    "message_count", "input_tokens", "output_tokens", "cost_usd", "metadata",
)
SELECT = f"SELECT {', '.join(COLUMNS)} FROM cli_sessions"
ORDER = "ORDER BY list_order DESC, session_id"
"""Newest first (the same order as ``last_active DESC, session_id``), from the index."""

_OTHERS_TOP = ("(SELECT o.list_order FROM cli_sessions o WHERE o.session_id <> {id} AND "
               "o.list_order IS NOT NULL ORDER BY o.list_order DESC LIMIT 1)")


def settle_top(placeholder: str) -> str:
    """Give the list's top row its own ``last_active`` as ``list_order`` when it is not
    the row about to be written (one parameter: that row's id). Touches a row only when
    the most recent session changes."""
    return ("UPDATE cli_sessions SET list_order = last_active WHERE session_id = "
            "(SELECT t.session_id FROM cli_sessions t WHERE t.list_order IS NOT NULL "
            "ORDER BY t.list_order DESC, t.session_id LIMIT 1) "
            f"AND list_order <> last_active AND session_id <> {placeholder}")


def _above_others(row: str, session_id: str) -> str:
    """True when ``row``'s ``list_order`` is above every other row's."""
    return f"{row}.list_order > coalesce({_OTHERS_TOP.format(id=session_id)}, -1e308)"


def keep_order(row: str, last_active: str, session_id: str) -> str:
    """True when ``row`` (the stored row) may keep its ``list_order``: it is above every
    other row and the new ``last_active`` is not below it."""
    return f"({last_active} >= {row}.list_order AND {_above_others(row, session_id)})"


def upsert(placeholder: str) -> str:
    """Insert a row, or replace every column but the id and ``created_at``; ``list_order``
    is the row's ``last_active`` unless ``keep_order`` holds. Run ``settle_top`` first."""
    keep = keep_order("cli_sessions", "excluded.last_active", "excluded.session_id")
    return (
        f"INSERT INTO cli_sessions ({', '.join(COLUMNS)}, list_order) "
        f"VALUES ({', '.join(placeholder for _ in COLUMNS)}, {placeholder}) "
        "ON CONFLICT (session_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in ("session_id", "created_at"))
        + f", list_order = CASE WHEN {keep} THEN cli_sessions.list_order "
        "ELSE excluded.list_order END"
    )


OUT_OF_PLACE = (
    "SELECT session_id FROM cli_sessions s WHERE s.list_order IS NULL OR "
    "(s.list_order <> s.last_active AND NOT (s.list_order < s.last_active AND "
    f"{_above_others('s', 's.session_id')}))")
"""Rows whose ``list_order`` breaks the rule above (written by something other than
nonoka): the list would show them out of their ``last_active`` place."""

REORDER = ("UPDATE cli_sessions SET list_order = last_active "
           "WHERE list_order IS NULL OR list_order <> last_active")
"""Every row's ``list_order`` from its ``last_active``: always a valid order."""


def upsert_values(row: list[object]) -> list[object]:
    """``upsert``'s parameters: the ``COLUMNS`` values, then ``last_active`` again."""
    return [*row, row[COLUMNS.index("last_active")]]
