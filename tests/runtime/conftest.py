"""Runtime tests run against every storage engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nonoka.runtime.runner import Runner
from nonoka.store.base import CheckpointStore


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CheckpointStore]:
    engine: CheckpointStore
    if request.param == "memory":
        from nonoka.store.memory import MemoryCheckpointStore

        yield MemoryCheckpointStore()
    elif request.param == "sqlite":
        from nonoka.store.sqlite import SQLiteCheckpointStore

        engine = SQLiteCheckpointStore(tmp_path / "sessions.db")
        try:
            yield engine
        finally:
            await engine.close()
    else:
        from nonoka.store.postgres import PostgresCheckpointStore
        from tests import pg

        with pg.temp_schema() as schema:  # dropped even when the test fails
            engine = PostgresCheckpointStore(pg.PG_URL, schema=schema)
            try:
                yield engine
            finally:
                await engine.close()


@pytest.fixture
def runner(store: CheckpointStore) -> Runner:
    return Runner(store=store)
