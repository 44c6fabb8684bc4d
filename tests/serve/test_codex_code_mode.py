"""Codex CLI asking for a model its model list marks ``code_mode_only`` (``gpt-6.1-sol``):
Codex sends no ``tools``, only an ``additional_tools`` input item whose ``functions``
namespace holds ``exec`` (a custom tool taking JavaScript that calls Codex's own tools).
The real ``codex exec`` (tests/clients) against a real ``nonoka serve`` in front of the
strict scripted Chat Completions endpoint, then of the scripted Responses endpoint: the
model is offered ``exec``, calls it, Codex runs it (applying a patch) and the loop
completes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nonoka.llm.base import ModelResponse
from nonoka.state.messages import ToolCall
from nonoka.testing import text
from nonoka.testing.server import (
    HostedItem,
    ResponsesReply,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from tests.serve.codex_client import Outside, codex_on_serve
from tests.serve.test_codex import exported, thread_of

CODE_MODE_MODEL = "gpt-6.1-sol"
"""A model Codex's bundled model list gives ``"tool_mode": "code_mode_only"``."""
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from nonoka\n*** End Patch\n"
SCRIPT = f"const done = await tools.apply_patch({json.dumps(PATCH)});\ntext(done);\n"
"""What the model writes for ``exec``: JavaScript that applies the patch."""


def offered(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in body.get("tools") or ()}


def test_codex_code_mode_through_a_chat_completions_model(
        tmp_path: Path, project: Path, outside: Outside) -> None:
    seen: list[dict[str, Any]] = []

    def run_script(body: dict[str, Any]) -> ModelResponse:
        seen.append(body)
        tools = offered(body)
        assert tools["exec"]["parameters"] == {"type": "object",
                                               "properties": {"input": {"type": "string"}},
                                               "required": ["input"]}
        assert "Run JavaScript code" in tools["exec"]["description"]
        assert "sleep" in tools  # the clock namespace's tool, by its own name
        assert not any("Run JavaScript code" in str(m.get("content"))
                       for m in body["messages"]), \
            "the additional_tools item is not sent to a Chat Completions model"
        return ModelResponse(text="", finish_reason="tool_calls", tool_calls=[
            ToolCall(id="call_exec", name="exec", arguments=json.dumps({"input": SCRIPT}))])

    def answer(body: dict[str, Any]) -> ModelResponse:
        seen.append(body)
        assert "exec" in offered(body)
        messages = body["messages"]
        [call] = messages[-2]["tool_calls"]
        assert call["function"] == {"name": "exec",
                                    "arguments": json.dumps({"input": SCRIPT})}
        assert messages[-1]["role"] == "tool" and \
            messages[-1]["tool_call_id"] == "call_exec"
        return text("Added hello.txt.")

    def resumed(body: dict[str, Any]) -> ModelResponse:
        seen.append(body)
        assert "exec" in offered(body)  # the resent item's tools, offered again
        [call] = [c for m in body["messages"] for c in m.get("tool_calls") or ()]
        assert call["function"]["arguments"] == json.dumps({"input": SCRIPT})
        return text("Nothing else.")

    steps = [run_script, answer, resumed]
    with ScriptedOpenAIServer(lambda body: steps.pop(0)(body),
                              strict=["reasoning_back", "gemini_signatures"]) as chat:
        with codex_on_serve(tmp_path, project, "openai:scripted-model", chat.base_url,
                            outside, CODE_MODE_MODEL) as codex:
            run = codex.exec("Add hello.txt saying hello from nonoka.")
            again = codex.exec("Anything else?", resume=thread_of(run))
        assert chat.rejections == []
    assert run.returncode == 0, run.stderr
    assert (codex.workspace / "hello.txt").read_text() == "hello from nonoka\n"
    assert "Added hello.txt." in run.stdout
    assert again.returncode == 0 and "Nothing else." in again.stdout, again.stderr
    assert len(seen) == 3 and not steps
    # the thread is one line: the second turn went on the first one's session
    [line] = [s for s in exported(project) if s["index"]["metadata"]["purpose"] == "chat"]
    said = [e["content"] for e in line["entries"] if e["role"] == "assistant"]
    assert "Added hello.txt." in said and "Nothing else." in said
    kept = [r["payload"] for r in codex.rollout() if r["type"] == "response_item"]
    [called] = [i for i in kept if i.get("type") == "custom_tool_call"]
    assert (called["name"], called["call_id"], called["input"]) == ("exec", "call_exec",
                                                                    SCRIPT)
    assert called.get("namespace") in (None, "functions")
    assert any(i.get("type") == "custom_tool_call_output" for i in kept)


def test_codex_code_mode_through_a_responses_model(
        tmp_path: Path, project: Path, outside: Outside) -> None:
    call = {"type": "custom_tool_call", "id": "ctc_exec", "call_id": "call_exec",
            "namespace": "functions", "name": "exec", "input": SCRIPT}
    replies = [ResponsesReply(output=(HostedItem(call),)),
               ResponsesReply(output=("Added hello.txt.",))]
    with ScriptedResponsesServer(replies, strict=["openai_reasoning"]) as upstream:
        with codex_on_serve(tmp_path, project, "openai-responses:scripted-model",
                            upstream.base_url, outside, CODE_MODE_MODEL) as codex:
            run = codex.exec("Add hello.txt saying hello from nonoka.")
        assert not upstream.failures, upstream.failures
    assert run.returncode == 0, run.stderr
    assert (codex.workspace / "hello.txt").read_text() == "hello from nonoka\n"
    assert "Added hello.txt." in run.stdout
    first, second = upstream.requests
    for sent in (first, second):
        # the item in its place, as Codex gave it; its tools are not repeated in tools
        [carried] = [i for i in sent["input"] if i["type"] == "additional_tools"]
        assert sent["input"][0] == carried and carried["role"] == "developer"
        assert [t["name"] for t in carried["tools"]][:1] == ["functions"]
        assert not any(t.get("name") in ("exec", "functions", "sleep")
                       for t in sent.get("tools") or ())
    back = {i["type"]: i for i in second["input"]}
    assert {k: back["custom_tool_call"][k] for k in ("call_id", "name", "namespace",
                                                     "input")} == \
        {"call_id": "call_exec", "name": "exec", "namespace": "functions", "input": SCRIPT}
    assert back["custom_tool_call_output"]["call_id"] == "call_exec"
