"""``nonoka db check|vacuum|stats``: the engine's own checks and housekeeping."""

from __future__ import annotations

from nonoka.ops.backends import backend_for
from nonoka.ops.model import Finding, Stats
from nonoka.store.project import ProjectStores


async def check(stores: ProjectStores) -> list[Finding]:
    """Integrity (SQLite ``integrity_check``), rows without their checkpoint, index rows
    without a checkpoint, checkpoints whose entry count disagrees with the entries, and
    the search index against what it indexes."""
    return await backend_for(stores).check()


async def vacuum(stores: ProjectStores) -> tuple[int, int]:
    """SQLite ``VACUUM`` (locks the file meanwhile); PostgreSQL ``VACUUM (ANALYZE)`` of
    nonoka's tables. ``(bytes before, bytes after)``."""
    return await backend_for(stores).vacuum()


async def stats(stores: ProjectStores, largest: int = 10) -> Stats:
    return await backend_for(stores).stats(largest)
