"""The status people read is what the session is doing now.

A real ``nonoka run`` streams from the scripted server (which holds its answer back), and
``sessions list``/``show`` — real subprocesses — and the ui's data layer read the
project meanwhile: ``running`` with the process's pid while it runs, ``interrupted``
once it was killed with SIGKILL, and the last turn's status again after the next turn
repaired the session.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from typing import Any

from nonoka.store.project import open_project_stores
from nonoka.testing import text
from nonoka.testing.server import Delay
from nonoka.ui.data import SessionQuery, UiData
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.support.processes import NONOKA

HELD_BACK = 120.0
"""Seconds the scripted model sits on an answer: the turn runs until the test kills it."""


def listed(project: Project) -> list[dict[str, Any]]:
    done = project.nonoka("sessions", "list", "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def wait_for(project: Project, status: str, process: subprocess.Popen[str],
             timeout: float = 20) -> dict[str, Any]:
    """The first listed row once it shows ``status`` (the process must still run)."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        assert process.poll() is None, "the turn ended before it was seen running"
        rows = listed(project)
        if rows and rows[0]["status"] == status:
            return rows[0]
        seen += [rows[0]["status"]] if rows else []
        time.sleep(0.2)
    raise AssertionError(f"never {status!r}; saw {sorted(set(seen))}")


def start(project: Project, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*NONOKA, "run", *args], cwd=project.path, env=project.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)


def ui_status(project: Project) -> str:
    async def read() -> str:
        async with open_project_stores(project.path) as stores:
            page = await UiData(stores).list_sessions(SessionQuery(limit=5))
            return page.rows[0].status

    return asyncio.run(read())


def test_a_first_turn_runs_dies_and_is_repaired(project: Project,
                                                scripted: list[ScriptItem]) -> None:
    scripted += [Delay(HELD_BACK, "never delivered"), text("recovered")]
    process = start(project, "first")
    try:
        row = wait_for(project, "running", process)
        assert row["holder"] == {"host": socket.gethostname(), "pid": process.pid}
        shown = project.nonoka("sessions", "show", row["session_id"][:8])
        assert f"running (pid {process.pid} on {socket.gethostname()})" in shown.stdout
        assert ui_status(project) == "running"
    finally:
        kill(process)
    [row] = listed(project)
    assert row["status"] == "interrupted" and row["holder"] is None
    shown = project.nonoka("sessions", "show", row["session_id"][:8], "--json")
    assert json.loads(shown.stdout)["session"]["status"] == "interrupted"
    assert ui_status(project) == "interrupted"

    again = project.nonoka("run", "-c", "are you there?")
    assert again.returncode == 0, again.stderr
    [row] = listed(project)
    assert row["status"] == "completed" and row["holder"] is None


def test_a_later_turn_shows_running_not_the_last_finished_one(
        project: Project, scripted: list[ScriptItem]) -> None:
    scripted += [text("first answer"), Delay(HELD_BACK, "never delivered")]
    assert project.nonoka("run", "first").returncode == 0
    assert listed(project)[0]["status"] == "completed"
    process = start(project, "-c", "second")
    try:
        row = wait_for(project, "running", process)
        assert row["holder"]["pid"] == process.pid
    finally:
        kill(process)
    assert listed(project)[0]["status"] == "interrupted"


def test_the_question_of_a_killed_turn_stays_in_the_conversation(
        project: Project, scripted: list[ScriptItem]) -> None:
    """A killed ``nonoka run`` left its question unanswered; the next ``run -c`` sends the
    model that question and the new one (a failed turn's question, by contrast, is
    replaced by its retry: ``test_run_retry.py``)."""
    scripted += [text("first answer"), Delay(HELD_BACK, "never delivered"), text("both")]
    assert project.nonoka("run", "first question").returncode == 0
    process = start(project, "-c", "the question that was killed")
    try:
        wait_for(project, "running", process)
    finally:
        kill(process)
    again = project.nonoka("run", "-c", "and a follow-up")
    assert again.returncode == 0, again.stderr
    sent = [(m["role"], m["content"]) for m in project.server.requests[-1]["messages"]
            if m["role"] != "system"]
    assert sent == [("user", "first question"), ("assistant", "first answer"),
                    ("user", "the question that was killed"), ("user", "and a follow-up")]
