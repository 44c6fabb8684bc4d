"""Every command's main failure, in one voice: one line on stderr, ``nonoka: <what
happened>; <what to do>``, the documented exit code, no traceback and none of click's
``Usage:``/``Error:`` block; with ``--json``, ``{"error": {"code", "message"}}`` on stdout.

Real ``python -m nonoka`` subprocesses in a real project directory, against a real SQLite
file and the scripted OpenAI-compatible server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from nonoka.store.lease_terms import lease_host
from nonoka.store.project import open_project_stores
from nonoka.testing import text
from nonoka.testing.server import HttpError
from tests.cli.conftest import Project
from tests.conftest import ScriptItem

USAGE, FAILED, BUSY = 2, 1, 75


def voiced(done: subprocess.CompletedProcess[str], exit_code: int, code: str,
           *words: str) -> str:
    """Check the voice of a failed command; its one line, without ``nonoka: ``."""
    assert done.returncode == exit_code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert not [line for line in lines if line.startswith(("Usage:", "Error:", "Try "))], \
        done.stderr
    said = [line for line in lines if line.startswith("nonoka: ")]
    assert len(said) == 1, done.stderr
    line = said[0].removeprefix("nonoka: ")
    assert "; " in line, f"no 'what to do' part: {line}"
    for word in words:
        assert word in line, line
    if "--json" in done.args:
        assert json.loads(done.stdout) == {"error": {"code": code, "message": line}}
    return line


FRESH = [
    # (arguments, exit code, --json code, words the line must hold)
    (["bogus"], USAGE, "usage_error", ("no such command 'bogus'", "nonoka --help")),
    (["run"], USAGE, "usage_error", ("MESSAGE", "nonoka run --help")),
    (["run", "--at", "3", "hi"], USAGE, "usage_error", ("--session ID or -c",)),
    (["run", "-c", "--new", "hi"], USAGE, "usage_error", ("only one of",)),
    (["run", "--model", "nowhere:m", "hi", "--json"], USAGE, "model_not_configured",
     ("unknown model provider 'nowhere'", "openai:, deepseek:")),
    (["sessions", "list", "-n", "0", "--json"], USAGE, "usage_error", ("--limit",)),
    (["sessions", "show", "abc", "--json"], FAILED, "no_database", ("nonoka run",)),
    (["sessions", "fork", "abc"], FAILED, "no_database", ("no sessions in",)),
    (["sessions", "search", "x", "--json"], FAILED, "no_database", ("no sessions in",)),
    (["sessions", "export"], USAGE, "usage_error", ("--all",)),
    (["sessions", "import", "missing.jsonl", "--json"], USAGE, "usage_error",
     ("missing.jsonl",)),
    (["sessions", "delete", "abc", "--json"], FAILED, "no_database", ("no sessions in",)),
    (["sessions", "prune", "--older-than", "soon"], USAGE, "usage_error", ("--older-than",)),
    (["db", "check", "--json"], FAILED, "no_database", ("no sessions in",)),
    (["db", "vacuum", "--json"], FAILED, "no_database", ("no sessions in",)),
    (["db", "stats", "--json"], FAILED, "no_database", ("no sessions in",)),
    (["db", "copy", "--to", "copy.db", "--json"], FAILED, "no_database", ("no sessions in",)),
    (["ui"], FAILED, "no_database", ("no sessions in",)),
    (["opencode", "init", "--dir", "notes.txt"], USAGE, "usage_error", ("notes.txt",)),
    (["demo", "--dir", "notes.txt"], USAGE, "usage_error", ("notes.txt",)),
    (["help", "nosuch"], USAGE, "usage_error", ("no help topic 'nosuch'", "models")),
]


@pytest.mark.parametrize(("args", "exit_code", "code", "words"), FRESH,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_failure_in_a_fresh_project(project: Project, args: list[str], exit_code: int,
                                      code: str, words: tuple[str, ...]) -> None:
    voiced(project.nonoka(*args), exit_code, code, *words)


def test_no_model_names_the_commands_own_way_and_the_providers(project: Project) -> None:
    env = {k: v for k, v in project.env.items() if k != "NONOKA_MODEL"}
    line = voiced(project.nonoka("run", "hi", "--json", env=env), USAGE,
                  "model_not_configured", "--model PROVIDER:MODEL", "NONOKA_MODEL",
                  "deepseek:", "llamacpp:")
    assert "in the request" not in line  # the bridge's way, not run's


def seed(project: Project, scripted: list[ScriptItem]) -> str:
    scripted.append(text("first answer"))
    done = project.nonoka("run", "first")
    assert done.returncode == 0, done.stderr
    return project.records()[0].session_id


def test_failures_in_a_project_with_a_session(project: Project,
                                              scripted: list[ScriptItem]) -> None:
    sid = seed(project, scripted)
    voiced(project.nonoka("sessions", "show", "zzzz", "--json"), FAILED, "not_found",
           "no session id starts with 'zzzz'", "sessions list")
    voiced(project.nonoka("run", "--session", "zzzz", "hi", "--json"), FAILED, "not_found")
    voiced(project.nonoka("sessions", "fork", sid[:8], "--at", "99"), USAGE, "usage_error")
    voiced(project.nonoka("run", "--session", sid[:8], "--at", "99", "hi"), USAGE,
           "usage_error")


def test_a_busy_session_exits_75(project: Project, scripted: list[ScriptItem]) -> None:
    sid = seed(project, scripted)

    async def hold() -> None:  # this test process is alive: the lease is a live holder's
        async with open_project_stores(project.path) as stores:
            owner = f"{lease_host()}:{os.getpid()}:test"
            assert await stores.leases.acquire_lease(sid, owner, 600)

    asyncio.run(hold())
    voiced(project.nonoka("run", "--session", sid[:8], "more", "--json"), BUSY,
           "session_busy", "busy")  # and the model is not called: nothing is scripted


def test_a_model_that_refuses_the_key_names_the_providers_variable(
        project: Project, scripted: list[ScriptItem]) -> None:
    scripted.append(HttpError(401, {"error": {"message": "invalid key"}}))
    env = {**project.env, "NONOKA_MODEL": "ollama:llama3", "OLLAMA_API_KEY": "wrong"}
    done = project.nonoka("run", "hi", env=env)
    line = voiced(done, FAILED, "model_error", "HTTP 401", "OLLAMA_API_KEY")
    assert line.startswith("model endpoint "), line  # not "error: ...", a second voice
    scripted.append(HttpError(401, {"error": {"message": "invalid key"}}))
    as_json = project.nonoka("run", "hi", "--json", env=env)
    assert as_json.returncode == FAILED
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == "model_error" and "OLLAMA_API_KEY" in error["message"]


def test_a_provider_without_its_key_sends_nothing(project: Project) -> None:
    for provider, variable in (("deepseek", "DEEPSEEK_API_KEY"),
                               ("openrouter", "OPENROUTER_API_KEY"),
                               ("openai", "OPENAI_API_KEY")):
        env = {k: v for k, v in project.env.items()
               if k not in ("OPENAI_BASE_URL", variable)}
        env["NONOKA_MODEL"] = f"{provider}:some-model"
        voiced(project.nonoka("run", "hi", "--json", env=env), USAGE,
               "model_not_configured", variable, "nothing was sent")
    assert not (project.path / ".nonoka").exists()


def test_every_exit_code_is_documented(project: Project) -> None:
    done = project.nonoka("help", "exit-codes")
    assert done.returncode == 0, done.stderr
    for code in (1, USAGE, BUSY, 130):
        assert f"  {code} " in done.stdout
    assert '{"error": {"code"' in done.stdout


def test_ui_without_its_extra_names_the_extra(project: Project, tmp_path: Path) -> None:
    blocked = tmp_path / "blocked" / "starlette"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not installed here')\n")
    path = os.pathsep.join(filter(None, [str(blocked.parent),
                                         project.env.get("PYTHONPATH", "")]))
    done = project.nonoka("ui", env={**project.env, "PYTHONPATH": path})
    voiced(done, FAILED, "missing_extra", "the ui extra", "pip install '.[ui]'",
           "nonoka clone")
