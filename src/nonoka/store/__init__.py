"""Storage: one contract, one package per engine. Each is imported only when first used.

The contract is ``base`` (``CheckpointStore``, ``SessionLeases``) and ``records``
(``SessionIndex``, ``EventLog``); ``next_calls`` is an optional capability, and
``migrations`` the schema runner both SQL engines share. The engines are ``memory``,
``sqlite`` and ``postgres``, packages of one shape (``database``, ``checkpoints``,
``records``, and ``migrations`` for the SQL ones). ``project`` opens a project's stores
from a database URL.

Nothing is imported here but ``lazy`` (the lazy export every package of the store
makes, standard library only): the per-turn bridge reads ``nonoka.store.project``
before pydantic (which ``nonoka.store.base`` needs) is loaded, and
``PostgresCheckpointStore`` needs the ``postgres`` extra (without it, using the name
raises ``MissingExtraError``, which says so).
"""

from __future__ import annotations

from nonoka.store.lazy import lazy_exports

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's early path loads this package
if TYPE_CHECKING:
    from nonoka.store.base import CheckpointStore, SessionLeases
    from nonoka.store.leases import hold_lease, new_lease_owner
    from nonoka.store.memory.checkpoints import MemoryCheckpointStore
    from nonoka.store.memory.records import MemoryRecordStore
    from nonoka.store.postgres.checkpoints import PostgresCheckpointStore
    from nonoka.store.postgres.records import PostgresRecordStore
    from nonoka.store.project import ProjectStores, open_project_stores
    from nonoka.store.records import EventLog, SessionIndex
    from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore
    from nonoka.store.sqlite.records import SQLiteRecordStore

__all__ = (
    "CheckpointStore",
    "EventLog",
    "MemoryCheckpointStore",
    "MemoryRecordStore",
    "PostgresCheckpointStore",
    "PostgresRecordStore",
    "ProjectStores",
    "SQLiteCheckpointStore",
    "SQLiteRecordStore",
    "SessionIndex",
    "SessionLeases",
    "hold_lease",
    "new_lease_owner",
    "open_project_stores",
)

_WHERE = {
    "CheckpointStore": "base",
    "SessionLeases": "base",
    "SessionIndex": "records",
    "EventLog": "records",
    "MemoryCheckpointStore": "memory.checkpoints",
    "MemoryRecordStore": "memory.records",
    "SQLiteCheckpointStore": "sqlite.checkpoints",
    "SQLiteRecordStore": "sqlite.records",
    "PostgresCheckpointStore": "postgres.checkpoints",
    "PostgresRecordStore": "postgres.records",
    "ProjectStores": "project",
    "open_project_stores": "project",
    "hold_lease": "leases",
    "new_lease_owner": "leases",
}

__getattr__ = lazy_exports(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
