"""A real process is killed with SIGKILL mid-turn; a fresh process resumes the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nonoka.state.entries import dangling_tool_calls
from nonoka.state.session_state import SessionState, SessionStatus
from tests.support.stores import load_stored

ROOT = Path(__file__).resolve().parents[2]
WORKER = [sys.executable, "-m", "tests.runtime.crash_worker"]


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "sessions.db"
        self.markers = tmp_path / "markers"
        self.markers.mkdir()

    def job(self, **fields: Any) -> str:
        return json.dumps({"db": str(self.db), "markers": str(self.markers), "session_id": "s1",
                           **fields})

    def run(self, **fields: Any) -> dict[str, Any]:
        done = subprocess.run([*WORKER, self.job(**fields)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def run_and_kill(self, *, when_logged: tuple[str, str], **fields: Any) -> None:
        """Start a worker, wait until a tool logs its start, then SIGKILL the process."""
        proc = subprocess.Popen([*WORKER, self.job(**fields)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        log, key = self.markers / f"{when_logged[0]}.log", when_logged[1]
        deadline = time.monotonic() + 30
        while key not in self.started(log.stem):
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "worker never reached the kill point"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL

    def started(self, tool: str) -> list[str]:
        log = self.markers / f"{tool}.log"
        return log.read_text().split() if log.exists() else []

    def state(self) -> SessionState:
        state = load_stored(self.db, "s1")
        assert state is not None
        return state


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_dangling_calls_run_again_after_sigkill(harness: Harness) -> None:
    harness.run_and_kill(
        mode="react", prompt="look up k1 and k2", hang_on="lookup", when_logged=("lookup", "k1"),
        script=[{"calls": [["lookup", {"key": "k1"}, "c1"], ["lookup", {"key": "k2"}, "c2"]]}])
    crashed = harness.state()
    _, dangling = dangling_tool_calls(crashed.memory_entries)
    assert [c.id for c in dangling] == ["c1", "c2"], "the kill point was not mid-turn"
    assert crashed.runtime_state.usage.model_turns == 1

    result = harness.run(mode="resume", script=[{"error": "model endpoint down"}])
    assert not result["success"] and "model endpoint down" in result["error"]
    failed = harness.state()
    assert dangling_tool_calls(failed.memory_entries)[1] == [], "failed resume left dangling calls"

    result = harness.run(mode="react", prompt="and?", script=[{"text": "k1 and k2 found"}])
    assert result["success"] and result["output"] == "k1 and k2 found"
    assert harness.started("lookup") == ["k1", "k1", "k2"]  # c1 re-ran, c2 ran once
    final = harness.state()
    roles = [(e.role, e.tool_call_id) for e in final.memory_entries]
    assert roles == [("user", None), ("assistant", None), ("tool", "c1"), ("tool", "c2"),
                     ("user", None), ("assistant", None)], "entries lost or duplicated"
    assert final.runtime_state.usage.model_turns == 2, "budgets did not carry over"
    assert final.runtime_state.usage.tool_calls == 3
    assert final.status == SessionStatus.COMPLETED


def test_a_started_non_idempotent_call_is_not_silently_rerun(harness: Harness) -> None:
    harness.run_and_kill(
        mode="react", prompt="mail ana", hang_on="send_email", when_logged=("send_email", "ana"),
        script=[{"calls": [["send_email", {"to": "ana"}, "m1"]]}])
    result = harness.run(mode="resume", script=[{"text": "I am not sure the mail went out"}])
    assert result["success"] and result["warnings"] == ["tool_outcome_unknown"]
    assert harness.started("send_email") == ["ana"], "a non-idempotent call ran twice"
    tool_entry = harness.state().memory_entries[2]
    assert tool_entry.tool_call_id == "m1" and tool_entry.content.startswith("outcome unknown")


def test_plan_resume_skips_completed_steps_after_sigkill(harness: Harness) -> None:
    plan = [{"id": "a", "tool": "lookup", "args": {"key": "a"}},
            {"id": "b", "tool": "lookup", "args": {"key": "b"}},
            {"id": "c", "tool": "lookup", "args": {"key": "c"}, "depends_on": ["a", "b"]},
            {"id": "d", "tool": "lookup", "args": {"key": "d"}, "depends_on": ["c"]}]
    harness.run_and_kill(mode="plan", plan=plan, hang_on="lookup:c", when_logged=("lookup", "c"),
                         script=[])
    crashed = harness.state()
    assert set(crashed.completed_steps) == {"a", "b"}
    assert crashed.step_statuses["c"] == "running"

    result = harness.run(mode="resume", script=[])
    assert result["success"], result["error"]
    assert sorted(harness.started("lookup")) == ["a", "b", "c", "c", "d"], (
        "completed steps ran again, or the interrupted step did not")
    assert result["output"] == {k: f"value-{k}" for k in "abcd"}
    again = harness.run(mode="resume", script=[])
    assert again["success"] and len(harness.started("lookup")) == 5, (
        "a completed session must return at once")


def test_plan_resume_after_sigkill_in_a_later_layer(harness: Harness) -> None:
    plan = [{"id": "a", "tool": "lookup", "args": {"key": "a"}},
            {"id": "b", "tool": "lookup", "args": {"key": "b"}},
            {"id": "mail", "tool": "send_email", "args": {"to": "team"}, "depends_on": ["a", "b"]},
            {"id": "c", "tool": "lookup", "args": {"key": "c"}, "depends_on": ["mail"]}]
    harness.run_and_kill(mode="plan", plan=plan, hang_on="send_email",
                         when_logged=("send_email", "team"), script=[])
    crashed = harness.state()
    assert set(crashed.completed_steps) == {"a", "b"}
    assert crashed.current_plan is not None

    result = harness.run(mode="resume", script=[])
    assert sorted(harness.started("lookup")) == ["a", "b"], "completed steps ran again"
    assert not result["success"] and "not idempotent" in result["error"]
    assert result["warnings"] == ["tool_outcome_unknown"]
    assert harness.started("send_email") == ["team"]


def test_approval_decided_in_another_process_and_counters_survive(harness: Harness) -> None:
    first = harness.run(mode="react", prompt="clean up",
                        script=[{"calls": [["delete_file", {"path": "a"}, "d1"]]}])
    assert first["status"] == "paused" and harness.started("delete_file") == []
    harness.run(mode="approve", call_id="d1", approved=True, script=[])
    second = harness.run(mode="resume",
                         script=[{"calls": [["delete_file", {"path": "b"}, "d2"]]}])
    assert second["status"] == "paused" and harness.started("delete_file") == ["a"]
    harness.run(mode="approve", call_id="d2", approved=False, script=[])
    third = harness.run(mode="resume", script=[{"text": "kept b"}])
    assert third["success"] and harness.started("delete_file") == ["a"]
    counters = harness.state().extension_state["approval"]["counters"]
    assert counters == {"requested": 2, "approved": 1, "denied": 1}, (
        "extension counters were reset by a process restart")
