"""API keys and their owners: who a request is, and what it may reach.

A key (``nonoka serve keys add``) is a random secret shown once; the database keeps its
SHA-256 digest only (table ``serve_keys``), with the *owner* it acts for, a name, and
its first characters (what ``keys list`` shows). Every object a request stores belongs
to the request's owner: a session a response starts records it in its index row
(``serve_owner``; a branch inherits its parent's row), and a request of another owner
finds nothing there — the same 404 (or ``previous_response_not_found``) as an id that
never existed. Chat Completions histories are matched only to the owner's own sessions:
the owner is part of the conversation's key and of the client's conversation name.

The *local* owner is ``""``: requests without a key (loopback, no key in the database),
and requests with the server's own key (``NONOKA_SERVE_KEY``). Once the database holds a
key that is not revoked, every request must send one.

The owner of the request being served is a context variable (``current_owner``), set
by the key check before the routes run; tasks a request starts inherit it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import sqlite3
import time
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nonoka.errors import ConfigurationError
from nonoka.store.project import database_target

OWNER_KEY = "serve_owner"
"""The session index metadata key naming the owner of a session a response started."""
KEY_PREFIX = "nk-"
SHOWN = 10
"""The characters of a key ``keys list`` shows (its prefix and a few more)."""
LOCAL = ""
"""The owner of requests without a key and of the server's own key."""

_OWNER: ContextVar[str] = ContextVar("nonoka_serve_owner", default=LOCAL)


def current_owner() -> str:
    """The owner of the request being served (``LOCAL`` outside any request)."""
    return _OWNER.get()


def set_owner(owner: str) -> None:
    _OWNER.set(owner)


def owner_of_record(metadata: dict[str, Any]) -> str:
    """The owner a session index row names (``LOCAL`` when it names none)."""
    found = metadata.get(OWNER_KEY)
    return found if isinstance(found, str) else LOCAL


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class KeyRecord:
    """A key as the database keeps it (never the secret)."""

    key_id: str
    owner: str
    name: str
    shown: str
    created_at: float
    revoked_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.key_id, "owner": self.owner, "name": self.name,
                "key": self.shown + "…", "created_at": self.created_at,
                "revoked_at": self.revoked_at}


_COLUMNS = "key_id, owner, name, shown, created_at, revoked_at"


class KeyStore(Protocol):
    async def add(self, record: KeyRecord, key_digest: str) -> None: ...
    async def records(self) -> list[KeyRecord]: ...
    async def revoke(self, ident: str, when: float) -> list[KeyRecord]: ...
    async def owner(self, key_digest: str) -> str | None: ...
    async def any_active(self) -> bool: ...
    async def close(self) -> None: ...


class SQLiteKeys:
    """The keys in a SQLite file (its own connection; statements are sub-millisecond)."""

    def __init__(self, path: str, *, ours_only: bool) -> None:
        from nonoka.store.sqlite.database import open_database

        self._db = open_database(path, ours_only=ours_only)
        self._lock = asyncio.Lock()

    async def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                from nonoka.errors import StoreError

                raise StoreError(f"serve keys: {exc}") from exc

    async def add(self, record: KeyRecord, key_digest: str) -> None:
        await self._run(f"INSERT INTO serve_keys (digest, {_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                        (key_digest, record.key_id, record.owner, record.name, record.shown,
                         record.created_at, None))

    async def records(self) -> list[KeyRecord]:
        rows = await self._run(f"SELECT {_COLUMNS} FROM serve_keys ORDER BY created_at, key_id")
        return [KeyRecord(*row) for row in rows]

    async def revoke(self, ident: str, when: float) -> list[KeyRecord]:
        await self._run("UPDATE serve_keys SET revoked_at = ? WHERE revoked_at IS NULL AND "
                        "(key_id = ? OR name = ?)", (when, ident, ident))
        return [r for r in await self.records()
                if r.revoked_at == when and ident in (r.key_id, r.name)]

    async def owner(self, key_digest: str) -> str | None:
        rows = await self._run("SELECT owner FROM serve_keys WHERE digest = ? AND "
                               "revoked_at IS NULL", (key_digest,))
        return str(rows[0][0]) if rows else None

    async def any_active(self) -> bool:
        return bool(await self._run(
            "SELECT 1 FROM serve_keys WHERE revoked_at IS NULL LIMIT 1"))

    async def close(self) -> None:
        self._db.close()


