"""A store written outside nonoka runs the conformance suite, and a broken one fails it.

Each run is a separate pytest process in a project of its own (strict asyncio mode, no
nonoka configuration), as a third party would have it: the store is a subclass of the
memory engine defined in that project, once faithful and once losing the last
conversation entry on load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_TESTS = '''
import pytest
import pytest_asyncio

from nonoka.store.memory import MemoryCheckpointStore, MemoryDatabase
from nonoka.testing.conformance import CheckpointStoreSuite, SessionLeasesSuite

BROKEN = {broken}


class TheirStore(MemoryCheckpointStore):
    async def load_session(self, session_id):
        state = await super().load_session(session_id)
        if BROKEN and state is not None and state.memory_entries:
            state = state.model_copy(update={{"memory_entries": state.memory_entries[:-1]}})
        return state


class Harness:
    def __init__(self):
        self.database = MemoryDatabase()
        self.store = TheirStore(self.database)

    async def reopen(self):
        return TheirStore(self.database)


@pytest_asyncio.fixture
async def engine():
    harness = Harness()
    yield harness
    await harness.store.close()


class TestTheirStore(CheckpointStoreSuite, SessionLeasesSuite):
    pass
'''

CONFIG = """[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
"""


def run_suite(project: Path, *, broken: bool) -> subprocess.CompletedProcess[str]:
    """Run the project's tests; a broken store stops at its first failure."""
    project.mkdir()
    (project / "pytest.ini").write_text(CONFIG)
    (project / "test_their_store.py").write_text(PROJECT_TESTS.format(broken=broken))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(project), "-c", str(project / "pytest.ini"), *(["-x"] if broken else []),
         str(project)],
        cwd=project, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("broken", [False, True], ids=["faithful", "broken"])
def test_a_third_party_store_runs_the_suite(tmp_path: Path, broken: bool) -> None:
    done = run_suite(tmp_path / "their-project", broken=broken)
    summary = done.stdout.strip().splitlines()[-1]
    if broken:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "failed" in summary and "test_every_field_round_trips" in done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert " passed" in summary and "skipped" not in summary, summary
