"""``nonoka db check|vacuum|stats``: the engine's own checks and housekeeping.

What they did is reported in the engine's own terms: a SQLite file's size before and
after; for PostgreSQL, which tables were vacuumed and each one's size, live and dead rows
and last vacuum (its files do not shrink: freed space is kept for reuse).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from nonoka.ops.backends import backend_for
from nonoka.ops.model import Finding, Stats
from nonoka.store.project import ProjectStores


async def check(stores: ProjectStores) -> list[Finding]:
    """Integrity (SQLite ``integrity_check``), rows without their checkpoint, index rows
    without a checkpoint, checkpoints whose entry count disagrees with the entries, and
    the search index against what it indexes."""
    return await backend_for(stores).check()


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
