"""Engine harnesses: how the conformance suite (``nonoka.testing.conformance``) drives
each of nonoka's engines.

A harness owns a store plus the back doors the suite needs: reopening the same data in a
new store instance, writing raw rows (as a corrupting disk, an older or a newer nonoka
would), and dumping everything stored for a session to prove a failed call changed
nothing. The back doors poke each engine's own tables, so they live here, not in the
suite. An engine joins the whole suite by adding a harness class and one entry to
``ENGINES`` (and, for the session index and event log, to ``RECORD_ENGINES``).

The PostgreSQL harnesses give each test its own schema on the server named by
``tests.pg`` and drop it in ``aclose`` (the fixtures call it even when the test fails).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Protocol

from nonoka.store.base import CheckpointStore
from nonoka.store.memory import (
    CheckpointRow,
    MemoryCheckpointStore,
    MemoryDatabase,
    MemoryRecordDatabase,
    MemoryRecordStore,
)
from nonoka.store.postgres import PostgresCheckpointStore
from nonoka.store.postgres.records import PostgresRecordStore
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.packing import unpack
from nonoka.store.sqlite.records import SQLiteRecordStore
from nonoka.testing.conformance import MediaHarness, RecordsHarness, RecordStore, StoredRows
from tests import pg


class EngineHarness(MediaHarness, Protocol):
    """A ``MediaHarness`` for one of nonoka's engines, which the fixtures close."""

    name: str

    @property
    def process_url(self) -> str | None:
        """How another OS process opens the same data (``None``: it cannot)."""
        ...

    async def aclose(self) -> None: ...


class MemoryHarness:
    name = "memory"
    process_url = None

    def __init__(self, _tmp: Path) -> None:
        self.database = MemoryDatabase()
        self.store: CheckpointStore = MemoryCheckpointStore(self.database)

    async def reopen(self) -> CheckpointStore:
        return MemoryCheckpointStore(self.database)

    def corrupt_snapshot(self, session_id: str, text: str) -> None:
        self.database.checkpoints[session_id].state_json = text

    def corrupt_entry(self, session_id: str, seq: int, text: str) -> None:
        self.database.checkpoints[session_id].entries[seq] = text

    def corrupt_step_update(self, session_id: str, step_id: str, kind: str, text: str) -> None:
        self.database.step_updates[(session_id, step_id, kind)].payload_json = text

    def write_raw_snapshot(self, session_id: str, json_text: str) -> None:
        row = self.database.checkpoints.get(session_id)
        if row is None:
            now = time.time()
            self.database.checkpoints[session_id] = CheckpointRow(json_text, 1, 0, [], now, now)
        else:
            row.state_json = json_text

    def stored_media(self) -> dict[str, int]:
        return {digest: file.size for digest, file in self.database.media.items()}

    def delete_media(self, digest: str) -> None:
        del self.database.media[digest]

    def dump(self, session_id: str) -> StoredRows | None:
        row = self.database.checkpoints.get(session_id)
        if row is None:
            return None
        steps = sorted(
            (k[1], k[2], s.payload_json, s.updated_at)
            for k, s in self.database.step_updates.items()
            if k[0] == session_id
        )
        return StoredRows(row.state_json, row.revision, tuple(row.entries), tuple(steps))

    async def aclose(self) -> None:
        await self.store.close()


