"""Codex CLI in front of a Chat Completions model: the real ``codex exec`` (tests/clients)
asking for a model Codex gives ``apply_patch`` as a custom (freeform) tool, against a
real ``nonoka serve`` whose model is ``openai:`` (the strict scripted Chat Completions
endpoint). The model sees a function tool, calls it with its patch as ``input``, and
Codex applies the patch it receives as its own ``custom_tool_call``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nonoka.llm.base import ModelResponse
from nonoka.state.messages import ToolCall
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.codex_client import Outside, codex_on_serve

FREEFORM_MODEL = "gpt-5.5"
"""A model Codex's bundled model list gives ``"apply_patch_tool_type": "freeform"``."""
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from nonoka\n*** End Patch\n"


def tool_named(body: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [t["function"] for t in body.get("tools") or []
                                   if t.get("function", {}).get("name") == name]
    assert len(found) == 1, [t.get("function", {}).get("name") for t in body["tools"]]
    return found[0]


def test_codex_applies_a_patch_a_chat_completions_model_wrote(
        tmp_path: Path, project: Path, outside: Outside) -> None:
    seen: list[dict[str, Any]] = []

    def patch(body: dict[str, Any]) -> ModelResponse:
        seen.append(body)
        offered = tool_named(body, "apply_patch")
        assert offered["parameters"] == {"type": "object",
                                         "properties": {"input": {"type": "string"}},
                                         "required": ["input"]}
        assert "*** Begin Patch" in offered["description"]  # Codex's grammar, carried
        return ModelResponse(text="", finish_reason="tool_calls", tool_calls=[
            ToolCall(id="call_patch", name="apply_patch",
                     arguments=json.dumps({"input": PATCH}))])

    def answer(body: dict[str, Any]) -> ModelResponse:
        seen.append(body)
        messages = body["messages"]
        [call] = messages[-2]["tool_calls"]
        assert call["function"] == {"name": "apply_patch",
                                    "arguments": json.dumps({"input": PATCH})}
        assert messages[-1]["role"] == "tool" and \
            messages[-1]["tool_call_id"] == "call_patch"
        return text("Added hello.txt.")

    steps = [patch, answer]
    with ScriptedOpenAIServer(lambda body: steps.pop(0)(body),
                              strict=["reasoning_back", "gemini_signatures"]) as chat:
        # a process of its own: the OpenResponses spec the in-process harness checks
        # every response against has no custom tools
        with codex_on_serve(tmp_path, project, "openai:scripted-model", chat.base_url,
                            outside, FREEFORM_MODEL) as codex:
            run = codex.exec("Add hello.txt saying hello from nonoka.")
        assert chat.rejections == []
    assert run.returncode == 0, run.stderr
    assert (codex.workspace / "hello.txt").read_text() == "hello from nonoka\n"
    assert "Added hello.txt." in run.stdout
    assert len(seen) == 2 and not steps
    # Codex kept the call as the custom tool's call it offered
    kept = [r["payload"] for r in codex.rollout() if r["type"] == "response_item"]
    [called] = [i for i in kept if i.get("type") == "custom_tool_call"]
    assert (called["name"], called["call_id"], called["input"]) == ("apply_patch",
                                                                    "call_patch", PATCH)
    assert any(i.get("type") == "custom_tool_call_output" for i in kept)