class PostgresKeys:
    """The keys in a PostgreSQL database (a pool of its own, migrated on first use)."""

    def __init__(self, url: str) -> None:
        from nonoka.store.postgres.database import PostgresDatabase

        self._db = PostgresDatabase(url, max_size=2)

    async def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async def work(conn: Any) -> list[tuple[Any, ...]]:
            cursor = await conn.execute(sql, args)
            return list(await cursor.fetchall()) if cursor.description else []
        return await self._db.run(work)

    async def add(self, record: KeyRecord, key_digest: str) -> None:
        await self._run(f"INSERT INTO serve_keys (digest, {_COLUMNS}) "
                        "VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        (key_digest, record.key_id, record.owner, record.name, record.shown,
                         record.created_at, None))

    async def records(self) -> list[KeyRecord]:
        rows = await self._run(f"SELECT {_COLUMNS} FROM serve_keys ORDER BY created_at, key_id")
        return [KeyRecord(*row) for row in rows]

    async def revoke(self, ident: str, when: float) -> list[KeyRecord]:
        rows = await self._run(f"UPDATE serve_keys SET revoked_at = %s WHERE revoked_at IS "
                               f"NULL AND (key_id = %s OR name = %s) RETURNING {_COLUMNS}",
                               (when, ident, ident))
        return [KeyRecord(*row) for row in rows]

    async def owner(self, key_digest: str) -> str | None:
        rows = await self._run("SELECT owner FROM serve_keys WHERE digest = %s AND "
                               "revoked_at IS NULL", (key_digest,))
        return str(rows[0][0]) if rows else None

    async def any_active(self) -> bool:
        return bool(await self._run(
            "SELECT 1 FROM serve_keys WHERE revoked_at IS NULL LIMIT 1"))

    async def close(self) -> None:
        await self._db.close()


class MemoryKeys:
    """Keys for a ``memory:`` database (tests): kept in this object."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[KeyRecord, str]] = {}

    async def add(self, record: KeyRecord, key_digest: str) -> None:
        self._rows[record.key_id] = (record, key_digest)

    async def records(self) -> list[KeyRecord]:
        return sorted((r for r, _ in self._rows.values()), key=lambda r: r.created_at)

    async def revoke(self, ident: str, when: float) -> list[KeyRecord]:
        done = []
        for key_id, (record, found) in list(self._rows.items()):
            if record.revoked_at is None and ident in (record.key_id, record.name):
                record = KeyRecord(**{**record.__dict__, "revoked_at": when})
                self._rows[key_id] = (record, found)
                done.append(record)
        return done

    async def owner(self, key_digest: str) -> str | None:
        for record, found in self._rows.values():
            if record.revoked_at is None and same(found, key_digest):
                return record.owner
        return None

    async def any_active(self) -> bool:
        return any(r.revoked_at is None for r, _ in self._rows.values())

    async def close(self) -> None:
        return None


def open_keys(project: Path, database_url: str | None) -> KeyStore:
    """The key store of the project's database (as ``open_project_stores`` finds it)."""
    engine, target = database_target(project, database_url)
    if engine == "sqlite":
        if database_url is None:
            from nonoka.store.statedir import check_state_dir

            folder = Path(target).parent
            check_state_dir(folder)  # a link or another user's folder is refused
            folder.mkdir(mode=0o700, exist_ok=True)
        return SQLiteKeys(target, ours_only=database_url is None)
    if engine == "postgresql":
        return PostgresKeys(target)
    if engine == "memory":
        return MemoryKeys()
    raise ConfigurationError(f"nonoka serve keys cannot be kept in a {engine} database")


async def add_key(keys: KeyStore, name: str, owner: str | None = None
                  ) -> tuple[KeyRecord, str]:
    """A new key: its record and the secret (shown once, never stored)."""
    name = name.strip()
    if not name:
        raise ConfigurationError("a key needs a name")
    owner = (owner if owner is not None else name).strip()
    if not owner:
        raise ConfigurationError("a key's owner cannot be empty")
    if any(r.name == name and r.revoked_at is None for r in await keys.records()):
        raise ConfigurationError(f"a key named {name!r} exists; revoke it or pick another name")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    record = KeyRecord("key_" + secrets.token_hex(8), owner, name, secret[:SHOWN],
                       time.time())
    await keys.add(record, digest(secret))
    return record, secret


class Gate:
    """Who a request is: ``owner(token)`` is the owner a key acts for, ``None`` when the
    request must be refused. The server's own key (``NONOKA_SERVE_KEY``) acts for the
    local owner; a key in the database for its owner; no key is accepted only while
    neither exists."""

    def __init__(self, keys: KeyStore | None, server_key: str | None, *,
                 always: bool = False) -> None:
        self.keys = keys
        self.server_key = server_key
        self.always = always
        """A key is required even when none exists (a server bound beyond loopback)."""

    async def required(self) -> bool:
        return self.always or self.server_key is not None or (
            self.keys is not None and await self.keys.any_active())

    async def owner(self, token: str) -> str | None:
        token = token.strip()
        if self.server_key is not None and token and same(token, self.server_key):
            return LOCAL
        if token and self.keys is not None:
            found = await self.keys.owner(digest(token))
            if found is not None:
                return found
        if not await self.required():
            return LOCAL  # no key exists: any key (or none) is the local owner's
        return None
