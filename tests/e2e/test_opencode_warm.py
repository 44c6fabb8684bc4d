"""The REAL OpenCode through nonoka's warm bridges: a tool loop's steps are served by fewer
bridge processes than there are steps, and a SIGKILL of the warm bridge between two steps
loses nothing (the next step starts a new bridge, the conversation goes on, and every
entry is stored).

The kill happens while OpenCode runs a ``bash`` tool call that reads a FIFO: the test
opens the FIFO for writing, which returns once the tool is reading it (so the step before
has finished and OpenCode waits for its tool), kills the project's bridge processes, then
lets the tool finish.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.e2e.test_opencode import OpenCodeProject, opencode_bin

__all__ = ["opencode_bin"]

pytestmark = pytest.mark.slow  # a long scenario with real clients: `-m slow`

STEPS = 6
KILL_AT = 3
"""The tool call during which the warm bridge is killed (0-based)."""


def _script(project: Path) -> Any:
    def step(body: dict[str, Any]) -> Step:
        if not body.get("tools"):
            return text("warm e2e title")
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done >= STEPS:
            return text("LOOP-DONE after every tool call")
        if done == KILL_AT:
            return call("bash", {"command": f"cat {project / 'gate'}",
                                 "description": "wait at the gate"}, id=f"call_{done}")
        (project / f"f{done}.txt").write_text(f"file {done}\n", encoding="utf-8")
        return call("read", {"filePath": str(project / f"f{done}.txt")}, id=f"call_{done}")
    return step


def _bridges(project: Path) -> list[int]:
    """The ``nonoka bridge`` processes running in ``project`` (this test's only)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if argv[1:4] == [b"-m", b"nonoka", b"bridge"] and cwd == str(project):
            found.append(int(entry.name))
    return found


def test_warm_bridges_serve_the_loop_and_a_kill_between_steps_loses_nothing(
        tmp_path: Path, opencode_bin: Path) -> None:
    with ScriptedOpenAIServer(_script(tmp_path / "project")) as server:
        project = OpenCodeProject(tmp_path, opencode_bin, server)
        assert project.run("git", "init", "-q", ".").returncode == 0
        init = project.init()
        assert init.returncode == 0, init.stderr
        gate = project.path / "gate"
        os.mkfifo(gate)
        killed: list[int] = []

        def kill_between_steps() -> None:
            with gate.open("w") as writer:  # returns once the bash tool reads the gate
                for pid in _bridges(project.path):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                writer.write("open\n")

        gatekeeper = threading.Thread(target=kill_between_steps, daemon=True)
        gatekeeper.start()
        done = project.opencode("Read the files one by one, please.")
        gatekeeper.join(10)
    assert "LOOP-DONE" in done.stdout, project.explain(done)
    assert killed, "no bridge was running while the tool waited"

    chat = project.chat_requests()
    assert len(chat) == STEPS + 1, [r["messages"][-1] for r in chat]
    # The step after the kill carried every tool call and result before it.
    results = [m["tool_call_id"] for m in chat[-1]["messages"] if m["role"] == "tool"]
    assert results == [f"call_{n}" for n in range(STEPS)]

    session_id = project.session_id()
    shown = project.nonoka("sessions", "show", session_id, "--json", "--entries",
                           "--limit", "500")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    roles = [e["role"] for e in detail["entries"] if e["role"] != "system"]
    assert roles == ["user", *["assistant", "tool"] * STEPS, "assistant"], roles
    assert detail["usage"]["tool_calls"] == STEPS
    assert detail["usage"]["model_calls"] == STEPS + 1
    # Fewer processes than steps served the loop; the kill made one of them new.
    processes = {e["data"]["process"] for e in detail["events"] if e["kind"] == "request"}
    assert 2 <= len(processes) < STEPS + 1, processes
    assert any(p.split(":")[1] == str(pid) for p in processes for pid in killed), processes
    print(f"warm e2e: {STEPS + 1} steps served by {len(processes)} bridge processes",
          file=sys.stderr)
