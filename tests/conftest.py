"""Fixtures shared across test folders: the scripted model server, a project directory, a
bridge spawner in it, and a project with one stored session.

A folder's own ``conftest.py`` may override ``project`` with a richer one (``tests/cli``).
The helpers these build on live in ``tests/support/``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.support import reaper
from tests.support.bridge import Bridge, first_turn
from tests.support.rewrite_ahead import rewrite_ahead
from tests.support.scheduling import GroupedLoad, work_order

reaper.install()
# pytest keeps each test module's rewritten asserts in __pycache__ as bytecode is kept,
# unless bytecode writing is off (PYTHONDONTWRITEBYTECODE): then every worker rewrites
# every module again on every run, ~11 s of CPU each. This process writes them; the
# processes the tests start still inherit the environment's choice.
sys.dont_write_bytecode = False
# A shell without job control starts a command put in the background (`pytest ... &`) with
# SIGINT ignored, and every process under it inherits that: CPython then leaves SIGINT
# ignored, and the tests that press Ctrl-C on a process they start (a stuck tool, a
# bridge starting) would wait for an exit that never comes. They stand for a person at a
# terminal, so the processes here take SIGINT as a terminal's foreground job does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ScriptItem: TypeAlias = "Step | Callable[[dict[str, Any]], Step]"
"""A step, or a function from the request body to a step (called when the request comes)."""


@pytest.fixture
def scripted() -> list[ScriptItem]:
    """The scripted model's answers; tests append steps before running."""
    return []


@pytest.fixture
def server(scripted: list[ScriptItem]) -> Iterator[ScriptedOpenAIServer]:
    """A local OpenAI-compatible server that answers from ``scripted``, in order."""

    def next_step(body: dict[str, Any]) -> Step:
        if not scripted:
            raise AssertionError("the model was called more often than scripted")
        step = scripted.pop(0)
        return step(body) if callable(step) else step

    with ScriptedOpenAIServer(next_step) as running:
        yield running
    assert not running.failures, running.failures


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project directory (its ``.nonoka/`` is created by the first turn)."""
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def bridge(project: Path, server: ScriptedOpenAIServer) -> Bridge:
    """Spawns real bridge processes in ``project``, answered by ``server``."""
    return Bridge(project, server)


@pytest.fixture
def seeded(bridge: Bridge, scripted: list[ScriptItem]) -> str:
    """A project with one stored session, so bad input has something to leave alone."""
    return str(first_turn(bridge, scripted)[0])


@pytest.fixture(autouse=True)
def _name_the_test(request: pytest.FixtureRequest) -> None:
    """Which test the processes started now belong to (``tests/support/reaper.py``)."""
    reaper.current_test = request.node.nodeid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that left a process running fails the run, named (``reaper``). Under
    pytest-xdist a worker hands its list to the controller (``pytest_testnodedown``)."""
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["nonoka_left_running"] = list(reaper.left_running)
        return
    if reaper.left_running:
        lines = "\n".join(f"  {test}: {command}" for test, command in reaper.left_running)
        print(f"\nprocesses left running by tests (killed when collected):\n{lines}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class _WorkersLeftRunning:
    """Under pytest-xdist: each worker's processes left running, kept for the controller's
    session end."""

    @staticmethod
    def pytest_testnodedown(node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        reaper.left_running.extend(tuple(entry) for entry in
                                   output.get("nonoka_left_running", []))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> GroupedLoad | None:
    """``-n N`` schedules with ``tests/support/scheduling.py`` (``--dist`` other than
    ``load`` is left to pytest-xdist)."""
    return GroupedLoad(config, log) if config.getvalue("dist") == "load" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long end-to-end tests first (a stable sort: a module's tests stay together)."""
    items.sort(key=lambda item: work_order(item.nodeid))


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkersLeftRunning())
        if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
            rewrite_ahead(config, Path(__file__).parent)  # before the workers start
