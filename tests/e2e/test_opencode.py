"""End to end with the REAL OpenCode: ``opencode run`` drives nonoka through the TS provider.

``opencode-ai`` is installed from npm (cached under the system temp dir, keyed by version);
a local scripted OpenAI-compatible server stands behind nonoka; ``nonoka opencode init``
sets up a temporary git project; HOME and the XDG dirs point into tmp so the user's own
OpenCode config is never read or touched. Nothing is mocked: OpenCode runs its own ``write``
tool, and each ``opencode run`` starts a ``nonoka bridge`` process that stays warm for the
run's next steps (``tests/e2e/test_opencode_warm.py``).

The script is a function of the request (title request vs chat, and what the chat asks),
because OpenCode's call pattern (title first or in parallel, extra steps) may vary.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer, Step

OPENCODE_VERSION = "1.18.33"
RUN_TIMEOUT = 240
WRITE_ARGS = {"filePath": "", "content": "written by OpenCode's write tool, asked by nonoka\n"}


# -- OpenCode from npm -----------------------------------------------------------------------


@functools.cache
def works(binary: Path) -> bool:
    """``binary`` runs and is OPENCODE_VERSION. Asked once a process per binary: each
    ``--version`` loads all of OpenCode (over a second of CPU), and every module that
    imports ``opencode_bin`` holds its own copy of the session fixture."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == OPENCODE_VERSION


def _find_binary(prefix: Path) -> Path | None:
    """The launcher npm linked, else the platform package's binary (if postinstall did not run)."""
    candidates = [prefix / "node_modules" / ".bin" / "opencode",
                  *sorted(prefix.glob("node_modules/opencode-*/bin/opencode"))]
    return next((c for c in candidates if c.is_file() and works(c)), None)


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    """``opencode`` at OPENCODE_VERSION, installed once per machine and reused between runs."""
    cache = Path(tempfile.gettempdir()) / f"nonoka-e2e-opencode-{OPENCODE_VERSION}"
    found = _find_binary(cache)
    if found is not None:
        return found
    npm = shutil.which("npm")
    assert npm is not None, "npm is not on PATH: install Node.js (>= 20) to run the OpenCode e2e"
    ping = subprocess.run([npm, "ping"], capture_output=True, text=True, timeout=120,
                          check=False)
    if ping.returncode != 0:
        pytest.skip(f"!!! the npm registry is unreachable, so the REAL OpenCode e2e did not run "
                    f"!!! (npm ping: {(ping.stderr or ping.stdout).strip()[-300:]})")
    # Install next to the cache and rename, so an interrupted install is never reused.
    staging = Path(tempfile.mkdtemp(prefix=f"{cache.name}.", dir=cache.parent))
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
             "--loglevel=error", f"opencode-ai@{OPENCODE_VERSION}"],
            capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, f"npm install opencode-ai failed:\n{done.stderr[-3000:]}"
        assert _find_binary(staging) is not None, "opencode-ai installed, but no working binary"
        shutil.rmtree(cache, ignore_errors=True)
        staging.rename(cache)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = _find_binary(cache)
    assert found is not None
    return found


# -- the model behind nonoka -----------------------------------------------------------------


def _is_title(body: dict[str, Any]) -> bool:
    return not body.get("tools")


