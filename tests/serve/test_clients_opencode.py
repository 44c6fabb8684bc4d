"""OpenCode (``opencode run``) with a plain OpenAI-compatible provider
(``@ai-sdk/openai-compatible`` in the project's ``opencode.json``, its ``baseURL`` a
real ``nonoka serve``) runs a 3-step loop with its own ``read`` tool: the strict
upstream asks it to read three files one by one, then answers with what they hold;
``--continue`` runs it again on the same session line.
OpenCode runs offline in a project of its own (HOME and the XDG directories in the
test's directory, updates, model lists, sharing and LSP downloads off), as in
``tests/e2e/test_opencode.py``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.state.messages import ToolCall
from nonoka.testing.server import Reply, ScriptedOpenAIServer, Step
from tests.serve.client_loop import NOTES, call_id, stored_lines
from tests.serve.harness import Served

pytestmark = pytest.mark.slow  # a long scenario with real clients: `-m slow`

OPENCODE_VERSION = "1.18.33"
CONTENT = re.compile(r"[A-Z]+-CONTENT")
FINAL = "LOOP-DONE " + " ".join(f"{name.upper()}-CONTENT" for name in NOTES)


def opencode() -> str:
    found = shutil.which("opencode")
    assert found is not None, f"opencode is not on PATH: install opencode-ai@{OPENCODE_VERSION}"
    version = subprocess.run([found, "--version"], capture_output=True, text=True,
                             timeout=60, check=False).stdout.strip()
    assert version == OPENCODE_VERSION, f"opencode {version} found, {OPENCODE_VERSION} wanted"
    return found


def note_file(project: Path, name: str) -> Path:
    return project / "notes" / f"{name}.txt"


def read_loop(project: Path) -> Any:
    """The model: ``read`` each note in turn (thinking first), then the contents it
    was sent back; a request without tools (OpenCode's title) gets a title."""
    def step(body: dict[str, Any]) -> Step:
        if not body.get("tools"):
            return Reply(text="Reading notes")
        messages = body["messages"]
        asked = max(n for n, m in enumerate(messages) if m.get("role") == "user")
        results = [str(m.get("content")) for m in messages[asked:] if m.get("role") == "tool"]
        if len(results) >= len(NOTES):
            found = [m.group(0) for r in results for m in CONTENT.finditer(r)]
            return Reply(text="LOOP-DONE " + " ".join(found))
        n = sum(1 for m in messages if m.get("role") == "tool")
        arguments = json.dumps({"filePath": str(note_file(project, NOTES[len(results)]))})
        return Reply(reasoning=f"thinking about note {n}",
                     tool_calls=(ToolCall(id=call_id(n), name="read", arguments=arguments),))
    return step


@pytest.fixture
def server(project: Path) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(read_loop(project), strict=("reasoning_back",)) as running:
        yield running
    assert not running.failures, running.failures


def opencode_config(base_url: str) -> dict[str, Any]:
    """The project's ``opencode.json``, as docs/serve.md shows it."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"nonoka-serve": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "nonoka serve",
            "options": {"baseURL": base_url, "apiKey": "unused"},
            "models": {"default": {"name": "nonoka serve"}},
        }},
        "model": "nonoka-serve/default",
    }


def offline_env(project: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENCODE", "OPENAI_", "ANTHROPIC_", "NONOKA_", "XDG_"))}
    env.update({
        "PWD": str(project), "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "npm_config_cache": str(Path(tempfile.gettempdir()) / "nonoka-e2e-npm-cache"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1", "NO_COLOR": "1",
    })
    return env


def explain(done: subprocess.CompletedProcess[str], home: Path) -> str:
    logs = sorted((home / ".local" / "share" / "opencode" / "log").glob("*.log"))
    log = logs[-1].read_text(encoding="utf-8", errors="replace")[-4000:] if logs else ""
    return (f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n"
            f"{done.stderr[-3000:]}\n--- opencode log (tail)\n{log}")


def test_opencode_reads_three_files_through_nonoka_serve(
        served: Served, server: ScriptedOpenAIServer, project: Path, tmp_path: Path) -> None:
    """Then ``opencode run --continue`` reads them again: the same line goes on."""
    binary = opencode()
    home = tmp_path / "home"
    home.mkdir()
    for name in NOTES:
        note_file(project, name).parent.mkdir(exist_ok=True)
        note_file(project, name).write_text(f"{name.upper()}-CONTENT\n", encoding="utf-8")
    (project / "opencode.json").write_text(json.dumps(opencode_config(served.url), indent=2),
                                           encoding="utf-8")
    subprocess.run(["git", "init", "-q", "."], cwd=project, check=True)
    questions = ("Read the three notes one by one.", "Read them again.")
    for turn, args in enumerate((questions[:1], ("--continue", questions[1]))):
        done = subprocess.run([binary, "run", *args], cwd=project,
                              env=offline_env(project, home), capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, explain(done, home)
        assert FINAL in done.stdout, explain(done, home)
        assert_upstream(server, turn + 1)
        assert_line(project, questions[:turn + 1])


def assert_upstream(server: ScriptedOpenAIServer, turns: int) -> None:
    """Four chat requests a turn, none refused, each with every call so far (its
    reasoning with it) and every result."""
    chat = [r for r in server.requests if r.get("tools")]
    assert server.rejections == [], [server.requests[i] for i in server.rejections]
    assert len(chat) == (len(NOTES) + 1) * turns, [r["messages"][-1] for r in chat]
    for n, request in enumerate(chat):
        turn, step = divmod(n, len(NOTES) + 1)
        made = turn * len(NOTES) + step
        calls = [m for m in request["messages"] if m.get("tool_calls")]
        assert [(m["tool_calls"][0]["id"], m["reasoning_content"]) for m in calls] == [
            (call_id(k), f"thinking about note {k}") for k in range(made)]
        results = [m for m in request["messages"] if m.get("role") == "tool"]
        assert [CONTENT.findall(m["content"]) for m in results] == [
            [f"{NOTES[k % len(NOTES)].upper()}-CONTENT"] for k in range(made)]
        assert "read" in [t["function"]["name"] for t in request["tools"]]


def assert_line(project: Path, questions: tuple[str, ...]) -> None:
    """One session line holds every turn: the question, each call and its result, the
    answer; OpenCode's title is a session of its own."""
    lines = stored_lines(project)
    loops = [line for line in lines if any(role == "tool" for role, _ in line)]
    assert len(loops) == 1 and len(lines) <= 2, lines
    [line] = loops
    turn_roles = ["user", *["assistant", "tool"] * len(NOTES), "assistant"]
    assert [role for role, _ in line] == ["system", *turn_roles * len(questions)]
    for turn, question in enumerate(questions):
        at = 1 + turn * len(turn_roles)
        assert question in line[at][1]
        for step, name in enumerate(NOTES):
            n = turn * len(NOTES) + step
            assert line[at + 1 + 2 * step][1] == f"{call_id(n)} read " + json.dumps(
                {"filePath": str(note_file(project, name))})
            result = line[at + 2 + 2 * step][1]
            assert result.startswith(f"{call_id(n)} -> ")
            assert CONTENT.findall(result) == [f"{name.upper()}-CONTENT"]
        assert line[at + len(turn_roles) - 1] == ("assistant", FINAL)
