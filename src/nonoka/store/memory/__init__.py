"""The in-memory reference engine: what the other engines must match, kept in a process.

It keeps what the SQLite engine keeps, as JSON text rather than object references, and
follows the same rules (revision checks, entries appended between compactions, step
updates in a strictly increasing time, leases with an expiry), so a round trip through
it is as faithful, and as lossy, as one through a database. Tests, and runs that need
no persistence, use it.

- ``database``: ``MemoryDatabase`` and ``MemoryRecordDatabase``, the rows; share one
  between stores to stand in for processes reopening a file. Nothing to migrate.
- ``checkpoints``: ``MemoryCheckpointStore`` (``CheckpointStore`` and ``SessionLeases``).
- ``records``: ``MemoryRecordStore`` (``SessionIndex`` and ``EventLog``).

The names are exported lazily, like every engine package's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nonoka.store.lazy import lazy_exports

if TYPE_CHECKING:
    from nonoka.store.memory.checkpoints import MemoryCheckpointStore
    from nonoka.store.memory.database import (
        CheckpointRow,
        MemoryDatabase,
        MemoryRecordDatabase,
        StepRow,
        StoredEvent,
    )
    from nonoka.store.memory.records import MemoryRecordStore

__all__ = ("CheckpointRow", "MemoryCheckpointStore", "MemoryDatabase", "MemoryRecordDatabase",
           "MemoryRecordStore", "StepRow", "StoredEvent")

_WHERE = {
    "MemoryCheckpointStore": "checkpoints",
    "MemoryRecordStore": "records",
    "CheckpointRow": "database",
    "MemoryDatabase": "database",
    "MemoryRecordDatabase": "database",
    "StepRow": "database",
    "StoredEvent": "database",
}

__getattr__ = lazy_exports(__name__, _WHERE)
