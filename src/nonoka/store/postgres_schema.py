"""The PostgreSQL schema, as an ordered list of named migrations.

Same rules as ``nonoka.store.sqlite_schema``: applied names are recorded in
``nonoka_migrations``; missing ones are applied in order in one transaction; a database
that lists a name this code does not know was written by a newer nonoka and is refused
before anything is changed. Several processes may open a fresh database at once: the
migrating transaction holds a transaction-level advisory lock keyed on the schema, so
each migration runs exactly once and the others wait, then find nothing to do.

Everything lives in one schema: the one named by the store's ``schema`` argument or
else the first one of the connection's ``search_path``; it is created if missing.

Column types: the stored JSON is ``text`` (it goes back out byte for byte and a corrupt
row stays readable for the error message); session ids sort with ``COLLATE "C"``, i.e.
by code point as the SQLite and memory engines do, which also lets a prefix ``LIKE`` use
the primary key; event data is ``json`` (kept as written, ``\\u0000`` included, yet
queryable for the usage summary); index metadata is ``jsonb`` for the key lookup.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from nonoka.errors import StoreError, UnsupportedVersionError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""Schema names nonoka creates: plain identifiers, safe to quote and put in options."""

MIGRATION_LOCK = 0x6E6F6E6F
"""First key of the advisory locks nonoka takes ("nono"); the second is per object."""
STEP_LOCK = MIGRATION_LOCK + 1
EVENT_LOCK = MIGRATION_LOCK + 2

MIGRATIONS: list[tuple[str, tuple[str, ...]]] = [
    ("m001_checkpoint_tables", (
        """CREATE TABLE checkpoints (
            session_id text COLLATE "C" PRIMARY KEY,
            state_json text NOT NULL,
            revision bigint NOT NULL,
            entry_count integer NOT NULL,
            memory_generation integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        )""",
        """CREATE TABLE session_entries (
            session_id text COLLATE "C" NOT NULL,
            seq integer NOT NULL,
            entry_json text NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE TABLE step_updates (
            session_id text COLLATE "C" NOT NULL,
            step_id text NOT NULL,
            update_type text NOT NULL,
            payload_json text NOT NULL,
            updated_at double precision NOT NULL,
            id bigint GENERATED ALWAYS AS IDENTITY,
            PRIMARY KEY (session_id, step_id, update_type)
        )""",
    )),
    ("m002_session_index_and_events", (
        """CREATE TABLE cli_sessions (
            session_id text COLLATE "C" PRIMARY KEY,
            title text NOT NULL DEFAULT '',
            model text NOT NULL DEFAULT '',
            created_at double precision NOT NULL,
            last_active double precision NOT NULL,
            status text NOT NULL DEFAULT 'created',
            turn_count bigint NOT NULL DEFAULT 0,
            message_count bigint NOT NULL DEFAULT 0,
            input_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            cost_usd double precision NOT NULL DEFAULT 0,
            metadata jsonb NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX cli_sessions_last_active ON cli_sessions (last_active)",
        # The lookup's expression, exactly, so the planner uses the index.
        """CREATE INDEX cli_sessions_conversation_key
            ON cli_sessions ((metadata ->> 'conversation_key'), last_active)""",
        """CREATE TABLE events (
            session_id text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            at double precision NOT NULL,
            kind text NOT NULL,
            data_json json NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
    )),
    ("m003_session_leases", (
        # The database's clock decides expiry: workers on many machines share it.
        """CREATE TABLE session_leases (
            session_id text COLLATE "C" PRIMARY KEY,
            owner text NOT NULL,
            expires_at timestamptz NOT NULL,
            acquired_at timestamptz NOT NULL
        )""",
    )),
]
"""Every migration, oldest first: ``(name, statements)``. Never edit a shipped one."""

_LEDGER = """CREATE TABLE IF NOT EXISTS nonoka_migrations (
    name text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""


async def applied_migrations(conn: AsyncConnection) -> list[str] | None:
    """Names recorded in the current schema, oldest first; ``None`` without a ledger."""
    cur = await conn.execute("SELECT to_regclass('nonoka_migrations') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return None
    cur = await conn.execute("SELECT name FROM nonoka_migrations ORDER BY applied_at, name")
    return [name for (name,) in await cur.fetchall()]


def check_known(applied: list[str], where: str,
                migrations: list[tuple[str, tuple[str, ...]]] = MIGRATIONS) -> None:
    """``UnsupportedVersionError`` if ``applied`` names a migration this code lacks."""
    known = {name for name, _ in migrations}
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise UnsupportedVersionError(
            f"{where} was written by a newer nonoka (unknown schema migrations: "
            f"{', '.join(unknown)}). Upgrade nonoka to use it; nothing was changed."
        )


async def _target_schema(conn: AsyncConnection, where: str) -> str:
    """The schema tables go to: the current one, else the first named in search_path."""
    cur = await conn.execute("SELECT current_schema(), current_setting('search_path')")
    row = await cur.fetchone()
    assert row is not None
    current, search_path = row
    if current is not None:
        return str(current)
    names = [n.strip().strip('"') for n in str(search_path).split(",")]
    first = next((n for n in names if n and n != "$user"), "")
    if not SCHEMA_NAME.fullmatch(first):
        raise StoreError(
            f"{where}: no schema of the search_path ({search_path}) exists; create one "
            "(CREATE SCHEMA ...) or name it with the store's schema= argument"
        )
    return first


async def migrate(
    conn: AsyncConnection, where: str, schema: str | None = None,
    migrations: list[tuple[str, tuple[str, ...]]] = MIGRATIONS,
) -> list[str]:
    """Bring the schema up to date; return the names applied (usually none).

    ``conn`` must be in autocommit mode. The common case, an up-to-date schema, only
    reads and takes no lock.
    """
    if schema is None:
        schema = await _target_schema(conn, where)
    applied = await applied_migrations(conn)
    if applied is not None:
        check_known(applied, where, migrations)
        if len(applied) == len(migrations):
            return []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                           (MIGRATION_LOCK, schema))
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(_LEDGER)
        done = await applied_migrations(conn) or []  # others may have migrated meanwhile
        check_known(done, where, migrations)
        new = [(name, steps) for name, steps in migrations if name not in done]
        for name, steps in new:
            for statement in steps:
                await conn.execute(statement)
            await conn.execute("INSERT INTO nonoka_migrations (name) VALUES (%s)", (name,))
    return [name for name, _ in new]
