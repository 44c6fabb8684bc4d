"""A session Claude Code made (the real ``claude -p`` through ``nonoka serve``, a tool
loop with thinking) handed to OpenCode (the real ``opencode import`` and ``opencode run
--session``, through nonoka's provider and bridge): the model's first request for
OpenCode carries every earlier user and assistant message, the tool call and its
result, and the turn lands on the hand-off's branch by OpenCode's session id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.e2e.test_opencode import OpenCodeProject, opencode_bin
from tests.handoff.support import claude_read_notes, handoff, in_order, said, sessions, stored
from tests.serve.claude_code import ClaudeCode

__all__ = ["opencode_bin"]  # the fixture the test below uses

pytestmark = pytest.mark.slow  # a long scenario with real clients: `-m slow`

NOTE = "papaya and kiwi"
GO_ON = "HANDED-OVER: now count the fruit"


def answer(body: dict[str, Any]) -> Step:
    return text("a title") if not body.get("tools") else text("OPENCODE-COUNT: two")


def test_a_claude_code_session_goes_on_in_opencode(tmp_path: Path, opencode_bin: Path
                                                   ) -> None:
    with ScriptedOpenAIServer(answer) as server:
        opencode = OpenCodeProject(tmp_path, opencode_bin, server)
        assert opencode.run("git", "init", "-q", ".").returncode == 0
        assert opencode.init().returncode == 0
        project = opencode.path

        claude = ClaudeCode(tmp_path / "claude")
        try:
            source = claude_read_notes(project, claude, NOTE)
        finally:
            claude.close()
        before = stored(project, source)

        made = handoff(project, source, "opencode", project / ".nonoka" / "handoff", project)
        assert made["before"] == ["opencode", "import", made["transcript"]]
        imported = opencode.run(str(opencode_bin), "import", made["transcript"])
        assert imported.returncode == 0, opencode.explain(imported)
        assert made["agent_session"] in imported.stdout
        run = opencode.opencode("--session", made["agent_session"], GO_ON)
        assert "OPENCODE-COUNT: two" in run.stdout, opencode.explain(run)
        chats = opencode.chat_requests()

    check_carried(chats[0]["messages"], before)
    rows = {r["session_id"]: r for r in sessions(project)}
    branch = rows[made["branch"]]
    assert branch["forked_from"] == source and branch["fork_point"] == len(before)
    lines = [r["session_id"] for r in rows.values()
             if r["metadata"].get("host_session_id") == made["agent_session"]]
    assert lines == [made["branch"]]
    after = [e for e in stored(project, made["branch"]) if e["role"] != "system"]
    said_before = [e for e in before if e["role"] != "system"]
    assert [(e["role"], e["content"]) for e in after[:len(said_before)]] == [
        (e["role"], e["content"]) for e in said_before]
    assert (after[-1]["role"], after[-1]["content"]) == ("assistant", "OPENCODE-COUNT: two")


def check_carried(sent: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """Every user and assistant text of the stored conversation is in the Chat
    Completions request nonoka sent the model for OpenCode, in order, with the call."""
    texts = [said(m) if m.get("content") else "" for m in sent]
    in_order(texts, before)
    calls = [c for m in sent for c in m.get("tool_calls") or ()]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [("toolu_Read_1", "Read")]
    assert json.loads(calls[0]["function"]["arguments"])["file_path"].endswith("notes.txt")
    [result] = [m for m in sent if m["role"] == "tool"]
    assert result["tool_call_id"] == "toolu_Read_1" and NOTE in said(result)
