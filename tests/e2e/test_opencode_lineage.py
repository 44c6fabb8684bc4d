"""The REAL OpenCode rewriting its history: auto-compaction, a fork, a revert, a rollback.

Same set-up as ``test_opencode.py`` (OpenCode from npm, a scripted model behind nonoka, a
temporary git project with HOME and the XDG dirs in tmp). Each test checks both what nonoka
stored (``sessions list/show --json``) and what the model received, so a conversation that
split, or a model that saw the wrong history, fails here.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import call, text
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
        said = "".join(p.get("text", "") for p in answer["parts"] if p["type"] == "text")
        assert said, self.explain(answer)  # an empty answer: the step failed
        return said

    def explain(self, answer: Any) -> str:
        self.log.flush()
        log = Path(self.log.name).read_text(encoding="utf-8", errors="replace")[-3000:]
        return f"{json.dumps(answer)[-3000:]}\n--- opencode serve (tail)\n{log}"

    def sessions(self) -> list[dict[str, Any]]:
        """OpenCode's sessions of the project, as ``opencode session list`` lists them."""
        listed: list[dict[str, Any]] = self.call("GET", "/session")
        return listed

    def users(self, session: str) -> list[str]:
        """The ids of a session's user messages, oldest first."""
        return [m["info"]["id"] for m in self.call("GET", f"/session/{session}/message")
                if m["info"]["role"] == "user"]

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


@pytest.mark.slow  # a long scenario: `-m slow`
def test_run_session_fork_branches_and_the_original_goes_on(project: OpenCodeProject) -> None:
    """``opencode run --session <id> --fork`` forks a session, and the original goes on:
    one nonoka conversation, branched where the two diverged. The run attaches to an
    ``opencode serve`` (``--attach``) that holds the session and takes the turns around
    the fork: the CLI's fork, one OpenCode process for every turn. (nonoka judges each
    request by what the database holds, so a warm bridge branches as a cold one does;
    fresh processes finding their session are ``test_opencode.py``'s.)"""
    started = time.monotonic()
    serve = _Serve(project)
    try:
        opencode_session = serve.call("POST", "/session", {})["id"]
        assert serve.say(opencode_session, "TURN-ONE") == "ANSWER-TURN-ONE"
        root = project.session_id()
        assert [s["id"] for s in serve.sessions()] == [opencode_session]

        fork = project.opencode("--attach", serve.base, "--session", opencode_session,
                                "--fork", "TURN-TWO")
        assert "ANSWER-TURN-TWO" in fork.stdout, project.explain(fork)
        assert serve.say(opencode_session, "TURN-THREE") == "ANSWER-TURN-THREE"
        hosts_listed = {s["id"] for s in serve.sessions()}
    finally:
        serve.close()

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
    assert project.session_id() == root  # the last step was the original's
    hosts = {(r.get("metadata") or {}).get("host_session_id") for r in chats.values()}
    assert opencode_session in hosts and len(hosts) == 2, chats
    assert hosts == hosts_listed, (hosts, hosts_listed)  # the fork is OpenCode's new session
    tree = project.nonoka("sessions", "list", "--tree")
    assert tree.returncode == 0, tree.stderr
    assert branches[0]["session_id"][:8] in tree.stdout and root[:8] in tree.stdout
    branched = [e["data"] for e in project.show(branches[0]["session_id"])["events"]
                if e["kind"] == "warning" and e["data"].get("code") == "session_branched"]
    assert branched, "the branch is not explained in sessions show"
    _no_split(project, root)
    print(f"fork e2e: {time.monotonic() - started:.1f} s")


@pytest.mark.slow  # a long scenario: `-m slow`
def test_a_revert_through_the_server_api_branches_without_rolling_back(
        project: OpenCodeProject) -> None:
    started = time.monotonic()
    serve = _Serve(project)
    try:
        session = serve.call("POST", "/session", {})["id"]
        assert serve.say(session, "TURN-ONE") == "ANSWER-TURN-ONE"
        root = project.session_id()
        assert serve.say(session, "TURN-TWO") == "ANSWER-TURN-TWO"
        serve.call("POST", f"/session/{session}/revert",
                   {"messageID": serve.users(session)[1]})
        assert serve.say(session, "TURN-THREE") == "ANSWER-TURN-THREE"
        # Fork at the (new) second user message: the fork holds only the first exchange.
        forked = serve.call("POST", f"/session/{session}/fork",
                            {"messageID": serve.users(session)[1]})["id"]
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


