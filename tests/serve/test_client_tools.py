"""Custom and namespace tools in front of models that take function tools only.

A real ``nonoka serve`` process in front of the strict scripted Chat Completions
endpoint (an ``openai:`` model) or the strict scripted Anthropic endpoint (an
``anthropic:`` model), the official ``openai`` client: what the endpoint is offered and
sent back (function tools, the model's own function calls), what the client gets (its
``custom_tool_call``, its namespace's ``function_call``), before and after a restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from nonoka.llm.base import ModelResponse
from nonoka.state.messages import ToolCall
from nonoka.testing import call, text
from nonoka.testing.replies import Reply
from nonoka.testing.server import ScriptedAnthropicServer, ScriptedOpenAIServer
from tests.serve.harness import ServeProcess, sse
from tests.serve.test_hosted_tools import APPLY_PATCH, PATCH, valid

WRITTEN = json.dumps({"input": PATCH}, separators=(",", ":"))
"""The arguments the model writes, without the spaces ``json.dumps`` puts in: sent back
as written."""
NAMESPACE = {"type": "namespace", "name": "crm", "description": "The CRM.",
             "tools": [{"type": "function", "name": "lookup", "description": "Find a person.",
                        "parameters": {"type": "object",
                                       "properties": {"who": {"type": "string"}},
                                       "required": ["who"]}}]}


def patching(call_id: str) -> ModelResponse:
    """The model calling the custom tool's function with ``WRITTEN``."""
    return ModelResponse(text="", finish_reason="tool_calls",
                         tool_calls=[ToolCall(id=call_id, name="apply_patch",
                                              arguments=WRITTEN)])


class Serving:
    """The ``nonoka serve`` processes of a test, in front of one upstream; each stopped
    at the end (none may have failed)."""

    def __init__(self, project: Path, model: str, env: dict[str, str]) -> None:
        self.project, self.model = project, model
        self.env = {**env, "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""}
        self.running = [ServeProcess(project, model, self.env)]

    @property
    def current(self) -> ServeProcess:
        return self.running[-1]

    def restart(self) -> None:
        """Kill the server (nothing but its store outlives it) and start another."""
        self.current.kill()
        self.running.append(ServeProcess(self.project, self.model, self.env))

    def client(self) -> OpenAI:
        return OpenAI(base_url=self.current.url, api_key="client-key", max_retries=0)

    def stop(self) -> None:
        errors = [p.stop() for p in self.running if p.process.poll() is None]
        assert not [e for e in errors if "Traceback" in e], errors


@pytest.fixture
def chat() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer([], strict=["reasoning_back", "gemini_signatures"]) as running:
        yield running
    assert not running.rejections, running.requests


@pytest.fixture
def anthropic() -> Iterator[ScriptedAnthropicServer]:
    with ScriptedAnthropicServer([], strict=("anthropic_thinking",)) as running:
        yield running
    assert not running.rejections, running.requests


def bare(value: Any) -> Any:
    """``value`` without Anthropic's ``cache_control`` marks (the breakpoints move on as
    the conversation grows)."""
    if isinstance(value, dict):
        return {k: bare(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [bare(v) for v in value]
    return value


def script(upstream: ScriptedOpenAIServer | ScriptedAnthropicServer, *steps: Any) -> None:
    upstream._script.extend(steps)  # type: ignore[union-attr]


@pytest.fixture
def via_chat(project: Path, chat: ScriptedOpenAIServer) -> Iterator[Serving]:
    serving = Serving(project, "openai:scripted-model",
                      {"OPENAI_BASE_URL": chat.base_url, "OPENAI_API_KEY": "sk-up"})
    try:
        yield serving
    finally:
        serving.stop()


@pytest.fixture
def via_anthropic(project: Path, anthropic: ScriptedAnthropicServer) -> Iterator[Serving]:
    serving = Serving(project, "anthropic:claude-scripted",
                      {"ANTHROPIC_BASE_URL": anthropic.base_url,
                       "ANTHROPIC_API_KEY": "sk-ant-up"})
    try:
        yield serving
    finally:
        serving.stop()


def offered(description: str) -> None:
    """The custom tool's description as a function tool: its own, then how to call it
    and the grammar its input follows."""
    assert description.startswith("Edit files with a patch.")
    assert "`input`" in description and "lark" in description
    assert APPLY_PATCH["format"]["definition"] in description  # type: ignore[index]


FREEFORM = {"type": "object", "properties": {"input": {"type": "string"}},
            "required": ["input"]}


def test_a_custom_tool_reaches_a_chat_completions_model_as_a_function(
        chat: ScriptedOpenAIServer, via_chat: Serving) -> None:
    # with what the endpoint wants back (strict): its reasoning, the call's signature
    script(chat, Reply.of(patching("call_patch_1"), reasoning="Add the file.",
                          thought_signatures={"call_patch_1": "sig-patch"}),
           text("Patched hello.txt."), text("It says hello."), text("Still hello."))
    body = {"model": "m", "input": "Add hello.txt", "tools": [APPLY_PATCH], "stream": True}
    events = valid(sse(via_chat.current.port, "/v1/responses", body))
    [tool] = chat.requests[0]["tools"]
    assert tool["type"] == "function"
    assert (tool["function"]["name"], tool["function"]["parameters"]) == \
        ("apply_patch", FREEFORM)
    offered(tool["function"]["description"])
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "custom_tool_call"]
    assert (done[1]["call_id"], done[1]["name"], done[1]["input"]) == \
        ("call_patch_1", "apply_patch", PATCH)
    assert "".join(e["delta"] for e in events
                   if e["type"] == "response.custom_tool_call_input.delta") == PATCH
    first = events[-1]["response"]
    assert first["tools"] == [APPLY_PATCH]
    with via_chat.client() as client:
        answer = client.responses.create(
            model="m", previous_response_id=first["id"], tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"type": "custom_tool_call_output", "call_id": "call_patch_1",
                    "output": "Done!"}])
        assert answer.output_text == "Patched hello.txt."
        listed = client.responses.input_items.list(answer.id).data
        assert [(i.type, getattr(i, "output", None)) for i in listed] == \
            [("custom_tool_call_output", "Done!")]
    sent = chat.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    [back] = sent[1]["tool_calls"]
    assert (back["id"], back["type"], back["function"]) == \
        ("call_patch_1", "function", {"name": "apply_patch", "arguments": WRITTEN})
    assert "sig-patch" in json.dumps(back)  # the endpoint's own fields, sent back
    assert sent[1]["reasoning_content"] == "Add the file."
    assert sent[2] == {"role": "tool", "tool_call_id": "call_patch_1", "content": "Done!"}

    via_chat.restart()
    with via_chat.client() as client:
        got = client.responses.retrieve(first["id"])
        assert got.output[1].model_dump(exclude_none=True) == done[1]
        later = client.responses.create(model="m", input="What does it say?",
                                        previous_response_id=answer.id,
                                        tools=[APPLY_PATCH])  # type: ignore[list-item]
        assert later.output_text == "It says hello."
        # a client that keeps its own history sends the items it got back
        resent = client.responses.create(
            model="m", store=False, tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"role": "user", "content": "Add hello.txt"},
                   {"type": "custom_tool_call", "call_id": "call_patch_1",
                    "name": "apply_patch", "input": PATCH},
                   {"type": "custom_tool_call_output", "call_id": "call_patch_1",
                    "output": "Done!"},
                   {"role": "assistant", "content": "Patched hello.txt."},
                   {"role": "user", "content": "And now?"}])
        assert resent.output_text == "Still hello."
    again = chat.requests[2]["messages"]
    assert again[:3] == sent  # the same call and result, as the model wrote them
    assert again[3]["content"] == "Patched hello.txt."
    # the server holds that history: the model is sent its own call again
    kept = chat.requests[3]["messages"]
    assert [m["role"] for m in kept] == ["user", "assistant", "tool", "assistant", "user"]
    assert kept[:3] == sent


