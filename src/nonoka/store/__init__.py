"""Storage engines and the project stores. Each is imported only when first used.

Nothing is imported here: the per-turn bridge reads ``nonoka.store.project`` before
pydantic (which ``nonoka.store.base`` needs) is loaded, and ``PostgresCheckpointStore``
needs the ``postgres`` extra (psycopg), which SQLite users never load.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nonoka.store.base import CheckpointStore as CheckpointStore
    from nonoka.store.leases import hold_lease as hold_lease
    from nonoka.store.leases import new_lease_owner as new_lease_owner
    from nonoka.store.memory import MemoryCheckpointStore as MemoryCheckpointStore
    from nonoka.store.postgres import PostgresCheckpointStore as PostgresCheckpointStore
    from nonoka.store.project import ProjectStores as ProjectStores
    from nonoka.store.project import open_project_stores as open_project_stores
    from nonoka.store.sqlite import SQLiteCheckpointStore as SQLiteCheckpointStore

_EXPORTS = {
    "CheckpointStore": "nonoka.store.base",
    "MemoryCheckpointStore": "nonoka.store.memory",
    "PostgresCheckpointStore": "nonoka.store.postgres",
    "ProjectStores": "nonoka.store.project",
    "SQLiteCheckpointStore": "nonoka.store.sqlite",
    "hold_lease": "nonoka.store.leases",
    "new_lease_owner": "nonoka.store.leases",
    "open_project_stores": "nonoka.store.project",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nonoka.store' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
