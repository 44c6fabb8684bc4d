"""Runtime tests run against every storage engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nonoka.runner import Runner
from nonoka.store.base import CheckpointStore


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CheckpointStore]:
    engine: CheckpointStore
    if request.param == "memory":
        from nonoka.store.memory import MemoryCheckpointStore

        engine = MemoryCheckpointStore()
    else:
        from nonoka.store.sqlite import SQLiteCheckpointStore

        engine = SQLiteCheckpointStore(tmp_path / "sessions.db")
    yield engine
    await engine.close()


@pytest.fixture
def runner(store: CheckpointStore) -> Runner:
    return Runner(store=store)
