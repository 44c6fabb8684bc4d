"""``nonoka db check|vacuum|stats``: the engine's own checks and housekeeping.

``check`` goes beyond the rows' bookkeeping to what the commands built on them need:
every stored session must load as the runtime loads it (to be continued) and export as
``sessions export`` and ``db copy`` read it, so a database ``check`` passes never fails
those later.
"""

from __future__ import annotations

from nonoka.errors import StoreError
from nonoka.ops.backends import backend_for
from nonoka.ops.export import session_digest
from nonoka.ops.model import Finding, OpsBackend, Stats
from nonoka.store.project import ProjectStores


async def check(stores: ProjectStores) -> list[Finding]:
    """Integrity (SQLite ``integrity_check``), rows without their checkpoint, index rows
    without a checkpoint, checkpoints whose entry count disagrees with the entries, the
    entries' digest chain (SQLite), and whether each session loads and exports."""
    backend = backend_for(stores)
    return [*await backend.check(), *await _sessions(stores, backend)]


async def repair(stores: ProjectStores) -> list[Finding]:
    """Rebuild what can be derived from the stored rows (SQLite: the entries' digest
    chain); the findings that were repaired. Nothing else is changed."""
    return await backend_for(stores).repair()


async def _sessions(stores: ProjectStores, backend: OpsBackend) -> list[Finding]:
    """An ``unreadable`` error for each session the runtime cannot load, an
    ``unexportable`` one for each the export cannot read."""
    found = []
    ids = await backend.session_ids()
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


async def vacuum(stores: ProjectStores) -> tuple[int, int]:
    """SQLite ``VACUUM`` (locks the file meanwhile); PostgreSQL ``VACUUM (ANALYZE)`` of
    nonoka's tables. ``(bytes before, bytes after)``."""
    return await backend_for(stores).vacuum()


async def stats(stores: ProjectStores, largest: int = 10) -> Stats:
    return await backend_for(stores).stats(largest)
