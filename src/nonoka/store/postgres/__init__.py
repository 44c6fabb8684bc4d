"""The PostgreSQL engine: one database shared by every worker on every machine.

- ``database``: ``PostgresDatabase``, the pool opened on first use, and driver errors;
- ``migrations``: the schema's history, named migrations applied by ``ledger`` (the
  PostgreSQL side of ``nonoka.store.migrations``, under an advisory lock);
- ``schema``: the lock keys and index expressions live queries share with the schema;
- ``checkpoints``: ``PostgresCheckpointStore`` (``CheckpointStore``, ``SessionLeases``);
- ``records``: ``PostgresRecordStore`` (``SessionIndex`` and ``EventLog``).

It needs the ``postgres`` extra, psycopg 3 and psycopg-pool (``pip install '.[postgres]'``
in the clone). Nothing is
imported until a name is used; without the extra, using one raises
``MissingExtraError`` (a ``ConfigurationError`` and an ``ImportError``) naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nonoka.store.lazy import lazy_exports

if TYPE_CHECKING:
    from nonoka.store.postgres.checkpoints import PostgresCheckpointStore
    from nonoka.store.postgres.database import PostgresDatabase
    from nonoka.store.postgres.records import PostgresRecordStore

__all__ = ("PostgresCheckpointStore", "PostgresDatabase", "PostgresRecordStore")

_WHERE = {
    "PostgresCheckpointStore": "checkpoints",
    "PostgresRecordStore": "records",
    "PostgresDatabase": "database",
}

__getattr__ = lazy_exports(__name__, _WHERE)