# -- the TUI itself, in tmux -------------------------------------------------------------------


def _tui_step(project_dir: Path) -> Any:
    def step(body: dict[str, Any]) -> Step:
        messages = body.get("messages") or [{}]
        if messages[-1].get("role") == "tool" and body.get("tools"):
            return text("DONE-ONE: the file is written.")
        said = str(messages[-1].get("content") or "")
        if body.get("tools") and "CREATE-FILE" in said:
            return call("write", {"filePath": str(project_dir / "notes.txt"),
                                  "content": "written in the TUI\n"}, id="call_tui_write")
        return _step(body)
    return step


class _Tui:
    """OpenCode's TUI in a detached tmux session: keys in, the screen out."""

    def __init__(self, project: OpenCodeProject) -> None:
        self.name = f"nonoka-e2e-{os.getpid()}-{time.monotonic_ns()}"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in project.env.items()
                       if k != "NONOKA_PROVIDER_DEBUG")  # its stderr would draw on the screen
        command = (f"cd {shlex.quote(str(project.path))} && exec env -i {env} "
                   f"TERM=xterm-256color {shlex.quote(str(project.binary))} "
                   "--model nonoka/default")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "45",
                        command], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=False).stdout

    def wait(self, words: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while words not in self.screen():
            assert time.monotonic() < deadline, f"{words!r} never appeared:\n{self.screen()}"
            time.sleep(0.3)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def say(self, words: str, answer: str) -> None:
        self.keys(*(["BSpace"] * 40))  # /undo puts the undone message back in the prompt
        self.keys("-l", words)
        time.sleep(0.5)
        self.keys("Enter")
        self.wait(answer)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True,
                       check=False)


