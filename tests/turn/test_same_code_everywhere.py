"""One error, one code, whichever front end meets it.

The same stored condition is met through a real ``nonoka bridge`` process (the code in
its ``error`` event) and through ``nonoka run`` (the code in the session's timeline, the
message on stderr), and through the bridge both when the stores are opened and when a
session is loaded: every path names it alike.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nonoka.store.lease_terms import new_lease_owner
from nonoka.store.project import open_project_stores
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.support.bridge import Bridge, assistant, chat, one, user


@pytest.fixture
def project(tmp_path: Path, server: ScriptedOpenAIServer) -> Project:
    path = tmp_path / "project"
    path.mkdir()
    return Project(path, server)


@pytest.fixture
def bridge(project: Project, server: ScriptedOpenAIServer) -> Bridge:
    return Bridge(project.path, server)


@pytest.fixture
def seeded(project: Project, scripted: list[ScriptItem]) -> tuple[str, list[dict[str, Any]]]:
    """A session stored by ``nonoka run``, and the history a host would continue it with."""
    scripted.append(text("stored answer"))
    done = project.nonoka("run", "keep me", "--json")
    assert done.returncode == 0, done.stderr
    sid = json.loads(done.stdout)["session_id"]
    return sid, [user("keep me"), assistant("stored answer"), user("next")]


def bridge_error(bridge: Bridge, request: dict[str, Any]) -> dict[str, Any]:
    """The ``error`` event of one request through a real bridge process."""
    events, stderr = bridge.run_lines(
        json.dumps({"cwd": str(bridge.project), **request}).encode() + b"\n")
    assert "Traceback" not in stderr, stderr
    assert events[-1]["type"] == "finish" and events[-1]["finish_reason"] == "error", events
    return one(events, "error")


def masked(message: str) -> str:
    return re.sub(r"\d+\.\d+ s", "N s", message)


def run_error(project: Project, sid: str, exit_code: int = 1) -> tuple[dict[str, Any], str]:
    """The last ``error`` in ``sid``'s timeline after ``nonoka run --session``, and stderr
    (``exit_code``: 75 for an error worth retrying later)."""
    done = project.nonoka("run", "--session", sid, "next")
    assert done.returncode == exit_code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [e.data for e in project.events(sid) if e.kind == "error"]
    assert errors, "nonoka run logged no error"
    return errors[-1], done.stderr


def test_a_session_from_a_newer_nonoka_is_a_store_error_on_every_path(
        project: Project, bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]]) -> None:
    sid, history = seeded
    with sqlite3.connect(bridge.db) as db:
        db.execute("UPDATE checkpoints SET state_json = json_set(state_json, "
                   "'$.schema_version', 99) WHERE session_id = ?", (sid,))
    db.close()
    sent = bridge_error(bridge, chat(history, session_id=sid))
    logged, stderr = run_error(project, sid)
    assert sent["code"] == logged["code"] == "store_error"
    assert sent["message"] == logged["message"]
    assert "Upgrade nonoka" in sent["message"] and "Upgrade nonoka" in stderr
    assert sent["retryable"] is False

    # The same error for the whole database, met when the bridge opens the stores.
    with sqlite3.connect(bridge.db) as db:
        db.execute("INSERT INTO nonoka_migrations (name, applied_at) VALUES ('m999_x', 0)")
    db.close()
    opened = bridge_error(bridge, chat(history, session_id=sid))
    assert opened["code"] == "store_error" and "newer nonoka" in opened["message"]


def test_a_busy_session_is_session_busy_on_every_path(
        project: Project, bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]]) -> None:
    sid, history = seeded

    async def hold() -> None:  # held by this (live) process, for ten minutes
        async with open_project_stores(project.path) as stores:
            assert await stores.leases.acquire_lease(sid, new_lease_owner(), 600)

    asyncio.run(hold())
    sent = bridge_error(bridge, chat(history, session_id=sid))
    logged, stderr = run_error(project, sid, exit_code=75)
    assert sent["code"] == logged["code"] == "session_busy"
    assert sent["retryable"] is True
    assert masked(sent["message"]) == masked(logged["message"])  # the lease's time left
    assert masked(sent["message"]) in masked(stderr)
    bridge_logged = [e.data for e in project.events(sid) if e.kind == "error"]
    assert [e["code"] for e in bridge_logged] == ["session_busy", "session_busy"]