class SQLiteHarness:
    name = "sqlite"

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "nonoka.db"
        self.store: CheckpointStore = SQLiteCheckpointStore(self.path)
        self._opened: list[CheckpointStore] = []

    @property
    def process_url(self) -> str:
        return f"sqlite:{self.path}"

    async def reopen(self) -> CheckpointStore:
        store = SQLiteCheckpointStore(self.path)
        self._opened.append(store)
        return store

    def _raw(self) -> closing[sqlite3.Connection]:
        return closing(sqlite3.connect(self.path, isolation_level=None, timeout=5))

    def corrupt_snapshot(self, session_id: str, text: str) -> None:
        with self._raw() as db:
            db.execute("UPDATE checkpoints SET state_json = ? WHERE session_id = ?",
                       (text, session_id))

    def corrupt_entry(self, session_id: str, seq: int, text: str) -> None:
        with self._raw() as db:
            db.execute("UPDATE session_entries SET entry_json = ? WHERE session_id = ? "
                       "AND seq = ?", (text, session_id, seq))

    def corrupt_step_update(self, session_id: str, step_id: str, kind: str, text: str) -> None:
        with self._raw() as db:
            db.execute("UPDATE step_updates SET payload_json = ? WHERE session_id = ? "
                       "AND step_id = ? AND update_type = ?", (text, session_id, step_id, kind))

    def write_raw_snapshot(self, session_id: str, json_text: str) -> None:
        now = time.time()
        with self._raw() as db:
            db.execute(
                "INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
                "memory_generation, created_at, updated_at) VALUES (?, ?, 1, 0, 0, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET state_json = excluded.state_json",
                (session_id, json_text, now, now),
            )

    def stored_media(self) -> dict[str, int]:
        with self._raw() as db:
            return dict(db.execute("SELECT digest, length(data) FROM media"))

    def delete_media(self, digest: str) -> None:
        with self._raw() as db:
            db.execute("DELETE FROM media WHERE digest = ?", (digest,))

    def dump(self, session_id: str) -> StoredRows | None:
        with self._raw() as db:
            row = db.execute("SELECT state_json, revision FROM checkpoints WHERE session_id = ?",
                             (session_id,)).fetchone()
            if row is None:
                return None
            entries = db.execute("SELECT entry_json FROM session_entries WHERE session_id = ? "
                                 "ORDER BY seq", (session_id,)).fetchall()
            steps = db.execute("SELECT step_id, update_type, payload_json, updated_at "
                               "FROM step_updates WHERE session_id = ? ORDER BY step_id, "
                               "update_type", (session_id,)).fetchall()
        return StoredRows(row[0], row[1], tuple(unpack(e[0]) for e in entries),
                          tuple(tuple(s) for s in steps))

    async def aclose(self) -> None:
        for store in [self.store, *self._opened]:
            await store.close()


class PostgresHarness:
    name = "postgres"

    def __init__(self, _tmp: Path) -> None:
        self.schema = pg.create_schema()
        self.raw = pg.connect(self.schema)
        self.postgres = PostgresCheckpointStore(pg.PG_URL, schema=self.schema)
        self.store: CheckpointStore = self.postgres
        self._opened: list[CheckpointStore] = []

    @property
    def process_url(self) -> str:
        return pg.schema_url(self.schema)

    async def reopen(self) -> CheckpointStore:
        store = PostgresCheckpointStore(self.process_url)
        self._opened.append(store)
        return store

    def corrupt_snapshot(self, session_id: str, text: str) -> None:
        self.raw.execute("UPDATE checkpoints SET state_json = %s WHERE session_id = %s",
                         (text, session_id))

    def corrupt_entry(self, session_id: str, seq: int, text: str) -> None:
        self.raw.execute("UPDATE session_entries SET entry_json = %s WHERE session_id = %s "
                         "AND seq = %s", (text, session_id, seq))

    def corrupt_step_update(self, session_id: str, step_id: str, kind: str, text: str) -> None:
        self.raw.execute("UPDATE step_updates SET payload_json = %s WHERE session_id = %s "
                         "AND step_id = %s AND update_type = %s",
                         (text, session_id, step_id, kind))

    def write_raw_snapshot(self, session_id: str, json_text: str) -> None:
        now = time.time()
        self.raw.execute(
            "INSERT INTO checkpoints VALUES (%s, %s, 1, 0, 0, %s, %s) ON CONFLICT (session_id) "
            "DO UPDATE SET state_json = excluded.state_json",
            (session_id, json_text, now, now),
        )

    def stored_media(self) -> dict[str, int]:
        rows = self.raw.execute("SELECT digest, octet_length(data) FROM media").fetchall()
        return {str(digest): int(str(size)) for digest, size in rows}

    def delete_media(self, digest: str) -> None:
        self.raw.execute("DELETE FROM media WHERE digest = %s", (digest,))

    def dump(self, session_id: str) -> StoredRows | None:
        with self.raw.transaction():
            row = self.raw.execute("SELECT state_json, revision FROM checkpoints "
                                   "WHERE session_id = %s", (session_id,)).fetchone()
            if row is None:
                return None
            entries = self.raw.execute("SELECT entry_json FROM session_entries WHERE "
                                       "session_id = %s ORDER BY seq", (session_id,)).fetchall()
            steps = self.raw.execute("SELECT step_id, update_type, payload_json, updated_at "
                                     "FROM step_updates WHERE session_id = %s ORDER BY step_id, "
                                     "update_type", (session_id,)).fetchall()
        return StoredRows(str(row[0]), int(str(row[1])), tuple(str(e[0]) for e in entries),
                          tuple((str(a), str(b), str(c), float(str(d))) for a, b, c, d in steps))

    async def aclose(self) -> None:
        try:
            for store in [self.store, *self._opened]:
                await store.close()
        finally:
            self.raw.close()
            pg.drop_schema(self.schema)


