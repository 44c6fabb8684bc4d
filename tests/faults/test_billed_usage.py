"""A process killed right after the model answered: the call was billed, so the ledger
must count it, and the host's retry must not pay for the same answer twice."""

from __future__ import annotations

from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.faults.test_retries import killed_at, start
from tests.support.bridge import Bridge, assistant, chat, load_state, of_type, text_of, user


@pytest.mark.parametrize("point", ["model.call.after:1", "event.append.before:3"])
def test_a_kill_after_the_answer_keeps_the_billed_usage(
        bridge: Bridge, scripted: list[Any], server: ScriptedOpenAIServer, point: str) -> None:
    sid = start(bridge, scripted)
    billed = len(server.requests)
    history = [user("hello"), assistant("first answer"), user("second")]
    scripted.append(text("second answer"))
    lost = killed_at(bridge, point, chat(history, session_id=sid))
    assert not of_type(lost, "finish")
    assert len(server.requests) == billed + 1, "the model was not called before the kill"

    scripted.append(text("second answer"))
    retry = bridge.run(chat(history, session_id=sid))
    assert retry[-1]["finish_reason"] == "stop" and text_of(retry) == "second answer"
    state = load_state(bridge, sid)
    assert [e.content for e in state.memory_entries] == [
        "hello", "first answer", "second", "second answer"]
    usage = state.runtime_state.usage
    # One ledger entry per call the provider billed: nothing uncounted, nothing twice.
    assert usage.model_turns == len(server.requests), (usage, len(server.requests))
    assert usage.input_tokens > 0 and usage.output_tokens > 0
