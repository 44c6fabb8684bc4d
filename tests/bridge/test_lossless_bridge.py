"""Through real bridge processes: each step's system prompt is the host's, reasoning and
provider metadata stream back to a provider that asks for them, usage carries cached
and reasoning tokens, and a failed model call reaches the host as the provider gave it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nonoka.testing import call, text
from nonoka.testing.server import Reply, ScriptedOpenAIServer, Step, context_length_exceeded
from tests.support.bridge import Bridge, assistant, chat, of_type, one, tool_message, user

TOOLS = [{"name": "read", "description": "read a file", "parameters": {"type": "object"}}]
PARTS = {"version": "1", "required_capabilities": ["parts"], "features": ["reasoning"]}


def system(content: str) -> dict[str, Any]:
    return {"role": "system", "content": content}


@pytest.mark.parametrize("early", ["1", "0"], ids=["early dispatch", "runtime only"])
def test_each_step_sends_the_hosts_current_system_prompt(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer,
        early: str) -> None:
    bridge.env["NONOKA_EARLY_DISPATCH"] = early
    scripted.append(text("answer 0"))
    history = [user("hi")]
    sid = one(bridge.run(chat([system("Today is Monday."), *history])),
              "session_init")["session_id"]
    history.append(assistant("answer 0"))
    for turn, day in enumerate(("Tuesday", "Tuesday", "Wednesday"), start=1):
        scripted.append(text(f"answer {turn}"))
        history.append(user(f"question {turn}"))
        events = bridge.run(chat([system(f"Today is {day}."), *history], session_id=sid))
        assert one(events, "finish")["finish_reason"] == "stop"
        sent = server.requests[-1]["messages"]
        assert sent[0] == system(f"Today is {day}.")
        assert [m["role"] for m in sent].count("system") == 1
        assert sent[1:] == history
        history.append(assistant(f"answer {turn}"))


def test_reasoning_and_signatures_stream_back_to_a_provider_that_asks(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    scripted.append(Reply.of(call("read", {"path": "a"}, id="c1"), reasoning="Read it first.",
                             thought_signatures={"c1": "c2ln"}, cached_tokens=4,
                             reasoning_tokens=3))
    events = bridge.run(chat([user("what is in a?")], protocol=PARTS, tools=TOOLS))
    assert "".join(e["text"] for e in of_type(events, "reasoning_delta")) == "Read it first."
    meta = one(events, "assistant_metadata")
    assert [r["text"] for r in meta["reasoning"]] == ["Read it first."]
    tool_call = one(events, "tool_call")
    assert tool_call["provider_metadata"] == {"openai_compatible": {
        "extra_content": {"google": {"thought_signature": "c2ln"}}}}
    usage = one(events, "usage")
    assert (usage["cache_read_tokens"], usage["reasoning_tokens"]) == (4, 3)
    assert one(events, "finish")["usage"]["cache_read_tokens"] == 4

    # The host sends the call back with what it was given; the endpoint gets it as sent.
    scripted.append(text("a holds 1"))
    sid = one(events, "session_init")["session_id"]
    calls = [{"id": "c1", "name": "read", "arguments": '{"path": "a"}',
              "provider_metadata": tool_call["provider_metadata"]}]
    history = [user("what is in a?"),
               {**assistant("", calls), "reasoning": meta["reasoning"]},
               tool_message("c1", "1")]
    bridge.run(chat(history, session_id=sid, protocol=PARTS, tools=TOOLS))
    sent = server.requests[-1]["messages"][1]
    assert sent["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "c2ln"}}


def test_a_provider_that_does_not_ask_gets_no_new_events(
        bridge: Bridge, scripted: list[Step]) -> None:
    scripted.append(Reply(text="ok", reasoning="hmm"))
    events = bridge.run(chat([user("hi")]))
    assert not of_type(events, "reasoning_delta") and not of_type(events, "assistant_metadata")
    assert "cache_read_tokens" not in one(events, "usage")


def test_a_context_overflow_reaches_the_host_as_the_provider_gave_it(
        bridge: Bridge, scripted: list[Step]) -> None:
    scripted.append(context_length_exceeded())
    events = bridge.run(chat([user("a very long history")]))
    error = one(events, "error")
    provider = error["details"]["provider"]
    assert provider["status"] == 400 and provider["retryable"] is False
    assert json.loads(provider["body"])["error"]["code"] == "context_length_exceeded"
