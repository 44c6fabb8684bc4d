"""The SQLite engine: one file per project, safe for many short-lived processes.

- ``database``: opening a file (permissions, sanity checks, WAL, busy timeout) and
  bringing it up to date;
- ``migrations``: the schema's history, named migrations applied by ``ledger`` (the
  SQLite side of ``nonoka.store.migrations``);
- ``entries``: every rule about the entry rows — their layout, block, reads, deletes,
  full-text index, its check and its repair;
- ``checkpoints``: ``SQLiteCheckpointStore`` (``CheckpointStore``, ``SessionLeases``,
  ``NextCallStore``);
- ``records``: ``SQLiteRecordStore`` (``SessionIndex`` and ``EventLog``), which can share
  the checkpoint store's connection;
- ``leases`` and ``next_calls``: the SQL the bridge's early dispatch also runs, before
  pydantic is loaded — which is why this package imports nothing until a name is used.
"""

from __future__ import annotations

from nonoka.store.lazy import lazy_exports

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's early path loads this package
if TYPE_CHECKING:
    from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore
    from nonoka.store.sqlite.next_calls import SQLiteNextCalls
    from nonoka.store.sqlite.records import SQLiteRecordStore

__all__ = ("SQLiteCheckpointStore", "SQLiteNextCalls", "SQLiteRecordStore")

_WHERE = {
    "SQLiteCheckpointStore": "checkpoints",
    "SQLiteRecordStore": "records",
    "SQLiteNextCalls": "next_calls",
}

__getattr__ = lazy_exports(__name__, _WHERE)
