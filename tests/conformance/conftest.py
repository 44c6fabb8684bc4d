"""The fixtures the conformance suite asks for, over nonoka's own engines.

``engine``: every test runs once per engine in ``ENGINES``; ``records`` does the same
for the session index and event log (``RECORD_ENGINES``) and ``ops_engine`` for the
session operations (``OPS_ENGINES``); ``shared_engine`` is an engine
other OS processes can open too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.engines import (
    ENGINES,
    OPS_ENGINES,
    RECORD_ENGINES,
    SHARED_ENGINES,
    EngineHarness,
    OpsEngineHarness,
    RecordEngineHarness,
)


@pytest.fixture(params=sorted(ENGINES))
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EngineHarness]:
    harness = await ENGINES[request.param](tmp_path)
    try:
        yield harness
    finally:
        await harness.aclose()


@pytest.fixture(params=SHARED_ENGINES)
async def shared_engine(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[EngineHarness]:
    """An engine whose data other OS processes can open (``process_url`` is set)."""
    harness = await ENGINES[request.param](tmp_path)
    assert harness.process_url is not None
    try:
        yield harness
    finally:
        await harness.aclose()


@pytest.fixture(params=sorted(RECORD_ENGINES))
async def records(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RecordEngineHarness]:
    harness = await RECORD_ENGINES[request.param](tmp_path)
    try:
        yield harness
    finally:
        await harness.aclose()


@pytest.fixture(params=OPS_ENGINES)
async def ops_engine(request: pytest.FixtureRequest,
                     tmp_path: Path) -> AsyncIterator[OpsEngineHarness]:
    """A project's stores on each engine, for the session operations suite."""
    harness = OpsEngineHarness(request.param, tmp_path)
    try:
        yield harness
    finally:
        await harness.aclose()
