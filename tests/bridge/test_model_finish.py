"""The model's own finish reason reaches the host: an answer the model cut at its output
limit (or filtered) says so in ``finish.model_finish``, through real bridge processes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.anthropic_replies import AnthropicReply
from nonoka.testing.replies import Reply
from nonoka.testing.server import ScriptedAnthropicServer, ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.support.bridge import BRIDGE, Bridge, assistant, chat, one, text_of, user


@pytest.mark.parametrize("reason", ["length", "content_filter", "stop"])
def test_the_finish_carries_the_models_reason(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer,
        reason: str) -> None:
    scripted.append(Reply(text="Once upon a", finish_reason=reason))
    events = bridge.run(chat([user("tell me a story")]))
    assert text_of(events) == "Once upon a", events
    finish = events[-1]
    assert finish["type"] == "finish" and finish["finish_reason"] == "stop"
    assert finish["model_finish"] == reason


@pytest.fixture
def replies() -> list[AnthropicReply]:
    return []


@pytest.fixture
def anthropic(replies: list[AnthropicReply]) -> Iterator[ScriptedAnthropicServer]:
    def next_step(body: dict[str, Any]) -> Any:
        return replies.pop(0)

    with ScriptedAnthropicServer(next_step) as running:
        yield running
    assert not running.failures, running.failures


def test_an_anthropic_answer_cut_at_max_tokens_is_length(
        project: Path, replies: list[AnthropicReply],
        anthropic: ScriptedAnthropicServer) -> None:
    bridge = Bridge(project, None)
    bridge.env.update({"NONOKA_MODEL": "anthropic:claude-haiku-4-5",
                       "ANTHROPIC_BASE_URL": anthropic.base_url,
                       "ANTHROPIC_API_KEY": "sk-ant-test"})
    replies.append(AnthropicReply(text="Once upon a", stop_reason="max_tokens"))
    events = bridge.run(chat([user("tell me a story")]))
    assert events[-1]["finish_reason"] == "stop"
    assert events[-1]["model_finish"] == "length", events


def test_an_answer_stored_before_a_crash_has_no_model_reason(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    # The process stored the model's answer and died; the host's retry is answered from
    # the store, with no model call in this request to name a reason.
    scripted.append(text("hello"))
    sid = one(bridge.run(chat([user("hi")])), "session_init")["session_id"]
    scripted.append(Reply(text="Once upon a", finish_reason="length"))
    history = [user("hi"), assistant("hello"), user("a story")]
    line = json.dumps({"cwd": str(bridge.project),
                       **chat(history, session_id=sid)}).encode() + b"\n"
    killed = subprocess.run(BRIDGE, input=line, capture_output=True, cwd=bridge.project,
                            env={**bridge.env, "NONOKA_FAULT": "model.call.after:1"},
                            timeout=60, check=False)
    assert killed.returncode != 0
    events = bridge.run(chat(history, session_id=sid))
    assert text_of(events) == "Once upon a" and len(server.requests) == 2, events
    assert events[-1]["finish_reason"] == "stop" and "model_finish" not in events[-1]
