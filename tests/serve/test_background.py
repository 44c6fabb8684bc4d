"""``background: true`` (answered ``queued``, polled with ``GET``) and ``cancel``, through
the official client (every answer held to the spec by the harness)."""

from __future__ import annotations

import threading
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import Reply, ScriptedOpenAIServer


def held(gate: threading.Event, answer: str, asked: threading.Event | None = None) -> Any:
    def step(body: dict[str, Any]) -> Reply:
        if asked is not None:
            asked.set()
        assert gate.wait(60)
        return Reply(text=answer)
    return step


def settled(client: OpenAI, response_id: str) -> Any:
    """The response once it is no longer queued or running (a client's polling)."""
    for _ in range(100_000):
        got = client.responses.retrieve(response_id)
        if got.status not in ("queued", "in_progress"):
            return got
    raise AssertionError("the response never settled")


def test_a_background_response_is_queued_then_polled(
        client: OpenAI, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    gate = threading.Event()
    scripted += [held(gate, "done in the background"), text("and then")]
    made = client.responses.create(model="m", input="long task", background=True)
    assert made.status == "queued" and made.background is True
    running = client.responses.retrieve(made.id)
    assert running.status == "in_progress" and running.background is True
    gate.set()
    finished = settled(client, made.id)
    assert finished.status == "completed" and finished.output_text == "done in the background"
    assert finished.background is True
    later = client.responses.create(model="m", input="next?", previous_response_id=made.id)
    assert later.output_text == "and then" and later.background is False
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "long task", "done in the background", "next?"]


def test_background_needs_store(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", input="x", background=True, store=False)
    assert raised.value.param == "background"


def test_cancelling_a_background_response(client: OpenAI, scripted: list[Any],
                                          server: ScriptedOpenAIServer) -> None:
    gate, asked = threading.Event(), threading.Event()
    scripted += [held(gate, "never told", asked), text("after the cancel")]
    made = client.responses.create(model="m", input="long task", background=True)
    try:
        assert asked.wait(60)  # the model is answering
        cancelled = client.responses.cancel(made.id)
    finally:
        gate.set()
    assert cancelled.status == "cancelled" and cancelled.output == []
    assert client.responses.retrieve(made.id).status == "cancelled"
    assert client.responses.cancel(made.id).status == "cancelled"  # again: as it is
    # the cancelled response can be continued; its question is kept
    later = client.responses.create(model="m", input="go on", previous_response_id=made.id)
    assert later.output_text == "after the cancel"
    assert [m["content"] for m in server.requests[-1]["messages"]] == ["long task", "go on"]


def test_only_background_responses_can_be_cancelled(client: OpenAI,
                                                    scripted: list[Any]) -> None:
    scripted += [text("sync"), text("bg")]
    sync = client.responses.create(model="m", input="now")
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.cancel(sync.id)
    assert raised.value.message.endswith("Cannot cancel a synchronous response.")
    background = client.responses.create(model="m", input="later", background=True)
    finished = settled(client, background.id)
    assert client.responses.cancel(background.id).status == finished.status == "completed"
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_" + "0" * 48)
