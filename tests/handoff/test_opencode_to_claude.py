"""A session OpenCode made (the real ``opencode run`` through nonoka's provider and
bridge) handed to Claude Code (the real ``claude -p --resume``) with ``nonoka sessions
handoff``: Claude Code's first request carries every earlier user and assistant
message, and lands, through ``nonoka serve``, on a new branch of the OpenCode session."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from nonoka.testing.anthropic_replies import AnthropicReply
from tests.e2e.test_opencode import OpenCodeProject, opencode_bin, server
from tests.handoff.support import handoff, said, sessions, stored
from tests.serve.claude_code import MAIN_MODEL, ClaudeCode, strict_endpoint
from tests.serve.harness import ServeProcess

__all__ = ["opencode_bin", "server"]  # the fixtures the tests below use

UPSTREAM_KEY = "sk-ant-upstream-key-for-the-handoff"
GO_ON = "HANDED-OVER: go on with notes.txt"


def test_an_opencode_session_goes_on_in_claude_code(tmp_path: Path, opencode_bin: Path,
                                                   server: Any) -> None:
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


def check_carried(sent: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """Every user and assistant message of the stored conversation is in ``sent``, in
    order, with the tool call and its result: no summary in their place."""
    texts = [said(m) for m in sent]
    at = 0
    for entry in before:
        if entry["role"] not in ("user", "assistant") or not entry["content"]:
            continue
        found = next((n for n in range(at, len(texts)) if entry["content"] in texts[n]), None)
        assert found is not None, (entry["content"], texts)
        at = found
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"]]
    calls = [b for b in blocks if b.get("type") == "tool_use"]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    assert [c["id"] for c in calls] == ["call_write_1"] and calls[0]["name"] == "write"
    assert [r["tool_use_id"] for r in results] == ["call_write_1"]
