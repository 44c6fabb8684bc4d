"""A warm bridge keeps the project's database open between requests; what another
program does to the file meanwhile is seen by the next request."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from nonoka.faults import TRACE_ENV
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.support.bridge import BRIDGE, Bridge, chat, one, read_events_until, user
from tests.support.stores import load_stored


def _ask(proc: subprocess.Popen[bytes], project: Path, prompt: str) -> str:
    assert proc.stdin is not None
    line = {"cwd": str(project), **chat([user(prompt)], new_session=True)}
    proc.stdin.write(json.dumps(line).encode() + b"\n")
    proc.stdin.flush()
    events = read_events_until(proc, "finish")
    assert one(events, "finish")["finish_reason"] == "stop", events
    return str(one(events, "session_init")["session_id"])


def _idle(trace: Path, times: int, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the bridge has reached ``bridge.idle`` ``times`` times: its request is
    answered and the stores it used are kept (the trace file is the event)."""
    deadline = time.monotonic() + 120  # a hung bridge fails the test, however slow the machine
    while (trace.read_text().split().count("bridge.idle") if trace.exists() else 0) < times:
        assert proc.poll() is None, "the bridge exited"
        assert time.monotonic() < deadline, "the bridge never went idle"
        time.sleep(0.01)


def _prompts(db: Path, session_id: str) -> list[str]:
    state = load_stored(db, session_id)
    return [] if state is None else [e.content for e in state.memory_entries
                                     if e.role == "user"]


def test_a_database_moved_away_between_two_requests_is_not_written_behind_its_back(
        tmp_path: Path) -> None:
    scripted: list[Step] = [text("first answer"), text("second answer")]
    trace = tmp_path / "trace"
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedOpenAIServer(scripted) as server:
        bridge = Bridge(project, server)
        proc = subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=project,
                                env={**bridge.env, TRACE_ENV: str(trace)})
        try:
            first = _ask(proc, project, "first question")
            _idle(trace, 1, proc)  # the database is open in the waiting bridge now
            moved = tmp_path / "moved.db"
            for suffix in ("", "-wal", "-shm"):  # as a person backing it up would
                source = bridge.db.parent / f"sessions.db{suffix}"
                if source.exists():
                    os.rename(source, tmp_path / f"moved.db{suffix}")
            second = _ask(proc, project, "second question")
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
        assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    assert _prompts(bridge.db, second) == ["second question"]
    assert _prompts(bridge.db, first) == []
    assert _prompts(moved, first) == ["first question"]
    assert _prompts(moved, second) == []
    assert not (bridge.db.parent / "sessions.db-wal").exists()  # closed as it left
