"""A session OpenCode made (the real ``opencode run`` through nonoka's provider and
bridge) handed to Claude Code (the real ``claude -p --resume``) with ``nonoka sessions
handoff``, and Claude Code's branch handed on to Codex (the real ``codex exec resume``):
each agent's first request carries every earlier user and assistant message (OpenCode's,
then Claude Code's too), and lands, through ``nonoka serve``, on a new branch of the
session it left."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing.anthropic_replies import AnthropicReply
from nonoka.testing.server import ResponsesReply, ScriptedResponsesServer
from tests.e2e.test_opencode import OpenCodeProject, opencode_bin, server
from tests.handoff.support import handoff, in_order, recording, said, sessions, stored
from tests.serve.claude_code import MAIN_MODEL, ClaudeCode, strict_endpoint
from tests.serve.codex_client import Codex, Outside
from tests.serve.harness import ServeProcess, served_with

pytestmark = pytest.mark.slow  # a long scenario with real clients: `-m slow`

__all__ = ["opencode_bin", "recording", "server"]  # the fixtures the test below uses

UPSTREAM_KEY = "sk-ant-upstream-key-for-the-handoff"
GO_ON = "HANDED-OVER: go on with notes.txt"


def test_an_opencode_session_goes_on_in_claude_code_then_codex(
        tmp_path: Path, opencode_bin: Path, server: Any, recording: list[dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    opencode = OpenCodeProject(tmp_path, opencode_bin, server)
    assert opencode.run("git", "init", "-q", ".").returncode == 0
    assert opencode.init().returncode == 0
    first = opencode.opencode("CREATE-FILE notes.txt please")
    assert "DONE-ONE" in first.stdout, opencode.explain(first)
    source = opencode.session_id()
    before = stored(opencode.path, source)
    conversation = [(e["role"], e["content"]) for e in before
                    if e["role"] in ("user", "assistant") and e["content"]]
    assert [r for r, _ in conversation] == ["user", "assistant"], before

    claude = ClaudeCode(tmp_path / "claude")
    try:
        made = handoff(opencode.path, source, "claude", claude.home / ".claude", claude.work)
        assert made["source"] == source and made["at"] == len(before)

        # Directly (a copy of the handed-off home): Claude Code's own first request.
        direct_home = tmp_path / "claude-direct"
        shutil.copytree(tmp_path / "claude", direct_home, symlinks=True)
        direct = ClaudeCode(direct_home)
        try:
            direct.work = claude.work  # the transcript is kept under the cwd it runs in
            with strict_endpoint(lambda body: AnthropicReply(text="GOING-ON")) as endpoint:
                result = direct.run(endpoint.base_url, GO_ON, "--resume", made["agent_session"])
        finally:
            direct.close()
        assert result["session_id"] == made["agent_session"], result
        sent = endpoint.requests[0]["messages"]
        check_carried(sent, before)

        # Through nonoka serve: the same request lands on the hand-off's branch.
        with strict_endpoint(lambda body: AnthropicReply(text="GOING-ON")) as upstream:
            served = ServeProcess(opencode.path, f"anthropic:{MAIN_MODEL}", {
                "ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})
            try:
                result = claude.run(served.url.removesuffix("/v1"), GO_ON, "--resume",
                                    made["agent_session"], key="client-key")
            finally:
                errors = served.stop()
        assert "Traceback" not in errors, errors
        assert "GOING-ON" in result["result"]
        check_carried(upstream.requests[0]["messages"], before)
    finally:
        claude.close()

    rows = {r["session_id"]: r for r in sessions(opencode.path)}
    branch = rows[made["branch"]]
    assert branch["forked_from"] == source and branch["fork_point"] == len(before)
    assert branch["metadata"]["host_session_id"] == f"claude-code:{made['agent_session']}"
    assert branch["metadata"]["handoff"]["to"] == "claude"
    lines = [r for r in rows.values() if r["metadata"].get("host_session_id", "").startswith(
        "claude-code:")]
    assert [r["session_id"] for r in lines] == [made["branch"]]  # no other line was made
    after = stored(opencode.path, made["branch"])
    # the OpenCode conversation as it was (the system prompt is Claude Code's now), then
    # Claude Code's turn
    kept = [e for e in after if e["role"] != "system"]
    said_before = [e for e in before if e["role"] != "system"]
    assert kept[:len(said_before)] == said_before, [e["content"][:60] for e in after]
    assert any(GO_ON in str(e["metadata"].get("parts") or e["content"])
               for e in kept[len(said_before):] if e["role"] == "user")
    assert (kept[-1]["role"], kept[-1]["content"]) == ("assistant", "GOING-ON")
    tree = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "list", "--tree"],
                          cwd=opencode.path, capture_output=True, text=True, timeout=120,
                          check=False).stdout.splitlines()
    [at_source] = [n for n, line in enumerate(tree) if source[:8] in line]
    [at_branch] = [n for n, line in enumerate(tree) if made["branch"][:8] in line]
    assert at_branch > at_source  # drawn beneath it, at the point it left
    assert tree[at_branch].lstrip().startswith(("└─", "├─"))
    assert f"@{len(before)} " in tree[at_branch]

    # And on: Claude Code's branch handed to Codex, the work so far in its first request.
    home, workspace = tmp_path / "codex-home", tmp_path / "codex-work"
    workspace.mkdir()
    onward = handoff(opencode.path, made["branch"], "codex", home, workspace)
    so_far = stored(opencode.path, made["branch"])
    outside = Outside()
    try:
        with ScriptedResponsesServer(lambda body: ResponsesReply.of("CODEX-GOES-ON")
                                     ) as responses, served_with(
                opencode.path, "openai-responses:scripted-model",
                {"OPENAI_BASE_URL": responses.base_url, "OPENAI_API_KEY": "sk-up",
                 "NONOKA_DATABASE_URL": ""}, monkeypatch) as running:
            codex = Codex(home, workspace, running.url, outside)
            run = codex.exec("HANDED-OVER AGAIN: finish it", resume=onward["agent_session"])
            assert run.returncode == 0, run.stderr[-3000:]
    finally:
        outside.close()
    assert outside.asked == [] and "CODEX-GOES-ON" in run.stdout
    items = recording[0]["input"]
    texts = ["\n".join(str(p.get("text", "")) for p in i.get("content") or ()
                       if isinstance(p, dict)) for i in items if i.get("type") == "message"]
    at = 0
    for entry in so_far:  # OpenCode's messages and Claude Code's, in order
        for piece in spoken(entry):
            found = next((n for n in range(at, len(texts)) if piece in texts[n]), None)
            assert found is not None, (piece, texts)
            at = found
    calls = [i for i in items if i.get("type") == "function_call"]
    assert [(c["call_id"], c["name"]) for c in calls] == [("call_write_1", "write")]
    rows = {r["session_id"]: r for r in sessions(opencode.path)}
    assert rows[onward["branch"]]["forked_from"] == made["branch"]
    assert [r["session_id"] for r in rows.values() if r["metadata"].get(
        "host_session_id", "").startswith("codex:")] == [onward["branch"]]
    last = stored(opencode.path, onward["branch"])[-1]
    assert (last["role"], last["content"]) == ("assistant", "CODEX-GOES-ON")


def spoken(entry: dict[str, Any]) -> list[str]:
    """What a user or assistant entry said: its text parts, else its text."""
    if entry["role"] not in ("user", "assistant"):
        return []
    parts = entry["metadata"].get("parts")
    found = [str(p["text"]) for p in parts or () if p.get("type") == "text" and p.get("text")]
    return found or ([entry["content"]] if entry["content"] else [])


def check_carried(sent: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """Every user and assistant message of the stored conversation is in ``sent``, in
    order, with the tool call and its result: no summary in their place."""
    texts = [said(m) for m in sent]
    in_order(texts, before)
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"]]
    calls = [b for b in blocks if b.get("type") == "tool_use"]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    assert [c["id"] for c in calls] == ["call_write_1"] and calls[0]["name"] == "write"
    assert [r["tool_use_id"] for r in results] == ["call_write_1"]