HarnessFactory = Callable[[Path], Awaitable[EngineHarness]]


async def _memory(tmp: Path) -> EngineHarness:
    return MemoryHarness(tmp)


async def _sqlite(tmp: Path) -> EngineHarness:
    return SQLiteHarness(tmp)


async def _postgres(tmp: Path) -> EngineHarness:
    harness = PostgresHarness(tmp)
    try:
        await harness.postgres.database.open()  # the tables exist for the raw back doors
    except BaseException:
        await harness.aclose()
        raise
    return harness


ENGINES: dict[str, HarnessFactory] = {"memory": _memory, "sqlite": _sqlite,
                                      "postgres": _postgres}
"""Every engine the suite runs against."""

SHARED_ENGINES = ["postgres", "sqlite"]
"""Engines whose data several OS processes can open at once."""


def open_store(url: str) -> CheckpointStore:
    """Open a store from a harness ``process_url`` (used by worker processes)."""
    scheme, _, rest = url.partition(":")
    if scheme == "sqlite":
        return SQLiteCheckpointStore(rest)
    if scheme == "postgresql":
        return PostgresCheckpointStore(url)
    raise ValueError(f"no engine for {url!r}")


# -- session index and event log ----------------------------------------------------------


class RecordEngineHarness(RecordsHarness, Protocol):
    """A ``RecordsHarness`` for one of nonoka's engines, which the fixtures close."""

    name: str

    async def aclose(self) -> None: ...


class MemoryRecordsHarness:
    name = "memory"

    def __init__(self, _tmp: Path) -> None:
        self.database = MemoryRecordDatabase()
        self.store: RecordStore = MemoryRecordStore(self.database)

    async def reopen(self) -> RecordStore:
        return MemoryRecordStore(self.database)

    async def aclose(self) -> None:
        await self.store.close()


class SQLiteRecordsHarness:
    name = "sqlite"

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "nonoka.db"
        self.store: RecordStore = SQLiteRecordStore(self.path)
        self._opened: list[RecordStore] = []

    async def reopen(self) -> RecordStore:
        store = SQLiteRecordStore(self.path)
        self._opened.append(store)
        return store

    async def aclose(self) -> None:
        for store in [self.store, *self._opened]:
            await store.close()


class PostgresRecordsHarness:
    name = "postgres"

    def __init__(self, _tmp: Path) -> None:
        self.schema = pg.create_schema()
        self.store: RecordStore = PostgresRecordStore(pg.PG_URL, schema=self.schema)
        self._opened: list[RecordStore] = []

    async def reopen(self) -> RecordStore:
        store = PostgresRecordStore(pg.schema_url(self.schema))
        self._opened.append(store)
        return store

    async def aclose(self) -> None:
        try:
            for store in [self.store, *self._opened]:
                await store.close()
        finally:
            pg.drop_schema(self.schema)


async def _memory_records(tmp: Path) -> RecordEngineHarness:
    return MemoryRecordsHarness(tmp)


async def _sqlite_records(tmp: Path) -> RecordEngineHarness:
    return SQLiteRecordsHarness(tmp)


async def _postgres_records(tmp: Path) -> RecordEngineHarness:
    return PostgresRecordsHarness(tmp)


RECORD_ENGINES: dict[str, Callable[[Path], Awaitable[RecordEngineHarness]]] = {
    "memory": _memory_records,
    "sqlite": _sqlite_records,
    "postgres": _postgres_records,
}
"""Every engine the session index / event log suite runs against."""


# -- session operations (a project's stores) -------------------------------------------------


class OpsEngineHarness:
    """A project's stores on one engine, and fresh empty ones on demand (``OpsHarness``)."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name = name
        self._tmp = tmp
        self._opened: list[ProjectStores] = []
        self._schemas: list[str] = []
        self.stores = self._open()

    def _open(self, name: str | None = None) -> ProjectStores:
        name = name or self.name
        if name == "memory":
            stores = open_project_stores(self._tmp, "memory:")
        elif name == "sqlite":
            stores = open_project_stores(self._tmp, f"sqlite:db{len(self._opened)}.db")
        else:
            self._schemas.append(pg.create_schema())
            stores = open_project_stores(self._tmp, pg.schema_url(self._schemas[-1]))
        self._opened.append(stores)
        return stores

    async def fresh(self, engine: str | None = None) -> ProjectStores:
        return self._open(engine)

    async def aclose(self) -> None:
        try:
            for stores in self._opened:
                await stores.close()
        finally:
            for schema in self._schemas:
                pg.drop_schema(schema)


OPS_ENGINES = ["memory", "postgres", "sqlite"]
