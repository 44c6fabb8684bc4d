"""A PostgreSQL database for nonoka: the pool, lazy opening, migrations, errors.

``open_project_stores`` is synchronous and every turn may run in a fresh process, so
nothing connects until the first call needs the database. Then, at once, the pool
starts connecting in the background while one direct connection checks and migrates the
schema: a server that is down or refuses us fails that first call within the connect
timeout with libpq's own message (a pool alone would retry quietly until its timeout).
The checkpoint store and the record store of a project share one ``PostgresDatabase``.

Driver errors become ``StoreError`` naming the database (never its password). A pool
belongs to the event loop that opened it: use a database from one loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from nonoka.errors import ConfigurationError, MissingExtraError, StoreError

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.types.json import Jsonb as Jsonb  # for the records: only here is psycopg imported
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as exc:  # psycopg's own C parts may fail to load, too
    raise MissingExtraError(
        "the PostgreSQL engine needs psycopg 3 and psycopg-pool: "
        f"in your nonoka clone, pip install '.[postgres]' ({exc.name or 'a module'} is "
        "missing; the package index's 'nonoka' is an unrelated project)",
        name=exc.name,
    ) from None

from nonoka.store.postgres.ledger import migrate
from nonoka.store.postgres.schema import SCHEMA_NAME

CONNECT_TIMEOUT = 10
"""Seconds to wait for the server when connecting (unless the URL sets its own)."""

_ATTEMPTS = 2
"""Tries of one unit of work: the first, and one on a fresh connection if it was lost."""

T = TypeVar("T")
Work = Callable[["psycopg.AsyncConnection[Any]"], Awaitable[T]]
"""What ``PostgresDatabase.run`` does with a connection."""


class PostgresDatabase:
    """One connection pool over one database and schema, opened on first use.

    ``url`` is a libpq URL or conninfo string (``postgresql://user@host:5432/db``).
    ``schema`` puts every nonoka table in that schema by setting the connections'
    ``search_path``; without it the URL's (``?options=-csearch_path%3Dteam_a``) or the
    server's default applies. The schema is created if missing. The pool keeps
    ``min_size`` to ``max_size`` connections; a call waits up to ``timeout`` seconds for
    a free one. Call ``close()`` when done.
    """

    def __init__(self, url: str, *, schema: str | None = None, min_size: int = 1,
                 max_size: int = 4, timeout: float = 30.0) -> None:
        if schema is not None and not SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"schema {schema!r}: use letters, digits and underscores (at most 63, "
                "not starting with a digit)"
            )
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise ConfigurationError(f"cannot parse the PostgreSQL URL: {exc}") from None
        self.schema = schema
        self.where = describe(params, schema)
        self._url = url
        self._kwargs = _connection_kwargs(params, schema)
        self._sizes = (min_size, max(min_size, max_size))
        self._timeout = timeout
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit mode; driver errors become ``StoreError``.

        The block runs once: ``run`` is the form that retries a lost connection.
        """
        pool = await self._pool_or_error()
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction (rolled back if the block raises)."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def run(self, work: Work[T], *, transaction: bool = False) -> T:
        """``work(conn)`` on a pooled connection (in one transaction if asked), again on a
        fresh connection when the first one turns out to be lost.

        The pool checks a connection before lending it, but the server, a pooler or a NAT
        may drop it between the check and the statement. A transaction on a lost
        connection was rolled back (or, lost during its commit, committed: then the
        revision check of a repeated save reports a conflict, never a double write).
        """
        pool = await self._pool_or_error()
        for attempt in range(_ATTEMPTS):
            try:
                async with pool.connection() as conn:
                    if not transaction:
                        return await work(conn)
                    async with conn.transaction():
                        return await work(conn)
            except psycopg.Error as exc:
                if attempt + 1 < _ATTEMPTS and connection_lost(exc):
                    continue
                raise self._error(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def open(self) -> None:
        """Connect and migrate now rather than on first use."""
        await self._pool_or_error()

    async def _pool_or_error(self) -> AsyncConnectionPool[Any]:
        try:
            return await self._open()
        except _LostWhileOpening as lost:  # connected, then the server ended the session
            raise self._error(lost.error) from lost.error
        except psycopg.Error as exc:  # cannot connect (or a migration failed): as it is
            raise StoreError(f"{self.where}: {_message(exc)}") from exc

    def _error(self, exc: psycopg.Error) -> StoreError:
        """A driver error as a ``StoreError``; a lost connection may be retried."""
        lost = connection_lost(exc)
        message = f"{self.where}: {_message(exc)}"
        if lost:
            message += " (the connection to the database was lost; send the request again)"
        return StoreError(message, retryable=lost)

    async def _open(self) -> AsyncConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._closed:
                raise StoreError(f"{self.where}: the store is closed")
            if self._pool is None:
                low, high = self._sizes
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    self._url, kwargs=self._kwargs, min_size=low, max_size=high,
                    timeout=self._timeout, open=False, name="nonoka",
                    check=AsyncConnectionPool.check_connection,
                )
                await pool.open(wait=False)
                try:
                    conn = await psycopg.AsyncConnection.connect(self._url, **self._kwargs)
                    try:
                        async with conn:
                            await migrate(conn, self.where, self.schema)
                    except psycopg.Error as exc:
                        if connection_lost(exc):
                            raise _LostWhileOpening(exc) from exc
                        raise
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def close(self) -> None:
        """Close the pool (idempotent); later calls raise ``StoreError``."""
        async with self._opening:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


class _LostWhileOpening(Exception):
    """The opening connection was established, then lost (while checking or migrating):
    unlike a failure to connect at all (a wrong name, password or host), a new try may
    well work."""

    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.error = error


def connection_lost(exc: BaseException) -> bool:
    """Whether a driver error means the connection (not the statement) failed.

    The server ended the session (``pg_terminate_backend``, ``idle_session_timeout``, a
    restart: SQLSTATE class 57P), the connection broke (class 08, or no SQLSTATE at all
    with the connection closed), or no connection could be had in time.
    """
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate or ""
    if state.startswith(("57P", "08")):
        return True
    return not state


def describe(params: dict[str, Any], schema: str | None = None) -> str:
    """``postgresql://user@host:port/db`` (schema s), without the password."""
    user = f"{params['user']}@" if params.get("user") else ""
    port = f":{params['port']}" if params.get("port") else ""
    text = f"postgresql://{user}{params.get('host', '')}{port}/{params.get('dbname', '')}"
    return f"{text} (schema {schema})" if schema else text


def _connection_kwargs(params: dict[str, Any], schema: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    if "application_name" not in params:
        kwargs["application_name"] = "nonoka"
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT
    if schema is not None:
        options = params.get("options", "")
        kwargs["options"] = f"{options} -c search_path={schema}".strip()
    return kwargs


def _message(exc: BaseException) -> str:
    """The driver's message (with libpq's hints) on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__
