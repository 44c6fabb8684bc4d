"""SQL text for the ``cli_sessions`` table that every SQL engine shares.

Only the parameter placeholder differs between SQLite (``?``) and psycopg (``%s``).
"""

from __future__ import annotations

COLUMNS = (
    "session_id", "title", "model", "created_at", "last_active", "status", "turn_count",
    "message_count", "input_tokens", "output_tokens", "cost_usd", "metadata",
)
SELECT = f"SELECT {', '.join(COLUMNS)} FROM cli_sessions"
ORDER = "ORDER BY last_active DESC, session_id"


def upsert(placeholder: str) -> str:
    """Insert a row, or replace every column but the id and ``created_at``."""
    return (
        f"INSERT INTO cli_sessions ({', '.join(COLUMNS)}) "
        f"VALUES ({', '.join(placeholder for _ in COLUMNS)}) ON CONFLICT (session_id) "
        "DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in ("session_id", "created_at"))
    )
