"""Streams and races: reasoning as a summary, an answer cut by its token limit, a client
that leaves mid-stream (the turn goes on and is stored), two continuations of one tip at
once (one continues the session, the other branches), the provider's rate limit."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from nonoka.serve.ids import parse_response_id
from nonoka.testing.server import HttpError, Reply, ScriptedOpenAIServer
from tests.serve.harness import Served, request, valid_events, valid_response


def test_reasoning_streams_as_a_summary(served: Served, scripted: list[Any]) -> None:
    scripted.append(Reply(text="42.", reasoning="Six times seven."))
    events = valid_events(served.events({"model": "m", "input": "6 x 7?"}))
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["summary"] == [{"type": "summary_text",
                                              "text": "Six times seven."}]
    thought = "".join(e["delta"] for e in events
                      if e["type"] == "response.reasoning_summary_text.delta")
    assert thought == "Six times seven."
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"
            ] == [0, 1]
    stored = valid_response(json.loads(served.request(
        "GET", f"/v1/responses/{final['id']}")[2]))
    assert stored["output"] == final["output"]


def test_an_answer_cut_by_its_limit_is_incomplete(served: Served, scripted: list[Any],
                                                  server: ScriptedOpenAIServer) -> None:
    scripted.append(Reply(text="Once upon a", finish_reason="length"))
    events = valid_events(served.events({"model": "m", "input": "A story",
                                         "max_output_tokens": 3}))
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["max_output_tokens"] == 3
    assert server.requests[0]["max_tokens"] == 3


def test_a_client_that_leaves_mid_stream_leaves_the_answer_stored(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    gate = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        assert gate.wait(60)
        return Reply(text="finished anyway")

    scripted += [held, Reply(text="next")]
    connection = socket.create_connection(("127.0.0.1", served.port))
    body = json.dumps({"model": "m", "input": "long task", "stream": True}).encode()
    connection.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (served.port, len(body), body))
    received = b""
    while b"response.in_progress" not in received:
        received += connection.recv(65536)
    created = json.loads(received.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    connection.close()  # gone before the model answers
    response_id = created["response"]["id"]
    status, _, raw = request(served.port, "GET", f"/v1/responses/{response_id}")
    assert status == 200 and json.loads(raw)["status"] == "in_progress"
    gate.set()
    # The next turn of this session waits for the first to end, then continues it.
    status, _, raw = request(served.port, "POST", "/v1/responses", {
        "model": "m", "input": "and then?", "previous_response_id": response_id})
    assert status == 200, raw
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "long task", "finished anyway", "and then?"]
    status, _, raw = request(served.port, "GET", f"/v1/responses/{response_id}")
    assert json.loads(raw)["output"][0]["content"][0]["text"] == "finished anyway"


def test_two_continuations_of_one_tip_at_once(served: Served, scripted: list[Any],
                                              server: ScriptedOpenAIServer) -> None:
    first_in = threading.Event()
    release = threading.Event()

    def slow(body: dict[str, Any]) -> Reply:
        first_in.set()
        assert release.wait(60)
        return Reply(text=f"re {body['messages'][-1]['content']}")

    def quick(body: dict[str, Any]) -> Reply:
        return Reply(text=f"re {body['messages'][-1]['content']}")

    scripted += [Reply(text="root"), slow, quick]
    status, _, raw = request(served.port, "POST", "/v1/responses",
                             {"model": "m", "input": "start"})
    assert status == 200, raw
    root = json.loads(raw)["id"]
    results: dict[str, dict[str, Any]] = {}

    def ask(prompt: str) -> None:
        got = request(served.port, "POST", "/v1/responses", {
            "model": "m", "input": prompt, "previous_response_id": root})
        results[prompt] = json.loads(got[2])

    one = threading.Thread(target=ask, args=("one",))
    one.start()
    assert first_in.wait(60)  # "one" holds the session's tip
    two = threading.Thread(target=ask, args=("two",))
    two.start()
    release.set()
    one.join(60)
    two.join(60)
    paths = sorted([m["content"] for m in r["messages"]] for r in server.requests[1:])
    assert paths == [["start", "root", "one"], ["start", "root", "two"]]
    points = {prompt: parse_response_id(r["id"]) for prompt, r in results.items()}
    sessions = {p.session_id for p in points.values() if p is not None}
    assert len(sessions) == 2  # one continued the session, the other is a branch of it


def test_the_providers_rate_limit_is_passed_on(served: Served, scripted: list[Any]) -> None:
    limited = HttpError(429, {"error": {"message": "Slow down", "type": "requests",
                                        "code": "rate_limit_exceeded"}}, retry_after=0)
    scripted.extend([limited] * 4)  # the adapter's own retries first
    status, headers, raw = served.request("POST", "/v1/responses",
                                          {"model": "m", "input": "hi"})
    assert status == 429 and headers["retry-after"] == "0"
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"


def test_a_failed_response_reads_back_and_can_be_continued(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    scripted += [Reply(text="fine"),
                 HttpError(400, {"error": {"message": "too long", "type": "invalid_request_error",
                                           "code": "context_length_exceeded"}}),
                 Reply(text="shorter now")]
    first = json.loads(served.request("POST", "/v1/responses",
                                      {"model": "m", "input": "hello"})[2])
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    events = valid_events(served.events({"model": "m", "input": "a huge question",
                                         "previous_response_id": first["id"],
                                         "tools": [tool], "instructions": "Be brief."}))
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["code"] == "context_length_exceeded"
    status, _, raw = served.request("GET", f"/v1/responses/{failed['response']['id']}")
    got = json.loads(raw)
    assert status == 200 and got["status"] == "failed"
    assert (got["instructions"], [t["name"] for t in got["tools"]]) == ("Be brief.", ["lookup"])
    status, _, raw = served.request("POST", "/v1/responses", {
        "model": "m", "input": "a short one", "previous_response_id": first["id"]})
    assert status == 200, raw
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "hello", "fine", "a short one"]
