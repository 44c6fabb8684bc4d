"""One ``OpsBackend`` per engine, picked from a project's open stores.

Each backend works on its store's own database (the SQLite file, the PostgreSQL pool, the
memory engine's rows), so it sees exactly what the stores see. Engines are imported only
when their backend is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nonoka.errors import ConfigurationError

if TYPE_CHECKING:
    from nonoka.ops.model import OpsBackend
    from nonoka.store.project import ProjectStores


def backend_for(stores: ProjectStores) -> OpsBackend:
    """The backend over ``stores``; ``ConfigurationError`` for a store nonoka does not know.

    A store of another author joins by offering ``ops_backend(stores) -> OpsBackend`` on
    its checkpoint store (and runs ``SessionOpsSuite`` to prove it).
    """
    offered = getattr(stores.checkpoints, "ops_backend", None)
    if callable(offered):
        backend: OpsBackend = offered(stores)
        return backend
    name = type(stores.checkpoints).__name__
    if name == "SQLiteCheckpointStore":
        from nonoka.ops.backends.sqlite import SQLiteOps

        return SQLiteOps(stores)
    if name == "PostgresCheckpointStore":
        from nonoka.ops.backends.postgres import PostgresOps

        return PostgresOps(stores)
    if name == "MemoryCheckpointStore":
        from nonoka.ops.backends.memory import MemoryOps

        return MemoryOps(stores)
    raise ConfigurationError(f"session operations do not know the {name} store ({stores.url})")
