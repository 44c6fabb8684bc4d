"""A client's retry never stores a second turn: openai-python's own retry after an
upstream 502 (``x-stainless-retry-count``) makes the failed response again in its place;
an ``Idempotency-Key`` sent again gets the stored response (streamed again, if asked)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from nonoka.store.project import open_project_stores
from nonoka.testing import text
from nonoka.testing.server import HttpError, Reply, ScriptedOpenAIServer
from tests.serve.conftest import MODEL
from tests.serve.harness import Served

UPSTREAM_502 = HttpError(502, {"error": {"message": "bad gateway", "type": "server_error"}},
                         retry_after=0)
ADAPTER_ATTEMPTS = 4
"""The model adapter's own attempts (it retries 3 times) before the client sees a 502."""


@pytest.fixture
def retrying(served: Served, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAI]:
    """openai-python with its own retry on (one), its back-off made instant."""
    monkeypatch.setattr(OpenAI, "_calculate_retry_timeout", lambda *_args, **_kw: 0.0)
    with OpenAI(base_url=served.url, api_key="k", max_retries=1) as client:
        yield client


def stored(project: Path, kind: str | None = None) -> dict[str, int]:
    """Each session's entries (``kind``: its timeline entries of that kind instead)."""
    async def read() -> dict[str, int]:
        async with open_project_stores(project) as stores:
            rows = await stores.index.list_sessions(limit=1000)
            counts = {}
            for row in rows:
                if kind is not None:
                    events = await stores.events.list_events(row.session_id, limit=10_000)
                    counts[row.session_id] = sum(e.kind == kind for e in events)
                    continue
                state = await stores.checkpoints.load_session(row.session_id)
                counts[row.session_id] = len(state.memory_entries) if state else 0
            return counts
    return asyncio.run(read())


def test_a_hundred_retries_after_a_502_store_one_turn_each(
        retrying: OpenAI, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    previous: str | None = None
    ids = []
    for n in range(100):
        scripted += [UPSTREAM_502] * ADAPTER_ATTEMPTS + [text(f"answer {n}")]
        chained = n % 2 == 1  # every other request continues the one before
        made = retrying.responses.create(
            model="m", input=f"question {n}",
            previous_response_id=previous if chained else None)
        assert made.output_text == f"answer {n}" and made.status == "completed"
        assert retrying.responses.retrieve(made.id).output_text == f"answer {n}"
        ids.append(made.id)
        previous = made.id
    assert len(server.requests) == 100 * (ADAPTER_ATTEMPTS + 1)
    counts = stored(project)
    assert sorted(counts.values()) == [4] * 50  # 50 lines of two turns, two entries each
    # every response was asked twice (the client's retry made the failed one again)
    assert sorted(stored(project, "response").values()) == [4] * 50
    assert len({i[5:37] for i in ids}) == 50
    last = server.requests[-1]["messages"]
    assert [m["content"] for m in last] == ["question 98", "answer 98", "question 99"]


def test_an_idempotency_key_sent_again_gets_the_stored_response(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted += [text("once"), text("other")]
    body = {"model": "m", "input": "only once please"}
    key = {"Idempotency-Key": "req-1"}
    first = served.request("POST", "/v1/responses", body, key)
    again = served.request("POST", "/v1/responses", body, key)
    assert first[0] == again[0] == 200 and first[2] == again[2]
    events = served.events(body, key)  # streamed this time: the stored response, replayed
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "once"
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["once"]
    other = served.request("POST", "/v1/responses", body, {"Idempotency-Key": "req-2"})
    assert other[0] == 200 and b"other" in other[2]
    assert len(server.requests) == 2 and sorted(stored(project).values()) == [2, 2]


def test_a_first_request_is_never_taken_for_a_retry(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    scripted += [text("one"), text("two")]
    body = {"model": "m", "input": "same words"}
    answers = [served.request("POST", "/v1/responses", body)[2] for _ in range(2)]
    assert b"one" in answers[0] and b"two" in answers[1] and len(server.requests) == 2


def test_chat_retries_after_a_502_store_one_turn_each(
        retrying: OpenAI, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    history: list[Any] = []
    for n in range(20):
        scripted += [UPSTREAM_502] * ADAPTER_ATTEMPTS + [text(f"answer {n}")]
        history.append({"role": "user", "content": f"question {n}"})
        made = retrying.chat.completions.create(model="m", messages=history)
        assert made.choices[0].message.content == f"answer {n}"
        history.append({"role": "assistant", "content": f"answer {n}"})
    assert len(server.requests) == 20 * (ADAPTER_ATTEMPTS + 1)
    assert list(stored(project).values()) == [40]
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        m["content"] for m in history[:-1]]


def test_a_retry_after_the_client_left_gets_the_running_response(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        assert gate.wait(60)
        return Reply(text="finished anyway")

    scripted.append(held)
    body = {"model": "m", "input": "long task", "stream": True}
    connection = socket.create_connection(("127.0.0.1", served.port))
    sent = json.dumps(body).encode()
    connection.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (served.port, len(sent), sent))
    received = b""
    while b"response.in_progress" not in received:
        received += connection.recv(65536)
    created = json.loads(received.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    connection.close()  # the client gave up; its SDK sends the request again
    responses = served.api.responses
    looking = threading.Event()
    earlier = responses._earlier

    async def noted(request: Any) -> Any:
        looking.set()
        return await earlier(request)

    monkeypatch.setattr(responses, "_earlier", noted)
    answers: list[list[dict[str, Any]]] = []
    retry = threading.Thread(target=lambda: answers.append(served.events(
        body, {"x-stainless-retry-count": "1"})))
    retry.start()
    assert looking.wait(60)  # the retry looks for the first while it still runs
    gate.set()
    retry.join(60)
    [events] = answers
    assert events[-1]["response"]["id"] == created["response"]["id"]
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "finished anyway"
    assert len(server.requests) == 1 and list(stored(project).values()) == [2]


def test_an_idempotency_key_holds_across_a_restart(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted += [text("first"), text("second")]
    first = served.request("POST", "/v1/responses", {"model": "m", "input": "one"})
    body = {"model": "m", "input": "two",
            "previous_response_id": json.loads(first[2])["id"]}
    made = served.request("POST", "/v1/responses", body, {"Idempotency-Key": "k2"})
    served.stop()
    again = Served(project, MODEL)
    try:
        retried = again.request("POST", "/v1/responses", body, {"Idempotency-Key": "k2"})
    finally:
        again.stop()
    assert retried[0] == 200 and json.loads(retried[2]) == json.loads(made[2])
    assert len(server.requests) == 2 and list(stored(project).values()) == [4]
