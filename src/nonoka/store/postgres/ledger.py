"""The PostgreSQL side of the migration runner (``nonoka.store.migrations``).

Applied names are recorded in ``nonoka_migrations``; missing ones are applied in order in
one transaction; a database that lists a name this code does not know was written by a
newer nonoka and is refused before anything is changed. Several processes may open a
fresh database at once: the migrating transaction holds a transaction-level advisory
lock keyed on the schema, so each migration runs exactly once and the others wait, then
find nothing to do. Everything lives in one schema: the one named by the store's
``schema`` argument or else the first one of the connection's ``search_path``; it is
created if missing. The only importer of the history (``migrations``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from nonoka.errors import StoreError
from nonoka.store import migrations as runner
from nonoka.store.postgres.migrations import MIGRATIONS, Migration
from nonoka.store.postgres.schema import MIGRATION_LOCK, SCHEMA_NAME

if TYPE_CHECKING:
    from psycopg import AsyncConnection

_LEDGER = """CREATE TABLE IF NOT EXISTS nonoka_migrations (
    name text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""


async def applied_migrations(conn: AsyncConnection[Any]) -> list[str]:
    """Names recorded in the current schema, oldest first; empty without a ledger."""
    cur = await conn.execute("SELECT to_regclass('nonoka_migrations') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return []
    cur = await conn.execute("SELECT name FROM nonoka_migrations ORDER BY applied_at, name")
    return [name for (name,) in await cur.fetchall()]


async def _target_schema(conn: AsyncConnection[Any], where: str) -> str:
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
    conn: AsyncConnection[Any], where: str, schema: str | None = None,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> list[str]:
    """Bring the schema up to date; return the names applied (usually none).

    ``conn`` must be in autocommit mode. The common case, an up-to-date schema, only
    reads and takes no lock.
    """
    if schema is None:
        schema = await _target_schema(conn, where)
    return await runner.migrate(_Ledger(conn, schema), migrations, where)


class _Ledger:
    """``nonoka.store.migrations.Ledger`` over one autocommit connection."""

    def __init__(self, conn: AsyncConnection[Any], schema: str) -> None:
        self._conn = conn
        self._schema = schema

    async def applied(self) -> list[str]:
        return await applied_migrations(self._conn)

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        return self._exclusive()

    @asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        """One transaction under an advisory lock keyed on the schema (created if
        missing), so concurrent openers migrate one after another."""
        conn = self._conn
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                               (MIGRATION_LOCK, self._schema))
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            await conn.execute(_LEDGER)
            yield

    async def apply(self, migration: Migration) -> None:
        await migration(self._conn)
        await self._conn.execute("INSERT INTO nonoka_migrations (name) VALUES (%s)",
                                 (migration.__name__,))