def test_a_namespace_reaches_a_chat_completions_model_as_its_functions(
        chat: ScriptedOpenAIServer, via_chat: Serving) -> None:
    script(chat, call("lookup", {"who": "Aiko"}, id="call_ns"), text("Aiko is a customer."),
           text("Yes."))
    with via_chat.client() as client:
        first = client.responses.create(model="m", input="Who is Aiko?",
                                        tools=[NAMESPACE])  # type: ignore[list-item]
        made = first.output[0].model_dump(exclude_none=True)
        assert (made["type"], made["name"], made["namespace"], made["call_id"]) == \
            ("function_call", "lookup", "crm", "call_ns")
        assert json.loads(made["arguments"]) == {"who": "Aiko"}
        answer = client.responses.create(
            model="m", previous_response_id=first.id, tools=[NAMESPACE],  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": "call_ns",
                    "output": "a customer"}])
        assert answer.output_text == "Aiko is a customer."
    [tool] = chat.requests[0]["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "lookup"
    assert tool["function"]["parameters"] == NAMESPACE["tools"][0]["parameters"]  # type: ignore[index]
    assert tool["function"]["description"].startswith("Find a person.")
    sent = chat.requests[1]["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "lookup",
                                                    "arguments": made["arguments"]}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_ns", "content": "a customer"}

    via_chat.restart()
    with via_chat.client() as client:
        got = client.responses.retrieve(first.id).output[0].model_dump(exclude_none=True)
        assert got == made
        client.responses.create(model="m", input="A customer?", previous_response_id=answer.id,
                                tools=[NAMESPACE])  # type: ignore[list-item]
    assert chat.requests[2]["messages"][:3] == sent


def test_a_custom_tool_reaches_an_anthropic_model_as_a_tool(
        anthropic: ScriptedAnthropicServer, via_anthropic: Serving) -> None:
    script(anthropic, patching("toolu_patch_1"), text("Patched hello.txt."),
           text("It says hello."))
    with via_anthropic.client() as client:
        first = client.responses.create(model="m", input="Add hello.txt",
                                        tools=[APPLY_PATCH])  # type: ignore[list-item]
        made = first.output[0].model_dump(exclude_none=True)
        assert (made["type"], made["call_id"], made["name"], made["input"]) == \
            ("custom_tool_call", "toolu_patch_1", "apply_patch", PATCH)
        answer = client.responses.create(
            model="m", previous_response_id=first.id, tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"type": "custom_tool_call_output", "call_id": "toolu_patch_1",
                    "output": "Done!"}])
        assert answer.output_text == "Patched hello.txt."
    [tool] = anthropic.requests[0]["tools"]
    assert (tool["name"], tool["input_schema"]) == ("apply_patch", FREEFORM)
    offered(tool["description"])
    sent = anthropic.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    [use] = [b for b in sent[1]["content"] if b["type"] == "tool_use"]
    assert (use["id"], use["name"], use["input"]) == ("toolu_patch_1", "apply_patch",
                                                      {"input": PATCH})
    [result] = [b for b in sent[2]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_patch_1"
    assert "Done!" in json.dumps(result["content"])

    via_anthropic.restart()
    with via_anthropic.client() as client:
        later = client.responses.create(model="m", input="What does it say?",
                                        previous_response_id=answer.id,
                                        tools=[APPLY_PATCH])  # type: ignore[list-item]
        assert later.output_text == "It says hello."
        listed = client.responses.input_items.list(answer.id).data
        assert [i.type for i in listed] == ["custom_tool_call_output"]
    assert bare(anthropic.requests[2]["messages"][:3]) == bare(sent)


def test_a_custom_call_not_written_as_json_and_one_the_model_never_wrote(
        chat: ScriptedOpenAIServer, via_chat: Serving) -> None:
    script(chat, ModelResponse(text="", finish_reason="tool_calls", tool_calls=[
        ToolCall(id="call_raw", name="apply_patch", arguments=PATCH)]),
        text("Patched."), text("Patched elsewhere."))
    with via_chat.client() as client:
        first = client.responses.create(  # type: ignore[call-overload]
            model="m", input="Add hello.txt", tools=[APPLY_PATCH],
            tool_choice={"type": "custom", "name": "apply_patch"})
        made = first.output[0].model_dump(exclude_none=True)
        # no JSON object with an input: the client gets what the model wrote
        assert (made["type"], made["input"]) == ("custom_tool_call", PATCH)
        client.responses.create(
            model="m", previous_response_id=first.id, tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"type": "custom_tool_call_output", "call_id": "call_raw",
                    "output": "Done!"}])
        client.responses.create(
            model="m", store=False, tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"role": "user", "content": "Add bye.txt"},
                   {"type": "custom_tool_call", "call_id": "call_elsewhere",
                    "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n"},
                   {"type": "custom_tool_call_output", "call_id": "call_elsewhere",
                    "output": "Done!"}])
    assert chat.requests[0]["tool_choice"] == {"type": "function",
                                               "function": {"name": "apply_patch"}}
    back = chat.requests[1]["messages"][1]["tool_calls"][0]["function"]
    assert back == {"name": "apply_patch", "arguments": PATCH}  # as the model wrote it
    foreign = chat.requests[2]["messages"]
    assert [m["role"] for m in foreign] == ["user", "assistant", "tool"]
    assert foreign[1]["tool_calls"][0]["function"] == {
        "name": "apply_patch",
        "arguments": json.dumps({"input": "*** Begin Patch\n*** End Patch\n"})}
    assert foreign[2] == {"role": "tool", "tool_call_id": "call_elsewhere",
                          "content": "Done!"}


