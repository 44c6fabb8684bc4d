"""``GET /v1/responses/{id}?stream=true&starting_after=N``: a background response's
stream, attached to again while it runs (then followed live), after it ended, and after
its server was killed and started again (from the timeline, ending incomplete)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import Reply
from tests.serve.conftest import MODEL
from tests.serve.harness import Served, ServeProcess, request, valid_events


def stream(port: int, response_id: str, after: int | None = None) -> list[dict[str, Any]]:
    query = "stream=true" + (f"&starting_after={after}" if after is not None else "")
    status, headers, raw = request(port, "GET", f"/v1/responses/{response_id}?{query}")
    assert status == 200, raw
    assert headers["content-type"].startswith("text/event-stream")
    return [json.loads(block.split("data: ", 1)[1])
            for block in raw.decode().split("\n\n") if block.strip()]


def test_attached_again_while_it_runs_and_after(served: Served, scripted: list[Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        assert gate.wait(60)
        return Reply(text="streamed in the background")

    scripted.append(held)
    status, _, raw = served.request("POST", "/v1/responses", {
        "model": "m", "input": "long task", "background": True})
    assert status == 200, raw
    response_id = json.loads(raw)["id"]
    responses = served.api.responses
    attached = threading.Event()
    reattach = responses.reattach

    async def noted(*args: Any) -> Any:
        found = await reattach(*args)
        attached.set()
        return found

    monkeypatch.setattr(responses, "reattach", noted)
    live: list[list[dict[str, Any]]] = []
    reader = threading.Thread(target=lambda: live.append(stream(served.port, response_id, 1)))
    reader.start()
    assert attached.wait(60)  # attached while the model has not answered yet
    gate.set()
    reader.join(60)
    [after_one] = live
    assert after_one[0]["sequence_number"] == 2
    assert after_one[-1]["type"] == "response.completed"
    texts = "".join(e["delta"] for e in after_one if e["type"] == "response.output_text.delta")
    assert texts == "streamed in the background"
    whole = valid_events(stream(served.port, response_id))  # ended: from the timeline
    assert whole[2:] == after_one
    assert stream(served.port, response_id, whole[-2]["sequence_number"]) == whole[-1:]
    status, _, raw = served.request("GET", f"/v1/responses/{response_id}")
    assert json.loads(raw) == whole[-1]["response"]


def test_only_background_responses_stream_again(served: Served, scripted: list[Any]) -> None:
    scripted.append(text("sync"))
    status, _, raw = served.request("POST", "/v1/responses", {"model": "m", "input": "hi"})
    response_id = json.loads(raw)["id"]
    status, _, raw = served.request("GET", f"/v1/responses/{response_id}?stream=true")
    assert status == 400 and json.loads(raw)["error"]["param"] == "stream"
    status, _, _ = served.request("GET", "/v1/responses/resp_nope?stream=true")
    assert status == 404


def test_attached_again_after_a_kill(project: Path, scripted: list[Any],
                                     upstream_env: dict[str, str]) -> None:
    gate = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        assert gate.wait(60)
        return Reply(text="never")

    scripted.append(held)
    process = ServeProcess(project, MODEL, upstream_env)
    try:
        status, _, raw = request(process.port, "POST", "/v1/responses", {
            "model": "m", "input": "long task", "background": True})
        assert status == 200, raw
        response_id = json.loads(raw)["id"]
        connection = socket.create_connection(("127.0.0.1", process.port))
        connection.sendall(b"GET /v1/responses/%s?stream=true HTTP/1.1\r\n"
                           b"Host: 127.0.0.1:%d\r\n\r\n" % (response_id.encode(), process.port))
        seen = b""
        while b"response.in_progress" not in seen:
            seen += connection.recv(65536)
        connection.close()
    finally:
        process.kill()
        gate.set()
    again = ServeProcess(project, MODEL, upstream_env)
    try:
        events = valid_events(stream(again.port, response_id))
        assert [e["type"] for e in events] == ["response.created", "response.in_progress",
                                              "response.incomplete"]
        assert events[-1]["response"]["incomplete_details"] == {"reason": "interrupted"}
        assert stream(again.port, response_id, 1) == events[2:]
    finally:
        again.stop()


def test_a_streamed_background_response_left_and_attached_again(
        served: Served, scripted: list[Any]) -> None:
    gate = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        assert gate.wait(60)
        return Reply(text="finished while nobody watched")

    scripted.append(held)
    connection = socket.create_connection(("127.0.0.1", served.port))
    sent = json.dumps({"model": "m", "input": "long task", "background": True,
                       "stream": True}).encode()
    connection.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (served.port, len(sent), sent))
    seen = b""
    while b"response.in_progress" not in seen:
        seen += connection.recv(65536)
    created = json.loads(seen.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    assert created["response"]["background"] is True
    connection.close()  # the client left; the response goes on
    gate.set()
    rest = stream(served.port, created["response"]["id"], 1)
    assert rest[0]["sequence_number"] == 2 and rest[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in rest if e["type"] == "response.output_text.delta") == \
        "finished while nobody watched"
