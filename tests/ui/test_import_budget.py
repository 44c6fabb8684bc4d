"""The per-turn commands never load the web ui or its libraries.

``nonoka bridge`` runs once per model step and ``nonoka run`` once per turn; the ui's
web stack (starlette, uvicorn, jinja2) and the ``nonoka.ui`` package must stay out of
both, even though ``nonoka run`` goes through the click group that lists ``ui``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.bridge.test_import_budget import imported_modules
from tests.support.bridge import Bridge, chat, user

UI_MODULES = ("nonoka.ui", "starlette", "uvicorn", "httptools", "jinja2", "markupsafe",
              "anyio", "playwright")


def sneaked(modules: set[str]) -> list[str]:
    return sorted(m for m in modules
                  if any(m == name or m.startswith(name + ".") for name in UI_MODULES))


def test_a_bridge_turn_loads_nothing_of_the_ui(tmp_path: Path, server: ScriptedOpenAIServer,
                                               scripted: list[Step]) -> None:
    bridge = Bridge(tmp_path, server)
    scripted.append(text("hello"))
    request = json.dumps({"cwd": str(tmp_path), **chat([user("hi")])}).encode() + b"\n"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "nonoka", "bridge"],
                          input=request, capture_output=True, cwd=tmp_path, env=bridge.env,
                          timeout=60, check=False)
    assert b'"finish_reason":"stop"' in done.stdout, done.stdout + done.stderr
    modules = imported_modules(done.stderr.decode())
    assert "nonoka.bridge.handler" in modules, "the importtime output was not parsed"
    assert sneaked(modules) == []


def test_nonoka_run_loads_nothing_of_the_ui(tmp_path: Path, server: ScriptedOpenAIServer,
                                            scripted: list[Step]) -> None:
    env = {**Bridge(tmp_path, server).env, "NONOKA_DATABASE_URL": ""}
    scripted.append(text("hello"))
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "nonoka", "run", "hi"],
                          capture_output=True, cwd=tmp_path, env=env, timeout=60,
                          check=False, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hello" in done.stdout
    modules = imported_modules(done.stderr)
    assert "nonoka.cli.ui_cmd" in modules, "the ui command is registered (and stays small)"
    assert sneaked(modules) == []