@contextmanager
def _tui_in(tmp_path: Path, binary: Path) -> Iterator[tuple[OpenCodeProject,
                                                            ScriptedOpenAIServer, _Tui]]:
    """A project set up by ``nonoka opencode init``, answered by ``_tui_step``, with
    OpenCode's TUI open on it in tmux (closed afterwards)."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for the TUI test (apt-get install tmux)")
    with ScriptedOpenAIServer(_tui_step(tmp_path / "project")) as server:
        project = OpenCodeProject(tmp_path, binary, server)
        assert project.run("git", "init", "-q", ".").returncode == 0
        assert project.init().returncode == 0
        tui = _Tui(project)
        try:
            tui.wait("Ask anything")
            time.sleep(1)
            yield project, server, tui
        finally:
            tui.close()


@pytest.mark.slow  # a long scenario: `-m slow`
def test_the_tui_undo_and_compact_in_either_order_stay_one_lineage(
        tmp_path: Path, opencode_bin: Path) -> None:
    """In one TUI: a turn, a tool turn, ``/undo`` of it, a turn, ``/compact``, a turn,
    ``/undo`` of that turn (after the compaction), a new turn. Each undo is a branch of
    the line it left, with its fork point; the compaction stays in its line; the parents
    keep the undone turns; nothing is rewritten in place."""
    started = time.monotonic()
    with _tui_in(tmp_path, opencode_bin) as (project, server, tui):
        tui.say("TURN-ONE", "ANSWER-TURN-ONE")
        root = project.session_id()
        tui.say("CREATE-FILE notes.txt", "DONE-ONE")
        notes = project.path / "notes.txt"
        assert notes.is_file()
        db = project.path / ".nonoka" / "sessions.db"
        stored_before = project.show(root)["session"]["message_count"]
        tui.keys("-l", "/undo")
        time.sleep(1)
        tui.keys("Enter")
        deadline = time.monotonic() + 30
        while notes.exists():  # OpenCode restored the project's files from its snapshot
            assert time.monotonic() < deadline, tui.screen()
            time.sleep(0.3)
        tui.wait("reverted")
        time.sleep(2)  # the undone message comes back into the prompt; say() clears it
        tui.say("TURN-TWO", "ANSWER-TURN-TWO")
        after_undo = project.session_id()
        tui.keys("-l", "/compact")
        time.sleep(1)
        tui.keys("Enter")
        tui.wait(SUMMARY)
        tui.say("TURN-THREE", "ANSWER-TURN-THREE")
        assert "reverted" not in tui.screen()  # the first undo's notice is gone
        tui.keys("-l", "/undo")
        time.sleep(1)
        tui.keys("Enter")
        tui.wait("reverted")
        time.sleep(2)
        tui.say("TURN-FOUR", "ANSWER-TURN-FOUR")

    # Nothing rolled back: the undone turns are still stored, the database still private.
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    assert project.show(root)["session"]["message_count"] >= stored_before
    shown = project.nonoka("sessions", "show", after_undo, "--json", "--entries")
    assert shown.returncode == 0, shown.stderr
    assert "TURN-THREE" in [e["text"] for e in json.loads(shown.stdout)["entries"]]
    # One lineage: root -> the first undo's branch -> the second undo's branch.
    chats = {r["session_id"]: r for r in _chats(project)}
    roots = [r for r in chats.values() if r["forked_from"] is None]
    assert [r["session_id"] for r in roots] == [root], chats
    assert after_undo != root and chats[after_undo]["forked_from"] == root, chats
    last_branch = project.session_id()
    assert last_branch not in (root, after_undo), chats
    assert chats[last_branch]["forked_from"] == after_undo, chats
    assert len(chats) == 3, chats
    assert all(chats[b]["fork_point"] for b in (after_undo, last_branch)), chats
    # The compaction stayed in the line it summarised: no branch of its own, no warning.
    summaries = [r for r in project.sessions() if _purpose(r) == "compaction"]
    assert [r["metadata"].get("compaction_of") for r in summaries] == [after_undo]
    for sid in chats:
        codes = {e["data"].get("code") for e in project.show(sid)["events"]
                 if e["kind"] == "warning"}
        assert "history_compacted" not in codes, (sid, codes)
    tree = project.nonoka("sessions", "list", "--tree")
    assert tree.returncode == 0, tree.stdout + tree.stderr
    branch_line = next(line for line in tree.stdout.splitlines() if after_undo[:8] in line)
    assert branch_line.lstrip().startswith(("└", "├")), tree.stdout  # drawn under its root
    # What the model saw: neither undone turn, and the summary in place of the old turns.
    requests = _chat_requests(server)
    assert requests[-1][:2] == [("user", "What did we do so far?"), ("assistant", SUMMARY)]
    assert requests[-1][-1] == ("user", "TURN-FOUR")
    assert ("user", "TURN-THREE") not in requests[-1]
    after_first_undo = next(r for r in requests if r[-1] == ("user", "TURN-TWO"))
    assert ("user", "CREATE-FILE notes.txt") not in after_first_undo
    _no_split(project, root)
    print(f"TUI undo/compact e2e: {time.monotonic() - started:.1f} s")


@pytest.mark.slow  # a long scenario: `-m slow`
def test_a_tui_and_a_run_at_the_same_time_stay_in_their_own_lines(
        tmp_path: Path, opencode_bin: Path) -> None:
    """The TUI open in a project while ``opencode run`` works in the same project, both
    starting with the same words: two nonoka lines, one per OpenCode session, and
    neither's turns reach the other's model requests."""
    with _tui_in(tmp_path, opencode_bin) as (project, server, tui):
        tui.say("SAME-OPENING", "ANSWER-SAME-OPENING")
        beside = project.opencode("--format", "json", "SAME-OPENING")
        assert "ANSWER-SAME-OPENING" in beside.stdout, project.explain(beside)
        # the run's events name its session (no `opencode session list` process needed)
        (newest,) = {json.loads(line)["sessionID"] for line in beside.stdout.splitlines()
                     if line.startswith("{")}
        tui.say("TUI-TURN", "ANSWER-TUI-TURN")
        more = project.opencode("--session", newest, "RUN-TURN")
        assert "ANSWER-RUN-TURN" in more.stdout, project.explain(more)

    requests = _chat_requests(server)
    tui_request = next(r for r in requests if r[-1] == ("user", "TUI-TURN"))
    run_request = next(r for r in requests if r[-1] == ("user", "RUN-TURN"))
    assert tui_request == [("user", "SAME-OPENING"), ("assistant", "ANSWER-SAME-OPENING"),
                           ("user", "TUI-TURN")]
    assert run_request == [("user", "SAME-OPENING"), ("assistant", "ANSWER-SAME-OPENING"),
                           ("user", "RUN-TURN")]
    chats = _chats(project)
    hosts = {(r.get("metadata") or {}).get("host_session_id") for r in chats}
    assert len(chats) == 2 and len(hosts) == 2 and None not in hosts, chats


def test_two_opencode_sessions_alike_stay_in_their_own_lines(project: OpenCodeProject) -> None:
    """OpenCode says which of its sessions each step belongs to (``setCacheKey``): two
    sessions that begin with the same message never share a nonoka line, though one
    OpenCode process (and so one warm bridge) serves both, and OpenCode's session list
    (``GET /session``, what ``opencode session list`` prints) and ``nonoka sessions list``
    describe the same ones."""
    serve = _Serve(project)
    try:
        first, second = (serve.call("POST", "/session", {})["id"] for _ in range(2))
        assert serve.say(first, "SAME start") == "ANSWER-SAME"
        assert serve.say(second, "SAME start") == "ANSWER-SAME"
        hosts = {s["id"] for s in serve.sessions()}
        assert hosts == {first, second}
        assert serve.say(first, "ONE goes on") == "ANSWER-ONE"
        assert serve.say(second, "TWO goes on") == "ANSWER-TWO"
    finally:
        serve.close()
    chats = _chats(project)
    lines = {(r.get("metadata") or {}).get("host_session_id"): r["session_id"] for r in chats}
    assert set(lines) == hosts, chats
    assert len({r["session_id"] for r in chats}) == 2
    requests = _chat_requests(project.server)
    assert requests[-2] == [("user", "SAME start"), ("assistant", "ANSWER-SAME"),
                            ("user", "ONE goes on")]
    assert requests[-1] == [("user", "SAME start"), ("assistant", "ANSWER-SAME"),
                            ("user", "TWO goes on")]
    tree = project.nonoka("sessions", "list", "--tree", "--json")
    assert tree.returncode == 0, tree.stderr
    for sid in lines.values():
        assert sid in tree.stdout


@pytest.mark.slow  # a long scenario: `-m slow`
def test_auto_compaction_stays_in_the_chat_session_and_a_fork_after_it_is_a_branch(
        project: OpenCodeProject) -> None:
    """OpenCode compacts on its own and goes on: one chat session, the summary recorded
    against it. Then a fork (``POST /session/{id}/fork``, what ``opencode run --fork``
    calls; the CLI's own is ``test_run_session_fork_branches_and_the_original_goes_on``),
    then back to the original: the fork is a branch with its fork point, the original
    continues in its own line, and nothing is rewritten in place (no
    ``history_compacted`` classification of either step)."""
    config_file = project.path / "opencode.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["provider"]["nonoka"]["models"] = {
        "default": {"name": "nonoka", "limit": {"context": 2000, "output": 200}}}
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    started = time.monotonic()

    serve = _Serve(project)
    try:
        host = serve.call("POST", "/session", {})["id"]
        assert serve.say(host, "TURN-ONE") == "ANSWER-TURN-ONE"
        root = project.session_id()
        # The context is now "full": OpenCode compacts, and goes on, before it answers.
        serve.say(host, "TURN-TWO-BIG")
        assert serve.say(host, "TURN-THREE") == "ANSWER-TURN-THREE"
        assert project.session_id() == root
        listed_once = [s["id"] for s in serve.sessions()]

        forked = serve.call("POST", f"/session/{host}/fork", {})["id"]
        assert serve.say(forked, "FORKED-TURN") == "ANSWER-FORKED-TURN"
        assert serve.say(host, "BACK-TURN") == "ANSWER-BACK-TURN"
        hosts = {s["id"] for s in serve.sessions()}
    finally:
        serve.close()
    assert listed_once == [host]
    assert hosts == {host, forked}

    # OpenCode compacted on its own, once, and went on from its summary as it intends.
    compactions = [r for r in project.server.requests if _is_compaction(r)]
    assert len(compactions) == 1
    assert _said(compactions[0])[0][1].startswith("Here is the conversation so far:")
    three = next(r for r in _chat_requests(project.server) if r[-1] == ("user", "TURN-THREE"))
    assert three[:2] == [("user", "What did we do so far?"), ("assistant", SUMMARY)]
    # nonoka: still one chat session after the compaction; the summary recorded against it.
    summaries = [r for r in project.sessions() if _purpose(r) == "compaction"]
    assert [r["metadata"].get("compaction_of") for r in summaries] == [root]

    # Each OpenCode session's history reached the model: the summary, then its own turn.
    requests = _chat_requests(project.server)
    assert requests[-2][-1] == ("user", "FORKED-TURN")
    assert requests[-2][:2] == [("user", "What did we do so far?"), ("assistant", SUMMARY)]
    assert requests[-1][-1] == ("user", "BACK-TURN")
    assert not any(content == "FORKED-TURN" for _, content in requests[-1])

    chats = {r["session_id"]: r for r in _chats(project)}
    assert project.session_id() == root  # the last step was the original's
    assert (chats[root].get("metadata") or {}).get("host_session_id") == host
    # one, two, OpenCode's "continue" after compacting, three, back
    assert chats[root]["turn_count"] >= 5
    branches = [r for r in chats.values() if r["forked_from"] == root]
    assert len(branches) == 1 and len(chats) == 2, chats
    branch = branches[0]
    assert branch["fork_point"] is not None and branch["fork_point"] > 0

    def texts(sid: str) -> list[str]:
        shown = project.nonoka("sessions", "show", sid, "--json", "--entries")
        assert shown.returncode == 0, shown.stderr
        return [e["text"] for e in json.loads(shown.stdout)["entries"]]

    # OpenCode's list and nonoka's describe the same two conversations.
    lines = {(r.get("metadata") or {}).get("host_session_id"): r["session_id"]
             for r in chats.values()}
    assert set(lines) == hosts and lines[host] == root, (lines, hosts)
    assert "FORKED-TURN" in texts(branch["session_id"])
    kept = texts(root)
    assert "BACK-TURN" in kept and "FORKED-TURN" not in kept
    for sid in (root, branch["session_id"]):
        codes = {e["data"].get("code") for e in project.show(sid)["events"]
                 if e["kind"] == "warning"}
        assert "history_compacted" not in codes, (sid, codes)
    _no_split(project, root)
    print(f"fork-after-compaction e2e: {time.monotonic() - started:.1f} s")


@pytest.mark.slow
def test_an_undo_after_compaction_is_a_branch(project: OpenCodeProject) -> None:
    """Compaction, one more turn, then an undo of that turn (``revert`` through the
    server API, what the TUI's ``/undo`` calls) and a new turn: a branch at the undone
    turn, the parent kept whole, no rewrite in place.

    The TUI's own ``/compact`` then ``/undo``
    (``test_the_tui_undo_and_compact_in_either_order_stay_one_lineage``) checks the
    same lineage; this is the same through the server API after an automatic
    compaction."""
    config_file = project.path / "opencode.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["provider"]["nonoka"]["models"] = {
        "default": {"name": "nonoka", "limit": {"context": 2000, "output": 200}}}
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    started = time.monotonic()
    serve = _Serve(project)
    try:
        session = serve.call("POST", "/session", {})["id"]
        assert serve.say(session, "TURN-ONE") == "ANSWER-TURN-ONE"
        root = project.session_id()
        serve.say(session, "TURN-TWO-BIG")  # OpenCode compacts, and goes on, then answers
        assert any(_is_compaction(r) for r in project.server.requests), "never compacted"
        assert serve.say(session, "TURN-THREE") == "ANSWER-TURN-THREE"
        serve.call("POST", f"/session/{session}/revert",
                   {"messageID": serve.users(session)[-1]})
        assert serve.say(session, "TURN-FOUR") == "ANSWER-TURN-FOUR"
    finally:
        serve.close()

    requests = _chat_requests(project.server)
    assert requests[-1][-1] == ("user", "TURN-FOUR")
    assert not any(content == "TURN-THREE" for _, content in requests[-1])

    chats = {r["session_id"]: r for r in _chats(project)}
    assert root in chats, chats
    branches = [r for r in chats.values() if r["forked_from"] == root]
    assert len(branches) == 1, chats
    assert branches[0]["fork_point"] is not None and branches[0]["fork_point"] > 0
    for sid in (root, branches[0]["session_id"]):
        codes = {e["data"].get("code") for e in project.show(sid)["events"]
                 if e["kind"] == "warning"}
        assert "history_compacted" not in codes, (sid, codes)
    shown = project.nonoka("sessions", "show", root, "--json", "--entries")
    assert shown.returncode == 0, shown.stderr
    assert "TURN-THREE" in [e["text"] for e in json.loads(shown.stdout)["entries"]]
    _no_split(project, root)
    print(f"undo-after-compaction e2e: {time.monotonic() - started:.1f} s")
