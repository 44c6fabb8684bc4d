"""Storage engines. Each is imported only when first used.

Nothing is imported here: the per-turn bridge reads ``nonoka.store.project`` before
pydantic (which ``nonoka.store.base`` needs) is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nonoka.store.base import CheckpointStore
    from nonoka.store.memory import MemoryCheckpointStore
    from nonoka.store.sqlite import SQLiteCheckpointStore

__all__ = ["CheckpointStore", "MemoryCheckpointStore", "SQLiteCheckpointStore"]


def __getattr__(name: str) -> Any:
    if name == "CheckpointStore":
        from nonoka.store.base import CheckpointStore

        return CheckpointStore
    if name == "MemoryCheckpointStore":
        from nonoka.store.memory import MemoryCheckpointStore

        return MemoryCheckpointStore
    if name == "SQLiteCheckpointStore":
        from nonoka.store.sqlite import SQLiteCheckpointStore

        return SQLiteCheckpointStore
    raise AttributeError(name)
