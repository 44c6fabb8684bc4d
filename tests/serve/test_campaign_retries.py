"""Campaign: the client's answer is lost after the server stored the turn — a proxy in
front of ``nonoka serve`` (as a load balancer does) turns each first answer into a 502 —
and the client sends the request again: openai-python's own retry (the same body,
``x-stainless-retry-count: 1``), or a plain client repeating its ``Idempotency-Key``.
Each of 100 retries gets the stored response; exactly one turn is stored each time."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.harness import Served, request
from tests.serve.test_retries import stored

ROUNDS = 100


class LosingProxy:
    """Forwards every request to ``nonoka serve``; the first time it sees a create
    request's body it waits for the server's whole answer, then gives the client a 502
    instead (``lost`` counts them). The same body again is passed through."""

    def __init__(self, port: int) -> None:
        self.lost = 0
        seen: set[bytes] = set()
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # a kept connection's answers go out at once

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"127.0.0.1:{port}"
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                raw = answer.read()
                upstream.close()
                key = (self.headers.get("Idempotency-Key") or "").encode() + (body or b"")
                with lock:
                    lose = self.command == "POST" and self.path == "/v1/responses" \
                        and answer.status == 200 and key not in seen
                    seen.add(key)
                    proxy.lost += lose
                status, raw = (502, b'{"error": {"message": "bad gateway"}}') if lose \
                    else (answer.status, raw)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(30)


@pytest.fixture
def proxy(served: Served) -> Iterator[LosingProxy]:
    running = LosingProxy(served.port)
    try:
        yield running
    finally:
        running.close()


def check(project: Path, server: ScriptedOpenAIServer, answers: list[str]) -> None:
    """One model request and one stored turn per answer: 50 lines of two turns."""
    assert len(server.requests) == ROUNDS
    assert sorted(stored(project).values()) == [4] * (ROUNDS // 2)
    assert sorted(stored(project, "response").values()) == [2] * (ROUNDS // 2)
    assert answers == [f"answer {n}" for n in range(ROUNDS)]


def test_openai_python_retries_a_lost_answer_and_gets_the_stored_one(
        proxy: LosingProxy, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OpenAI, "_calculate_retry_timeout", lambda *_args, **_kw: 0.0)
    scripted.extend(text(f"answer {n}") for n in range(ROUNDS))
    answers, previous = [], None
    with OpenAI(base_url=proxy.url, api_key="k", max_retries=1) as client:
        for n in range(ROUNDS):
            made = client.responses.create(
                model="m", input=f"question {n}",
                previous_response_id=previous if n % 2 else None)
            assert client.responses.retrieve(made.id).output_text == made.output_text
            answers.append(made.output_text)
            previous = made.id
    assert proxy.lost == ROUNDS
    check(project, server, answers)


def test_an_idempotency_key_sent_again_after_a_lost_answer_gets_the_stored_one(
        proxy: LosingProxy, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted.extend(text(f"answer {n}") for n in range(ROUNDS))
    answers, previous = [], None
    for n in range(ROUNDS):
        body: dict[str, Any] = {"model": "m", "input": f"question {n}"}
        if n % 2:
            body["previous_response_id"] = previous
        key = {"Idempotency-Key": f"request-{n}"}
        status, _, raw = request(proxy.port, "POST", "/v1/responses", body, key)
        assert status == 502, raw
        status, _, raw = request(proxy.port, "POST", "/v1/responses", body, key)
        assert status == 200, raw
        made = json.loads(raw)
        answers.append(made["output"][0]["content"][0]["text"])
        previous = made["id"]
    assert proxy.lost == ROUNDS
    check(project, server, answers)
