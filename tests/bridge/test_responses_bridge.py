"""``openai-responses:`` through real per-step bridge processes: the encrypted reasoning
and the answer's item layout reach the host (feature ``reasoning``), come back with its
history, and go to OpenAI unchanged, so the strict endpoint accepts each step; early
dispatch sends nothing ahead for this model (it is not ``AdoptsInflight``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.state.messages import ToolCall
from nonoka.testing.server import ReasoningItem, ResponsesReply, ScriptedResponsesServer, Step
from tests.support.bridge import Bridge, assistant, chat, of_type, one, tool_message, user
from tests.support.responses_api import assert_valid_request

TOOLS = [{"name": "read", "description": "read a file", "parameters": {"type": "object"}}]
PARTS = {"version": "1", "required_capabilities": ["parts"], "features": ["reasoning"]}


@pytest.fixture
def responses(tmp_path: Path) -> Iterator[tuple[Bridge, ScriptedResponsesServer, list[Step]]]:
    steps: list[Step] = []

    def next_step(_: dict[str, Any]) -> Step:
        assert steps, "the model was called more often than scripted"
        return steps.pop(0)

    project = tmp_path / "project"
    project.mkdir()
    with ScriptedResponsesServer(next_step, strict=["openai_reasoning"]) as server:
        bridge = Bridge(project, None)
        bridge.env.update({"NONOKA_MODEL": "openai-responses:gpt-5",
                           "OPENAI_BASE_URL": server.base_url, "NONOKA_EARLY_DISPATCH": "1"})
        yield bridge, server, steps
        assert not server.failures, server.failures
        for body in server.requests:
            assert_valid_request(body)


def test_reasoning_goes_to_the_host_and_back_to_openai_step_after_step(
        responses: tuple[Bridge, ScriptedResponsesServer, list[Step]]) -> None:
    bridge, server, steps = responses
    steps.append(ResponsesReply(output=(
        ReasoningItem(("Read a first.",)), "Reading.",
        ToolCall(id="c1", name="read", arguments='{"path": "a"}')), reasoning_tokens=3))
    events = bridge.run(chat([user("what is in a?")], protocol=PARTS, tools=TOOLS))
    sid = one(events, "session_init")["session_id"]
    assert "".join(e["text"] for e in of_type(events, "reasoning_delta")) == "Read a first."
    meta = one(events, "assistant_metadata")
    [reasoning] = meta["reasoning"]
    item = reasoning["provider_metadata"]["openai_responses"]
    assert item["encrypted_content"].startswith("gAAAAA")
    assert [e["type"] for e in meta["provider_metadata"]["openai_responses"]["items"]] == [
        "reasoning", "message", "function_call"]
    tool_call = one(events, "tool_call")
    assert tool_call["provider_metadata"]["openai_responses"]["id"].startswith("fc_")

    steps.append(ResponsesReply(output=(ReasoningItem(()), "a holds 1.")))
    calls = [{"id": "c1", "name": "read", "arguments": '{"path": "a"}',
              "provider_metadata": tool_call["provider_metadata"]}]
    history = [user("what is in a?"),
               {**assistant("Reading.", calls), "reasoning": meta["reasoning"],
                "provider_metadata": meta["provider_metadata"]},
               tool_message("c1", "1")]
    second = bridge.run(chat(history, session_id=sid, protocol=PARTS, tools=TOOLS))
    assert one(second, "finish")["finish_reason"] == "stop"
    assert server.rejections == []
    sent = server.requests[-1]["input"]
    assert [i["type"] for i in sent[-4:]] == ["reasoning", "message", "function_call",
                                              "function_call_output"]
    assert sent[-4] == item

    # A third step, after the host's next prompt: all of it goes back again, unchanged.
    steps.append("Nothing else.")
    last = one(second, "assistant_metadata")
    history += [{**assistant("a holds 1."), "reasoning": last["reasoning"],
                 "provider_metadata": last["provider_metadata"]}, user("anything else?")]
    third = bridge.run(chat(history, session_id=sid, protocol=PARTS, tools=TOOLS))
    assert one(third, "finish")["finish_reason"] == "stop"
    assert server.rejections == []
    assert server.requests[-1]["input"][:len(sent)] == sent
    assert len(server.requests) == 3  # nothing was sent ahead, nothing twice


def test_a_host_that_keeps_no_metadata_still_gets_its_stored_reasoning_sent(
        responses: tuple[Bridge, ScriptedResponsesServer, list[Step]]) -> None:
    bridge, server, steps = responses
    steps.append(ResponsesReply(output=(
        ReasoningItem(("Read a first.",)), ToolCall(id="c1", name="read", arguments="{}"))))
    events = bridge.run(chat([user("what is in a?")], tools=TOOLS))
    sid = one(events, "session_init")["session_id"]
    assert not of_type(events, "assistant_metadata")
    steps.append("a holds 1.")
    calls = [{"id": "c1", "name": "read", "arguments": "{}"}]
    history = [user("what is in a?"), assistant("", calls), tool_message("c1", "1")]
    second = bridge.run(chat(history, session_id=sid, tools=TOOLS))
    assert one(second, "finish")["finish_reason"] == "stop", second
    assert server.rejections == []
    assert [i["type"] for i in server.requests[-1]["input"][-3:]] == [
        "reasoning", "function_call", "function_call_output"]
