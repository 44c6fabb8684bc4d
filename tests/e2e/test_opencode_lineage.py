"""The REAL OpenCode rewriting its history: auto-compaction, a fork, a revert, a rollback.

Same set-up as ``test_opencode.py`` (OpenCode from npm, a scripted model behind nonoka, a
temporary git project with HOME and the XDG dirs in tmp). Each test checks both what nonoka
stored (``sessions list/show --json``) and what the model received, so a conversation that
split, or a model that saw the wrong history, fails here.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.e2e.test_opencode import OpenCodeProject, opencode_bin

__all__ = ["opencode_bin"]  # the session-scoped fixture, shared with test_opencode.py

SUMMARY = "SUMMARY-OF-WORK"
SPLIT_WARNINGS = {"session_mismatch_starting_new", "session_id_missing_starting_fresh",
                  "session_not_found_starting_new"}


def _system(body: dict[str, Any]) -> str:
    return " ".join(str(m.get("content")) for m in body.get("messages") or []
                    if m.get("role") == "system")


def _is_compaction(body: dict[str, Any]) -> bool:
    return "context summarization agent" in _system(body)


def _step(body: dict[str, Any]) -> Step:
    """Answers by what is asked: a summary, a title, or ``ANSWER-<first word>``.

    A message containing ``BIG`` is answered with a large prompt-token count, so OpenCode
    sees its context nearly full and compacts on its own.
    """
    if _is_compaction(body):
        return text(SUMMARY)
    if not body.get("tools"):
        return text("lineage e2e title")
    said = str((body.get("messages") or [{}])[-1].get("content") or "")
    word = said.split()[0] if said.split() else "?"
    return text(f"ANSWER-{word}", input_tokens=5000 if "BIG" in said else 10)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(_step) as running:
        yield running


@pytest.fixture
def project(tmp_path: Path, opencode_bin: Path,
            server: ScriptedOpenAIServer) -> OpenCodeProject:
    setup = OpenCodeProject(tmp_path, opencode_bin, server)
    assert setup.run("git", "init", "-q", ".").returncode == 0
    init = setup.init()
    assert init.returncode == 0, init.stderr
    return setup


def _said(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content") or "")) for m in body["messages"]
            if m["role"] != "system"]


def _chat_requests(server: ScriptedOpenAIServer) -> list[list[tuple[str, str]]]:
    return [_said(r) for r in server.requests if r.get("tools")]


def _purpose(row: dict[str, Any]) -> str:
    return str((row.get("metadata") or {}).get("purpose", "chat"))


def _chats(project: OpenCodeProject) -> list[dict[str, Any]]:
    return [r for r in project.sessions() if _purpose(r) == "chat"]


def _no_split(project: OpenCodeProject, session_id: str) -> None:
    events = project.show(session_id)["events"]
    codes = {e["data"].get("code") for e in events if e["kind"] == "warning"}
    assert not codes & SPLIT_WARNINGS, codes


def test_auto_compaction_stays_in_the_chat_session(project: OpenCodeProject) -> None:
    config_file = project.path / "opencode.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["provider"]["nonoka"]["models"] = {
        "default": {"name": "nonoka", "limit": {"context": 2000, "output": 200}}}
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    started = time.monotonic()

    project.opencode("TURN-ONE")
    chat_id = project.session_id()
    big = project.opencode("--continue", "TURN-TWO-BIG")  # the context is now "full"
    assert SUMMARY in big.stdout, project.explain(big)
    three = project.opencode("--continue", "TURN-THREE")
    assert "ANSWER-TURN-THREE" in three.stdout, project.explain(three)

    compactions = [r for r in project.server.requests if _is_compaction(r)]
    assert len(compactions) == 1
    assert _said(compactions[0])[0][1].startswith("Here is the conversation so far:")
    # The model continues from OpenCode's summary, as OpenCode intends.
    last = _chat_requests(project.server)[-1]
    assert last[:2] == [("user", "What did we do so far?"), ("assistant", SUMMARY)]
    assert last[-1] == ("user", "TURN-THREE")

    # nonoka: one chat session for the whole conversation; the summary recorded against it.
    assert project.session_id() == chat_id
    chats = _chats(project)
    assert [r["session_id"] for r in chats] == [chat_id], chats
    assert chats[0]["turn_count"] >= 4  # one, two, OpenCode's "continue" after compacting, three
    summaries = [r for r in project.sessions() if _purpose(r) == "compaction"]
    assert [r["metadata"].get("compaction_of") for r in summaries] == [chat_id]
    _no_split(project, chat_id)
    print(f"auto-compaction e2e: {time.monotonic() - started:.1f} s")


def test_run_session_fork_branches_and_the_original_goes_on(project: OpenCodeProject) -> None:
    started = time.monotonic()
    project.opencode("TURN-ONE")
    root = project.session_id()
    listed = project.run(str(project.binary), "session", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    opencode_session = json.loads(listed.stdout)[0]["id"]

    fork = project.opencode("--session", opencode_session, "--fork", "TURN-TWO")
    assert "ANSWER-TURN-TWO" in fork.stdout, project.explain(fork)
    original = project.opencode("--session", opencode_session, "TURN-THREE")
    assert "ANSWER-TURN-THREE" in original.stdout, project.explain(original)

    # Each OpenCode session's own history reached the model: the fork's turn is not in the
    # original's, and nothing was seen twice.
    requests = _chat_requests(project.server)
    opening = [("user", "TURN-ONE"), ("assistant", "ANSWER-TURN-ONE")]
    assert requests[-2] == [*opening, ("user", "TURN-TWO")]
    assert requests[-1] == [*opening, ("user", "TURN-THREE")]

    # nonoka: one conversation, branched where the two diverged; the parent is kept whole.
    chats = {r["session_id"]: r for r in _chats(project)}
    assert root in chats
    branches = [r for r in chats.values() if r["session_id"] != root]
    assert len(branches) == 1, chats
    assert branches[0]["forked_from"] == root
    assert branches[0]["fork_point"] is not None
    assert project.session_id() == branches[0]["session_id"]
    tree = project.nonoka("sessions", "list", "--tree")
    assert tree.returncode == 0, tree.stderr
    assert branches[0]["session_id"][:8] in tree.stdout and root[:8] in tree.stdout
    branched = [e["data"] for e in project.show(branches[0]["session_id"])["events"]
                if e["kind"] == "warning" and e["data"].get("code") == "session_branched"]
    assert branched, "the branch is not explained in sessions show"
    _no_split(project, root)
    print(f"fork e2e: {time.monotonic() - started:.1f} s")


class _Serve:
    """``opencode serve`` on a free loopback port, and JSON calls to it."""

    def __init__(self, project: OpenCodeProject) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        self.base = f"http://127.0.0.1:{port}"
        self.log = (project.path.parent / "serve.log").open("w")
        self.process = subprocess.Popen(
            [str(project.binary), "serve", "--port", str(port), "--hostname", "127.0.0.1"],
            cwd=project.path, env=project.env, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT)
        # A request that arrives while the server still boots may never be answered: ask
        # with a short timeout until one is.
        deadline = time.monotonic() + 90
        while True:
            try:
                self.call("GET", "/session", timeout=5)
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.close()
                    raise
                time.sleep(0.5)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             timeout: float = 120) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read().decode()
        return json.loads(raw) if raw else None

    def say(self, session: str, words: str) -> str:
        model = {"providerID": "nonoka", "modelID": "default"}
        answer = self.call("POST", f"/session/{session}/message",
                           {"parts": [{"type": "text", "text": words}], "model": model})
        return "".join(p.get("text", "") for p in answer["parts"] if p["type"] == "text")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


def test_a_revert_through_the_server_api_branches_without_rolling_back(
        project: OpenCodeProject) -> None:
    started = time.monotonic()
    serve = _Serve(project)
    try:
        session = serve.call("POST", "/session", {})["id"]
        assert serve.say(session, "TURN-ONE") == "ANSWER-TURN-ONE"
        root = project.session_id()
        assert serve.say(session, "TURN-TWO") == "ANSWER-TURN-TWO"
        users = [m["info"]["id"] for m in serve.call("GET", f"/session/{session}/message")
                 if m["info"]["role"] == "user"]
        serve.call("POST", f"/session/{session}/revert", {"messageID": users[1]})
        assert serve.say(session, "TURN-THREE") == "ANSWER-TURN-THREE"
        # Fork at the (new) second user message: the fork holds only the first exchange.
        users = [m["info"]["id"] for m in serve.call("GET", f"/session/{session}/message")
                 if m["info"]["role"] == "user"]
        forked = serve.call("POST", f"/session/{session}/fork", {"messageID": users[1]})["id"]
        assert serve.say(forked, "TURN-FOUR") == "ANSWER-TURN-FOUR"
    finally:
        serve.close()

    requests = _chat_requests(project.server)
    opening = [("user", "TURN-ONE"), ("assistant", "ANSWER-TURN-ONE")]
    assert requests[-2] == [*opening, ("user", "TURN-THREE")]  # the reverted turn is gone
    assert requests[-1] == [*opening, ("user", "TURN-FOUR")]

    chats = {r["session_id"]: r for r in _chats(project)}
    assert root in chats
    # The reverted turn stays stored in the parent; the revert and the fork are branches.
    parent = project.show(root)
    assert parent["session"]["turn_count"] >= 2
    branches = [r for r in chats.values() if r["session_id"] != root]
    assert len(branches) == 2, chats  # the revert, and the fork (a branch of the revert)

    def ancestry(row: dict[str, Any]) -> list[str]:
        line = [row["session_id"]]
        while chats[line[-1]]["forked_from"] is not None:
            line.append(chats[line[-1]]["forked_from"])
        return line

    assert all(ancestry(r)[-1] == root for r in branches), chats  # one lineage
    assert all(r["fork_point"] is not None for r in branches)
    _no_split(project, root)
    # The database never left its private mode; .nonoka/ is out of git (and of snapshots).
    db = project.path / ".nonoka" / "sessions.db"
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    ignored = project.run("git", "check-ignore", "--no-index", ".nonoka/sessions.db")
    assert ignored.stdout.strip() == ".nonoka/sessions.db", ignored.stderr
    print(f"serve revert/fork e2e: {time.monotonic() - started:.1f} s")
