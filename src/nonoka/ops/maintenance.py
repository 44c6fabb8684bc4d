"""``nonoka db check|vacuum|stats``: the engine's own checks and housekeeping.

What they did is reported in the engine's own terms: a SQLite file's size before and
after; for PostgreSQL, which tables were vacuumed and each one's size, live and dead rows
and last vacuum (its files do not shrink: freed space is kept for reuse).

``check`` goes beyond the rows' bookkeeping to what the commands built on them need:
every stored session must load as the runtime loads it (to be continued) and export as
``sessions export`` and ``db copy`` read it, so a database ``check`` passes never fails
those later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from nonoka.errors import StoreError
from nonoka.ops.backends import backend_for
from nonoka.ops.export import session_digest
from nonoka.ops.model import Finding, OpsBackend, Stats
from nonoka.store.project import ProjectStores


async def check(stores: ProjectStores) -> list[Finding]:
    """Integrity (SQLite ``integrity_check``), rows without their checkpoint, index rows
    without a checkpoint or out of their place in the list, checkpoints whose entry count
    disagrees with the entries, entry rows out of their place and the entries' digest
    chain (SQLite), and whether each session loads and exports."""
    backend = backend_for(stores)
    rows = await backend.check()
    known = {f.session_id for f in rows if f.kind == "missing_media" and f.session_id}
    return [*rows, *await _sessions(stores, backend, known)]


async def repair(stores: ProjectStores) -> list[Finding]:
    """Rebuild what can be derived from the stored rows (SQLite: the entry rows' places
    and the full-text index, the entries' digest chain; every SQL engine: the session
    list's order); the findings that were repaired. Nothing else is changed."""
    return await backend_for(stores).repair()


async def _sessions(stores: ProjectStores, backend: OpsBackend,
                    known: set[str]) -> list[Finding]:
    """An ``unreadable`` error for each session the runtime cannot load, an
    ``unexportable`` one for each the export cannot read; not for the sessions in
    ``known``, whose error the row checks named already (a file that is not stored)."""
    found = []
    ids = [sid for sid in await backend.session_ids() if sid not in known]
    for sid in ids:
        try:
            await stores.checkpoints.load_session(sid)
        except StoreError as exc:
            if exc.retryable:
                raise
            found.append(Finding("error", "unreadable",
                                 f"the runtime cannot load it: {_line(exc)}", sid))
    async with backend.reader() as reader:
        for sid in ids:
            try:
                await session_digest(reader, sid)
            except StoreError as exc:
                if exc.retryable:
                    raise
                found.append(Finding("error", "unexportable",
                                     f"export cannot read it: {_line(exc)}", sid))
    return found


def _line(exc: Exception) -> str:
    return " ".join(str(exc).split())


@dataclass(frozen=True)
class TableHealth:
    """One PostgreSQL table as its statistics views describe it."""

    name: str
    bytes: int
    live_rows: int
    dead_rows: int
    vacuumed_at: float | None = None
    """When it was last vacuumed (by hand or by autovacuum), as a Unix time."""

    @property
    def last_vacuum(self) -> str:
        if self.vacuumed_at is None:
            return ""
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.vacuumed_at))

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "live_rows": self.live_rows,
                "dead_rows": self.dead_rows, "last_vacuum": self.vacuumed_at}


@dataclass(frozen=True)
class Vacuumed:
    """What ``vacuum`` did: sizes before and after (a SQLite file; PostgreSQL's tables,
    which keep freed space for reuse), and for PostgreSQL each table afterwards."""

    engine: str
    bytes_before: int
    bytes_after: int
    tables: list[TableHealth] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        done = {"engine": self.engine, "bytes_before": self.bytes_before,
                "bytes_after": self.bytes_after}
        if self.engine == "postgresql":
            done["done"] = "VACUUM (ANALYZE)"
            done["tables"] = [t.as_json() for t in self.tables]
        return done


async def vacuum(stores: ProjectStores) -> Vacuumed:
    """SQLite ``VACUUM`` (locks the file meanwhile); PostgreSQL ``VACUUM (ANALYZE)`` of
    nonoka's tables."""
    backend = backend_for(stores)
    before, after = await backend.vacuum()
    return Vacuumed(_engine(stores), before, after, await table_health(stores))


async def table_health(stores: ProjectStores) -> list[TableHealth]:
    """Each of nonoka's tables as PostgreSQL sees it; empty for the other engines."""
    backend = backend_for(stores)
    health = getattr(backend, "table_health", None)
    if health is None:
        return []
    return [TableHealth(*row) for row in await health()]


def _engine(stores: ProjectStores) -> str:
    name = type(stores.checkpoints).__name__
    return {"SQLiteCheckpointStore": "sqlite", "PostgresCheckpointStore": "postgresql",
            "MemoryCheckpointStore": "memory"}.get(name, name)


async def stats(stores: ProjectStores, largest: int = 10) -> Stats:
    return await backend_for(stores).stats(largest)
