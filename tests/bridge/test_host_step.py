"""The host's loop is the host's: a step whose history ends in an assistant message (an
agent's step limit, a prefill) goes to the model as the host sent it, through real
bridge processes (``nonoka.bridge.host_step``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import call, text
from nonoka.testing.server import ScriptedAnthropicServer, ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.support.bridge import (
    BRIDGE,
    Bridge,
    assistant,
    chat,
    of_type,
    one,
    text_of,
    tool_message,
    user,
)

SYSTEM = {"role": "system", "content": "You are OpenCode, a coding agent."}
BASH = [{"name": "bash", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
MAX_STEPS = ("CRITICAL - MAXIMUM STEPS REACHED\n\nThe maximum number of steps allowed for "
             "this task has been reached. Tools are disabled until next user input. "
             "Respond with text only.")
CALLED = assistant("", [{"id": "c1", "name": "bash", "arguments": '{"cmd": "ls"}'}])


def last_step(bridge: Bridge, scripted: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """A session paused on a host tool call, and the host's last step for it under a
    step limit: the tool's result, then the host's own assistant message."""
    scripted.append(call("bash", {"cmd": "ls"}, id="c1"))
    events = bridge.run(chat([SYSTEM, user("fix the tests")], tools=BASH))
    assert events[-1]["finish_reason"] == "tool_calls", events
    sid = one(events, "session_init")["session_id"]
    return sid, [SYSTEM, user("fix the tests"), CALLED, tool_message("c1", "a.py b.py"),
                 assistant(MAX_STEPS)]


def test_a_step_limit_step_is_answered_by_the_model(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    sid, history = last_step(bridge, scripted)
    scripted.append(text("Maximum steps reached. Done: listed the files."))
    events = bridge.run(chat(history, session_id=sid, tools=BASH))
    assert text_of(events) == "Maximum steps reached. Done: listed the files.", events
    finish = events[-1]
    assert finish["finish_reason"] == "stop" and finish["usage"]["output_tokens"] > 0
    assert one(events, "session_init")["session_id"] == sid
    sent = server.requests[-1]["messages"]
    assert sent[-1] == {"role": "assistant", "content": MAX_STEPS}
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant"]
    # The host's next turn has the answer, not its step message: the same session goes
    # on, and the model is not sent the step message again.
    scripted.append(text("you are welcome"))
    after = [*history[:-1], assistant("Maximum steps reached. Done: listed the files."),
             user("thanks")]
    events = bridge.run(chat(after, session_id=sid, tools=BASH))
    assert one(events, "session_init")["session_id"] == sid
    assert not [w for w in of_type(events, "warning") if w["code"] == "session_branched"]
    assert [m.get("content") for m in server.requests[-1]["messages"]].count(MAX_STEPS) == 0


def test_a_first_turn_that_ends_in_a_prefill_is_answered(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    scripted.append(text(" 42."))
    events = bridge.run(chat([user("what is 6 x 7?"), assistant("The answer is")]))
    assert text_of(events) == " 42." and events[-1]["finish_reason"] == "stop"
    assert server.requests[-1]["messages"] == [
        {"role": "user", "content": "what is 6 x 7?"},
        {"role": "assistant", "content": "The answer is"}]


@pytest.fixture
def anthropic(scripted: list[ScriptItem]) -> Iterator[ScriptedAnthropicServer]:
    def next_step(body: dict[str, Any]) -> Any:
        return scripted.pop(0)

    with ScriptedAnthropicServer(next_step) as running:
        yield running
    assert not running.failures, running.failures


def anthropic_bridge(project: Path, server: ScriptedAnthropicServer) -> Bridge:
    bridge = Bridge(project, None)
    bridge.env.update({"NONOKA_MODEL": "anthropic:claude-haiku-4-5",
                       "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-test"})
    return bridge


def test_a_step_limit_step_is_answered_by_an_anthropic_model(
        project: Path, scripted: list[ScriptItem],
        anthropic: ScriptedAnthropicServer) -> None:
    bridge = anthropic_bridge(project, anthropic)
    sid, history = last_step(bridge, scripted)
    scripted.append(text("Maximum steps reached; the files are listed."))
    events = bridge.run(chat(history, session_id=sid, tools=BASH))
    assert text_of(events) == "Maximum steps reached; the files are listed.", events
    assert events[-1]["usage"]["output_tokens"] > 0
    assert not anthropic.rejections
    final = anthropic.requests[-1]["messages"][-1]
    assert final["role"] == "assistant"
    assert [b["text"] for b in final["content"] if b["type"] == "text"] == [MAX_STEPS]


def test_a_prefill_goes_to_anthropic_by_its_rules(
        project: Path, scripted: list[ScriptItem],
        anthropic: ScriptedAnthropicServer) -> None:
    # The Messages API refuses a final assistant message that ends with whitespace.
    bridge = anthropic_bridge(project, anthropic)
    scripted.append(text("42."))
    events = bridge.run(chat([user("what is 6 x 7?"), assistant("The answer is ")]))
    assert text_of(events) == "42." and events[-1]["finish_reason"] == "stop", events
    assert not anthropic.rejections
    final = anthropic.requests[-1]["messages"][-1]
    assert final["role"] == "assistant"
    assert [(b["type"], b["text"]) for b in final["content"]] == [("text", "The answer is")]


def test_an_answer_stored_before_a_crash_is_replayed_not_asked_again(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    # nonoka's own crash repair: the process stored the model's answer to the host's
    # last step and died; the host's retry of that step gets the stored answer.
    sid, history = last_step(bridge, scripted)
    scripted.append(text("summary before the crash"))
    line = json.dumps({"cwd": str(bridge.project),
                       **chat(history, session_id=sid, tools=BASH)}).encode() + b"\n"
    killed = subprocess.run(BRIDGE, input=line, capture_output=True, cwd=bridge.project,
                            env={**bridge.env, "NONOKA_FAULT": "model.call.after:1"},
                            timeout=60, check=False)
    assert killed.returncode != 0
    calls = len(server.requests)
    events = bridge.run(chat(history, session_id=sid, tools=BASH))
    assert text_of(events) == "summary before the crash", events
    assert events[-1]["finish_reason"] == "stop"
    assert len(server.requests) == calls, "the model was asked again"


@pytest.mark.parametrize("history", [
    [user("hi"), assistant("hello"), assistant("and")],
    [SYSTEM, assistant("I will")],
], ids=["after an answer", "alone"])
def test_a_final_assistant_message_with_nothing_to_answer_is_an_error_the_host_shows(
        bridge: Bridge, history: list[dict[str, Any]], server: ScriptedOpenAIServer) -> None:
    events = bridge.run(chat(history))
    error = one(events, "error")
    assert error["code"] == "invalid_request" and "assistant message" in error["message"]
    assert events[-1]["finish_reason"] == "error"
    assert not server.requests
