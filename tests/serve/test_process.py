"""``nonoka serve`` as a process: killed with SIGKILL and started again, it answers every
response it reported; the key it requires off loopback; the ``Host`` check."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.conftest import MODEL
from tests.serve.harness import ServeProcess, request, sse, valid_events, valid_response
from tests.support.processes import run_nonoka


def path_of(server: ScriptedOpenAIServer, index: int = -1) -> list[str]:
    return [m["content"] for m in server.requests[index]["messages"]]


def test_every_reported_response_survives_a_kill(project: Path, scripted: list[Any],
                                                 server: ScriptedOpenAIServer,
                                                 upstream_env: dict[str, str]) -> None:
    scripted.extend(lambda body: text(f"re: {body['messages'][-1]['content']}")
                    for _ in range(13))
    paths: dict[str, list[str]] = {}
    process = ServeProcess(project, MODEL, upstream_env)
    try:
        with OpenAI(base_url=process.url, api_key="k", max_retries=0) as client:
            root = client.responses.create(model="m", input="root")
            paths[root.id] = ["root", "re: root"]
            child = client.responses.create(model="m", input="child",
                                            previous_response_id=root.id)
            paths[child.id] = [*paths[root.id], "child", "re: child"]
        events = valid_events(sse(process.port, "/v1/responses", {
            "model": "m", "input": "sibling", "previous_response_id": root.id,
            "stream": True}))
        sibling = events[-1]["response"]["id"]
        paths[sibling] = [*paths[root.id], "sibling", "re: sibling"]
    finally:
        process.kill()
    process = ServeProcess(project, MODEL, upstream_env)
    try:
        for response_id, path in paths.items():
            status, _, body = request(process.port, "GET", f"/v1/responses/{response_id}")
            assert status == 200, body
            assert valid_response(json.loads(body))["output"][0]["content"][0]["text"] == \
                path[-1]
            status, _, body = request(process.port, "POST", "/v1/responses", {
                "model": "m", "input": "next", "previous_response_id": response_id})
            assert status == 200, body
            assert path_of(server) == [*path, "next"]
        status, _, body = request(process.port, "GET", f"/v1/responses/{root.id}/input_items")
        [asked] = json.loads(body)["data"]
        status, _, body = request(process.port, "POST", "/v1/responses", {
            "model": "m", "input": [{"type": "item_reference", "id": asked["id"]},
                                    {"type": "item_reference", "id": root.output[0].id},
                                    {"type": "message", "role": "user", "content": "again"}]})
        assert status == 200, body
        assert path_of(server) == ["root", "re: root", "again"]  # item ids outlive a kill
    finally:
        assert "Traceback" not in process.stop()


def test_a_response_killed_mid_turn_is_incomplete_and_continuable(
        project: Path, scripted: list[Any], server: ScriptedOpenAIServer,
        upstream_env: dict[str, str]) -> None:
    asked = threading.Event()
    release = threading.Event()

    def stuck(body: dict[str, Any]) -> Any:
        asked.set()
        assert release.wait(60)
        return text("never delivered")

    scripted += [text("first answer"), stuck, text("after the kill"), text("branch")]
    process = ServeProcess(project, MODEL, upstream_env)
    try:
        status, _, raw = request(process.port, "POST", "/v1/responses",
                                 {"model": "m", "input": "first"})
        first = json.loads(raw)["id"]
        connection = socket.create_connection(("127.0.0.1", process.port))
        body = json.dumps({"model": "m", "input": "killed question", "stream": True,
                           "previous_response_id": first}).encode()
        connection.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (process.port, len(body), body))
        received = b""
        while b"response.in_progress" not in received:
            received += connection.recv(65536)
        killed = json.loads(received.split(b"data: ", 1)[1].split(b"\n", 1)[0])
        assert asked.wait(60)  # the model is being asked
    finally:
        process.kill()
        release.set()
    connection.close()
    killed_id = killed["response"]["id"]
    process = ServeProcess(project, MODEL, upstream_env)
    try:
        status, _, raw = request(process.port, "GET", f"/v1/responses/{killed_id}")
        assert status == 200, raw
        got = valid_response(json.loads(raw))
        assert (got["status"], got["incomplete_details"]) == (
            "incomplete", {"reason": "interrupted"})
        assert got["previous_response_id"] == first
        status, _, raw = request(process.port, "POST", "/v1/responses", {
            "model": "m", "input": "go on", "previous_response_id": killed_id})
        assert status == 200, raw
        assert path_of(server) == ["first", "first answer", "killed question", "go on"]
        status, _, raw = request(process.port, "POST", "/v1/responses", {
            "model": "m", "input": "instead", "previous_response_id": first})
        assert status == 200, raw
        assert path_of(server) == ["first", "first answer", "instead"]
    finally:
        process.stop()


def test_other_addresses_need_a_key(project: Path, upstream_env: dict[str, str]) -> None:
    env = {**upstream_env, "NONOKA_SERVE_KEY": ""}
    done = run_nonoka(project, "serve", "--host", "0.0.0.0", "--model", MODEL, env=env)
    assert done.returncode == 2
    assert "NONOKA_SERVE_KEY" in done.stderr


def test_a_key_is_required_when_set(project: Path, scripted: list[Any],
                                    upstream_env: dict[str, str]) -> None:
    scripted.append(text("let in"))
    process = ServeProcess(project, MODEL, {**upstream_env, "NONOKA_SERVE_KEY": "s3cret"})
    try:
        with OpenAI(base_url=process.url, api_key="wrong", max_retries=0) as refused, \
                pytest.raises(openai.AuthenticationError):
            refused.models.list()
        with OpenAI(base_url=process.url, api_key="s3cret", max_retries=0) as client:
            assert [m.id for m in client.models.list()] == [MODEL]
            assert client.responses.create(model="m", input="hi").output_text == "let in"
        status, _, body = request(process.port, "GET", "/v1/models",
                                  headers={"Host": "evil.example:80",
                                           "Authorization": "Bearer s3cret"})
        assert status == 403, body
    finally:
        process.stop()