def test_a_conversation_keeps_the_custom_forms_and_sends_the_model_its_call(
        chat: ScriptedOpenAIServer, via_chat: Serving) -> None:
    script(chat, patching("call_conv"), text("Patched."), text("Hello."))
    with via_chat.client() as client:
        conversation = client.conversations.create()
        client.responses.create(model="m", input="Add hello.txt", tools=[APPLY_PATCH],  # type: ignore[list-item]
                                conversation=conversation.id)
        client.responses.create(
            model="m", conversation=conversation.id, tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"type": "custom_tool_call_output", "call_id": "call_conv",
                    "output": "Done!"}])
        via_chat.restart()
    with via_chat.client() as client:
        listed = client.conversations.items.list(conversation.id, order="asc").data
        assert [i.type for i in listed] == ["message", "custom_tool_call",
                                            "custom_tool_call_output", "message"]
        made = listed[1].model_dump(exclude_none=True)
        assert (made["call_id"], made["input"]) == ("call_conv", PATCH)
        client.responses.create(model="m", input="What does it say?",
                                conversation=conversation.id)
    for body in chat.requests[1:]:
        [back] = body["messages"][1]["tool_calls"]
        assert back["function"] == {"name": "apply_patch", "arguments": WRITTEN}
        assert body["messages"][2] == {"role": "tool", "tool_call_id": "call_conv",
                                       "content": "Done!"}