def _last(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = body.get("messages") or [{}]
    return messages[-1]


def _script(project: Path) -> Any:
    def step(body: dict[str, Any]) -> Step:
        if _is_title(body):
            return text("nonoka e2e title")
        last = _last(body)
        if last.get("role") == "assistant" and "MAXIMUM STEPS" in str(last.get("content")):
            return text("STEP-LIMIT-SUMMARY: the limit was reached after writing loop.txt")
        users = [str(m.get("content") or "") for m in body["messages"] if m["role"] == "user"]
        if any("LOOP-ON" in u for u in users):
            return call("write", {"filePath": str(project / "loop.txt"), "content": "again\n"},
                        id=f"call_loop_{len(body['messages'])}")
        if last.get("role") == "tool":
            return text("DONE-ONE: the file is written.")
        said = str(last.get("content") or "")
        if "CREATE-FILE" in said:
            return call("write", {**WRITE_ARGS, "filePath": str(project / "notes.txt")},
                        id="call_write_1")
        if "TURN-TWO" in said:
            return text("ANSWER-TWO")
        if "TURN-THREE" in said:
            return text("ANSWER-THREE")
        return text(f"unexpected request: {said[:80]}")
    return step


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(_script(tmp_path / "project")) as running:
        yield running


# -- the project and the host ----------------------------------------------------------------


class OpenCodeProject:
    """A git project set up by ``nonoka opencode init``, and OpenCode runs in it."""

    def __init__(self, root: Path, binary: Path, server: ScriptedOpenAIServer) -> None:
        self.path = root / "project"
        self.home = root / "home"
        self.binary = binary
        self.server = server
        self.path.mkdir()
        self.home.mkdir()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENCODE", "OPENAI_", "NONOKA_", "XDG_"))}
        env.update({
            # OpenCode takes its directory from PWD, which a subprocess cwd does not set.
            "PWD": str(self.path),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            # Reuse one npm cache for the packages OpenCode installs into its config dir.
            "npm_config_cache": str(Path(tempfile.gettempdir()) / "nonoka-e2e-npm-cache"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "NONOKA_MODEL": "openai:test-model",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": server.base_url,
            "NONOKA_PROVIDER_DEBUG": "1",
            "NO_COLOR": "1",
        })
        self.env = env

    @property
    def id_file(self) -> Path:
        return self.path / ".nonoka" / "provider-session.id"

    def session_id(self) -> str:
        return self.id_file.read_text(encoding="utf-8").strip()

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=self.path, env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def nonoka(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "nonoka", *args)

    def init(self) -> subprocess.CompletedProcess[str]:
        """``nonoka opencode init`` (through the module until the command is wired in)."""
        from nonoka.cli.commands import cli

        wired = "opencode" in cli.commands
        argv = (["-m", "nonoka", "opencode", "init"] if wired
                else ["-m", "nonoka.cli.opencode_cmd", "init"])
        return self.run(sys.executable, *argv)

    def opencode(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.run(str(self.binary), "run", "--model", "nonoka/default", *args,
                        timeout=RUN_TIMEOUT)
        assert done.returncode == 0, self.explain(done)
        return done

    def explain(self, done: subprocess.CompletedProcess[str]) -> str:
        logs = sorted((self.home / ".local" / "share" / "opencode" / "log").glob("*.log"))
        log = logs[-1].read_text(encoding="utf-8", errors="replace")[-4000:] if logs else ""
        return (f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n"
                f"{done.stderr[-3000:]}\n--- opencode log (tail)\n{log}")

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.server.requests if not _is_title(r)]

    def sessions(self) -> list[dict[str, Any]]:
        done = self.nonoka("sessions", "list", "--all", "--json")
        assert done.returncode == 0, done.stderr
        rows: list[dict[str, Any]] = json.loads(done.stdout)
        return rows

    def show(self, session_id: str) -> dict[str, Any]:
        done = self.nonoka("sessions", "show", session_id, "--json", "--limit", "500")
        assert done.returncode == 0, done.stderr
        detail: dict[str, Any] = json.loads(done.stdout)
        return detail


@pytest.fixture
def project(tmp_path: Path, opencode_bin: Path, server: ScriptedOpenAIServer) -> OpenCodeProject:
    setup = OpenCodeProject(tmp_path, opencode_bin, server)
    git = setup.run("git", "init", "-q", ".")
    assert git.returncode == 0, git.stderr
    return setup


def _purpose(row: dict[str, Any]) -> str:
    return str((row.get("metadata") or {}).get("purpose", "chat"))


def test_opencode_drives_nonoka_across_processes(project: OpenCodeProject) -> None:
    started = time.monotonic()
    init = project.init()
    assert init.returncode == 0, init.stderr
    assert "provider" in init.stdout
    config = json.loads((project.path / "opencode.json").read_text(encoding="utf-8"))
    block = config["provider"]["nonoka"]
    assert block["npm"] == f"file:{project.path / '.nonoka' / 'opencode-provider'}"
    assert block["options"]["command"] == [sys.executable, "-m", "nonoka", "bridge"]
    assert config["model"] == "nonoka/default"
    again = project.init()  # re-running is harmless
    assert again.returncode == 0, again.stderr
    assert "left unchanged" in again.stdout
    assert json.loads((project.path / "opencode.json").read_text(encoding="utf-8")) == config

    # 1) The model asks for OpenCode's write tool; OpenCode writes the file; the result goes
    #    back through a new bridge process; the model answers.
    one = project.opencode("CREATE-FILE notes.txt please")
    assert "DONE-ONE" in one.stdout, project.explain(one)
    notes = project.path / "notes.txt"
    assert notes.read_text(encoding="utf-8") == WRITE_ARGS["content"]
    chat = project.chat_requests()
    assert len(chat) == 2, [r["messages"][-1] for r in chat]
    assert chat[-1]["messages"][-1]["role"] == "tool"
    assert chat[-1]["messages"][-1]["tool_call_id"] == "call_write_1"
    session_id = project.session_id()

    # 2) --continue: the same nonoka session goes on. The earlier turn reaches the model as
    #    the session stored it: the tool call's arguments exactly as the model wrote them
    #    (json.dumps spacing), not as OpenCode re-serialised them on the way back.
    two = project.opencode("--continue", "TURN-TWO")
    assert "ANSWER-TWO" in two.stdout, project.explain(two)
    assert project.session_id() == session_id
    request = project.chat_requests()[-1]["messages"]
    written = json.dumps({**WRITE_ARGS, "filePath": str(notes)})
    calls = [c for m in request for c in m.get("tool_calls") or []]
    assert [c["function"]["arguments"] for c in calls] == [written]
    roles = [m["role"] for m in request if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant", "user"], roles
    assert request[-1]["content"] == "TURN-TWO"
    events = project.show(session_id)["events"]
    sessions_seen = [e["data"] for e in events if e["kind"] == "session"]
    assert sessions_seen[-1] == {"new": False, "recovery_reason": None}

    # 3) The id file is lost: OpenCode names its own session on every step (the
    #    x-session-id header, and promptCacheKey with setCacheKey), which finds the nonoka
    #    session at once: nothing to recover. (The id file and the conversation key are
    #    the fallback for hosts that name no session: tests/provider, test_provider_bridge.)
    project.id_file.unlink()
    three = project.opencode("--continue", "TURN-THREE")
    assert "ANSWER-THREE" in three.stdout, project.explain(three)
    assert project.session_id() == session_id
    detail = project.show(session_id)
    recoveries = [e["data"] for e in detail["events"] if e["kind"] == "session"
                  and e["data"].get("recovery_reason")]
    assert recoveries == []

    # 4) The title request ran in its own session; the chat session holds the turns and usage.
    rows = project.sessions()
    chats = [r for r in rows if _purpose(r) == "chat"]
    titles = [r for r in rows if _purpose(r) == "title"]
    assert [r["session_id"] for r in chats] == [session_id], rows
    assert titles, "OpenCode's title request left no title session"
    assert session_id not in {r["session_id"] for r in titles}
    chat_row = chats[0]
    assert chat_row["turn_count"] >= 3
    assert chat_row["input_tokens"] > 0
    assert chat_row["output_tokens"] > 0
    assert chat_row["metadata"]["conversation_key"]
    purposes = {e["data"].get("purpose") for e in detail["events"] if e["kind"] == "request"}
    assert purposes == {"chat"}
    model_calls = [e for e in detail["events"] if e["kind"] == "model_call"]
    assert len(model_calls) == 4  # write call, answer, turn two, turn three
    # Turn one's tool results went to the warm bridge of its first step, which sent them
    # early as a new process would (the model works while the session loads); the prompt
    # of turn two, in a new OpenCode process, left before the runtime loaded; turn three
    # sent no session id, so it was not guessed.
    early = [e["data"]["outcome"] for e in detail["events"] if e["kind"] == "early_request"]
    assert early == ["used", "used"], early
    print(f"OpenCode e2e: 3 turns in {time.monotonic() - started:.1f} s")


def test_an_agents_step_limit_ends_with_the_models_answer(project: OpenCodeProject) -> None:
    # OpenCode's last step under an agent's ``steps`` limit ends the history with its own
    # assistant message ("CRITICAL - MAXIMUM STEPS REACHED ... Respond with text only."):
    # the model answers it, and OpenCode prints that answer, as it does directly.
    init = project.init()
    assert init.returncode == 0, init.stderr
    config_file = project.path / "opencode.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["agent"] = {"build": {"steps": 3}}
    config_file.write_text(json.dumps(config), encoding="utf-8")
    done = project.opencode("LOOP-ON: keep writing loop.txt")
    assert "STEP-LIMIT-SUMMARY" in done.stdout, project.explain(done)
    chat = project.chat_requests()
    last = chat[-1]["messages"][-1]
    assert last["role"] == "assistant" and "MAXIMUM STEPS" in last["content"]
    assert [m["role"] for m in chat[-1]["messages"]][-2] == "tool"
    session_id = project.session_id()
    stored = project.show(session_id)
    calls = [e for e in stored["events"] if e["kind"] == "model_call"]
    assert len(calls) == len(chat)
