"""Storage engines. Each is imported only when first used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nonoka.store.base import CheckpointStore

if TYPE_CHECKING:
    from nonoka.store.memory import MemoryCheckpointStore
    from nonoka.store.sqlite import SQLiteCheckpointStore

__all__ = ["CheckpointStore", "MemoryCheckpointStore", "SQLiteCheckpointStore"]


def __getattr__(name: str) -> Any:
    if name == "MemoryCheckpointStore":
        from nonoka.store.memory import MemoryCheckpointStore

        return MemoryCheckpointStore
    if name == "SQLiteCheckpointStore":
        from nonoka.store.sqlite import SQLiteCheckpointStore

        return SQLiteCheckpointStore
    raise AttributeError(name)
