"""The REAL OpenCode through nonoka to Anthropic's Messages API and OpenAI's Responses API.

OpenCode (from npm) runs a tool loop with reasoning through ``nonoka/default``; nonoka's
model is ``anthropic:…`` or ``openai-responses:…`` against a scripted endpoint in strict
mode, which refuses a step that lost the model's signed thinking or encrypted reasoning
as the real service does. Every request nonoka sent is checked against the vendor's own
types, and OpenCode's ``--thinking`` output shows the reasoning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nonoka.state.messages import ToolCall
from nonoka.testing.anthropic_replies import AnthropicReply, Thinking
from nonoka.testing.anthropic_server import ScriptedAnthropicServer
from nonoka.testing.server import ReasoningItem, ResponsesReply, ScriptedResponsesServer
from tests.e2e.test_opencode import OpenCodeProject, opencode_bin
from tests.llm.test_anthropic_fidelity import assert_valid_request as valid_anthropic
from tests.support.responses_api import assert_valid_request as valid_responses

__all__ = ["opencode_bin"]

pytestmark = pytest.mark.slow  # a long scenario with real clients: `-m slow`

CONTENT = "written through a vendor API\n"


def _project(tmp_path: Path, binary: Path, server: Any, env: dict[str, str]) -> OpenCodeProject:
    project = OpenCodeProject(tmp_path, binary, server)
    project.env.update(env)
    assert project.run("git", "init", "-q", ".").returncode == 0
    init = project.init()
    assert init.returncode == 0, init.stderr
    return project


def _write_args(project: OpenCodeProject) -> str:
    import json

    return json.dumps({"filePath": str(project.path / "notes.txt"), "content": CONTENT})


def _patch_args(project: OpenCodeProject) -> str:
    import json

    added = "".join(f"+{line}\n" for line in CONTENT.splitlines())
    return json.dumps({"patchText": f"*** Begin Patch\n*** Add File: "
                                    f"{project.path / 'notes.txt'}\n{added}*** End Patch"})


def test_opencode_with_an_anthropic_model_keeps_its_thinking(tmp_path: Path,
                                                             opencode_bin: Path) -> None:
    holder: dict[str, OpenCodeProject] = {}

    def step(body: dict[str, Any]) -> AnthropicReply:
        if not body.get("tools"):
            return AnthropicReply(text="vendor e2e title")
        last = body["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else []
        if any(b.get("type") == "tool_result" for b in blocks):
            return AnthropicReply(text="DONE-ANTHROPIC", thinking=(Thinking("It is saved."),))
        return AnthropicReply(thinking=(Thinking("PLAN-ANTHROPIC: write the note."),),
                              tool_calls=(ToolCall(id="toolu_w1", name="write",
                                                   arguments=_write_args(holder["p"])),))

    with ScriptedAnthropicServer(step, strict=["anthropic_thinking"]) as server:
        project = _project(tmp_path, opencode_bin, server, {
            "NONOKA_MODEL": "anthropic:claude-sonnet-4-5",
            "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-e2e"})
        holder["p"] = project
        done = project.opencode("--thinking", "CREATE-FILE please")
    assert "DONE-ANTHROPIC" in done.stdout, project.explain(done)
    assert "PLAN-ANTHROPIC" in done.stdout + done.stderr, project.explain(done)
    assert (project.path / "notes.txt").read_text() == CONTENT
    assert server.rejections == [], server.failures
    chat = [b for b in server.bodies if b'"tools"' in b]
    assert len(chat) >= 2
    for raw in server.bodies:
        valid_anthropic(raw)
    answered = [r for r in server.requests if r.get("tools")][-1]
    assistant = [m for m in answered["messages"] if m["role"] == "assistant"][-1]
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use"]
    assert assistant["content"][0]["signature"]


def test_opencode_with_a_responses_model_keeps_its_reasoning(tmp_path: Path,
                                                             opencode_bin: Path) -> None:
    holder: dict[str, OpenCodeProject] = {}

    def step(body: dict[str, Any]) -> ResponsesReply:
        if not body.get("tools"):
            return ResponsesReply(output=("vendor e2e title",))
        items = body.get("input") or []
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            return ResponsesReply(output=(ReasoningItem(("It is saved.",)), "DONE-RESPONSES"))
        # OpenCode gives a GPT model (by its API id, as init writes it) apply_patch
        # instead of write, as it does directly.
        assert "apply_patch" in [t.get("name") for t in body["tools"]]
        return ResponsesReply(output=(
            ReasoningItem(("PLAN-RESPONSES: write the note.",)),
            ToolCall(id="call_w1", name="apply_patch", arguments=_patch_args(holder["p"]))))

    with ScriptedResponsesServer(step, strict=["openai_reasoning"]) as server:
        project = _project(tmp_path, opencode_bin, server, {
            "NONOKA_MODEL": "openai-responses:gpt-5", "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-e2e"})
        holder["p"] = project
        done = project.opencode("--thinking", "CREATE-FILE please")
    assert "DONE-RESPONSES" in done.stdout, project.explain(done)
    assert "PLAN-RESPONSES" in done.stdout + done.stderr, project.explain(done)
    assert (project.path / "notes.txt").read_text().strip() == CONTENT.strip()
    assert server.rejections == []
    for body in server.requests:
        valid_responses(body)
    answered = [r for r in server.requests if r.get("tools")][-1]
    kinds = [i.get("type") for i in answered["input"] if isinstance(i, dict)]
    assert kinds[-3:] == ["reasoning", "function_call", "function_call_output"]
