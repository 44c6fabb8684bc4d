"""A session Claude Code made (the real ``claude -p`` through ``nonoka serve``, a tool
loop with thinking) handed to Codex (the real ``codex exec resume``) with ``nonoka
sessions handoff``: the first request Codex sends carries every earlier user and
assistant message, the tool call and its result, and lands on a new branch of the
Claude Code session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing.server import ResponsesReply, ScriptedResponsesServer
from tests.handoff.support import claude_read_notes, handoff, in_order, recording, sessions, stored
from tests.serve.claude_code import ClaudeCode
from tests.serve.codex_client import Codex, Outside
from tests.serve.harness import served_with

__all__ = ["recording"]  # the fixture the test below uses

NOTE = "papaya and kiwi"
GO_ON = "HANDED-OVER: now count the fruit in notes.txt"


def test_a_claude_code_session_goes_on_in_codex(tmp_path: Path,
                                               recording: list[dict[str, Any]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    claude = ClaudeCode(tmp_path / "claude")
    try:
        source = claude_read_notes(project, claude, NOTE)
    finally:
        claude.close()
    before = stored(project, source)
    assert [e["role"] for e in before if e["role"] != "system"] == [
        "user", "assistant", "tool", "assistant"]

    home, workspace = tmp_path / "codex-home", tmp_path / "codex-work"
    workspace.mkdir()
    made = handoff(project, source, "codex", home, workspace)

    answers = [ResponsesReply.of("FRUIT-COUNT: two")]
    upstream_bodies: list[dict[str, Any]] = []

    def script(body: dict[str, Any]) -> Any:
        upstream_bodies.append(body)
        return answers.pop(0)

    outside = Outside()
    try:
        with ScriptedResponsesServer(script) as responses, served_with(
                project, "openai-responses:scripted-model",
                {"OPENAI_BASE_URL": responses.base_url, "OPENAI_API_KEY": "sk-up",
                 "NONOKA_DATABASE_URL": ""}, monkeypatch) as running:
            codex = Codex(home, workspace, running.url, outside)
            run = codex.exec(GO_ON, resume=made["agent_session"])
            assert run.returncode == 0, run.stderr[-3000:]
            assert "FRUIT-COUNT: two" in run.stdout
    finally:
        outside.close()
    assert outside.asked == []

    # Codex's first request: every earlier message, the call and its result, in order.
    sent = recording[0]["input"]
    check_carried(sent, before)
    check_carried(upstream_bodies[0]["input"], before)

    # It landed on the hand-off's branch, the one line of that Codex thread.
    rows = {r["session_id"]: r for r in sessions(project)}
    branch = rows[made["branch"]]
    assert branch["forked_from"] == source and branch["fork_point"] == len(before)
    codex_lines = [r["session_id"] for r in rows.values()
                   if r["metadata"].get("host_session_id", "").startswith("codex:")]
    assert codex_lines == [made["branch"]]
    after = [e for e in stored(project, made["branch"]) if e["role"] != "system"]
    said_before = [e for e in before if e["role"] != "system"]
    assert [(e["role"], e["content"]) for e in after[:len(said_before)]] == [
        (e["role"], e["content"]) for e in said_before]
    assert (after[-1]["role"], after[-1]["content"]) == ("assistant", "FRUIT-COUNT: two")


def texts_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content or () if isinstance(p, dict))


def check_carried(items: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """Every user and assistant text of the stored conversation is among ``items`` in
    order, and so are the tool call (its name and arguments) and its result."""
    texts = [texts_of(i) for i in items]
    in_order(texts, before)
    [call] = [i for i in items if i.get("type") == "function_call"]
    assert (call["call_id"], call["name"]) == ("toolu_Read_1", "Read")
    assert json.loads(call["arguments"])["file_path"].endswith("notes.txt")
    [output] = [i for i in items if i.get("type") == "function_call_output"]
    assert output["call_id"] == "toolu_Read_1" and NOTE in str(output["output"])
