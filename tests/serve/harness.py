"""A real ``nonoka serve``: in this process (uvicorn on a thread of its own, a free
loopback port) or as a process of its own; raw HTTP and server-sent events; the
OpenResponses spec's models for every response and every streamed event."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from openai import OpenAI
from openresponses_types import types as spec
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nonoka.serve.app import create_app
from nonoka.serve.keys import Gate, open_keys
from nonoka.serve.server import base_url, bind, open_served

EVENT_MODELS: dict[str, type[BaseModel]] = {
    "response.created": spec.ResponseCreatedStreamingEvent,
    "response.queued": spec.ResponseQueuedStreamingEvent,
    "response.in_progress": spec.ResponseInProgressStreamingEvent,
    "response.completed": spec.ResponseCompletedStreamingEvent,
    "response.failed": spec.ResponseFailedStreamingEvent,
    "response.incomplete": spec.ResponseIncompleteStreamingEvent,
    "response.output_item.added": spec.ResponseOutputItemAddedStreamingEvent,
    "response.output_item.done": spec.ResponseOutputItemDoneStreamingEvent,
    "response.content_part.added": spec.ResponseContentPartAddedStreamingEvent,
    "response.content_part.done": spec.ResponseContentPartDoneStreamingEvent,
    "response.output_text.delta": spec.ResponseOutputTextDeltaStreamingEvent,
    "response.output_text.done": spec.ResponseOutputTextDoneStreamingEvent,
    "response.output_text.annotation.added":
        spec.ResponseOutputTextAnnotationAddedStreamingEvent,
    "response.refusal.delta": spec.ResponseRefusalDeltaStreamingEvent,
    "response.refusal.done": spec.ResponseRefusalDoneStreamingEvent,
    "response.reasoning.delta": spec.ResponseReasoningDeltaStreamingEvent,
    "response.reasoning.done": spec.ResponseReasoningDoneStreamingEvent,
    "response.reasoning_summary_part.added":
        spec.ResponseReasoningSummaryPartAddedStreamingEvent,
    "response.reasoning_summary_part.done": spec.ResponseReasoningSummaryPartDoneStreamingEvent,
    "response.reasoning_summary_text.delta": spec.ResponseReasoningSummaryDeltaStreamingEvent,
    "response.reasoning_summary_text.done": spec.ResponseReasoningSummaryDoneStreamingEvent,
    "response.function_call_arguments.delta":
        spec.ResponseFunctionCallArgumentsDeltaStreamingEvent,
    "response.function_call_arguments.done":
        spec.ResponseFunctionCallArgumentsDoneStreamingEvent,
    "error": spec.ErrorStreamingEvent,
}
"""Every streaming event of the OpenResponses spec, by its ``type``."""


def valid_response(data: Any) -> dict[str, Any]:
    """``data``, checked against the spec's ``ResponseResource``."""
    spec.ResponseResource.model_validate(data)
    assert isinstance(data, dict)
    return data


def valid_compaction(data: Any) -> dict[str, Any]:
    """``data``, checked against the spec's ``CompactResource``: exactly one output item,
    a ``compaction`` (as Codex requires)."""
    spec.CompactResource.model_validate(data)
    assert isinstance(data, dict)
    assert [item["type"] for item in data["output"]] == ["compaction"], data["output"]
    return data


def valid_events_after(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of a stream attached to again: each one of the spec, numbered on from
    where the client asked, ending with the response's final event."""
    for event in events:
        model = EVENT_MODELS.get(event.get("type", ""))
        assert model is not None, f"not an event of the spec: {event}"
        model.model_validate(event)
    if events:
        first = events[0]["sequence_number"]
        assert [e["sequence_number"] for e in events] == list(range(first, first + len(events)))
        assert events[-1]["type"] in ("response.completed", "response.incomplete",
                                      "response.failed", "error")
    return events


def valid_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events``, each checked against its spec model, numbered 0, 1, 2... in order,
    starting with ``response.created`` and ending with the response's final event."""
    for event in events:
        model = EVENT_MODELS.get(event.get("type", ""))
        assert model is not None, f"not an event of the spec: {event}"
        model.model_validate(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[1]["type"] == "response.in_progress"
    assert events[-1]["type"] in ("response.completed", "response.incomplete",
                                  "response.failed", "error")
    return events


class Checked:
    """ASGI middleware that holds every answer of the Responses API to the spec: each
    response object (create, get) against ``ResponseResource``, each streamed event
    against its event model, numbered in order. ``failures`` lists what did not hold."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.failures: list[str] = []
        self.checked = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith("/v1/responses") or \
                path.endswith("/input_items") or scope.get("method") == "DELETE":
            await self.app(scope, receive, send)
            return
        status = 0
        body = b""

        async def watched(message: Message) -> None:
            nonlocal status, body
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                body += message.get("body", b"")
                if not message.get("more_body") and status == 200:
                    self._check(path, body, b"starting_after=" in scope.get("query_string", b""))
            await send(message)

        await self.app(scope, receive, watched)

    def _check(self, path: str, body: bytes, partial: bool = False) -> None:
        self.checked += 1
        try:
            if body.startswith(b"event:") or body.startswith(b"data:"):
                events = [json.loads(block.split("data: ", 1)[1])
                          for block in body.decode().split("\n\n") if block.strip()]
                if partial:
                    valid_events_after(events)
                else:
                    valid_events(events)
            elif path == "/v1/responses/compact":
                valid_compaction(json.loads(body))
            else:
                valid_response(json.loads(body))
        except (AssertionError, ValidationError, ValueError) as exc:
            self.failures.append(f"{path}: {exc}")


class _Started(uvicorn.Server):
    """uvicorn's server, setting ``ready`` once it accepts requests."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class Served:
    """``nonoka serve`` in this process: uvicorn on a thread of its own, a free port;
    every Responses answer held to the spec (``Checked``; ``stop`` fails on a miss)."""

    def __init__(self, project: Path, model: str, *, key: str | None = None,
                 database_url: str | None = None, keys: bool = False) -> None:
        self._ready = threading.Event()
        self._server: uvicorn.Server | None = None
        self._failure: BaseException | None = None
        self.url = ""
        self.port = 0
        self.checked: Checked | None = None
        self.api: Any = None
        """What the routes serve (``nonoka.serve.app.Served``), once started."""
        self._clients: list[OpenAI] = []
        self._args = (project, database_url, model, key, keys)
        self._thread = threading.Thread(target=self._main, name="nonoka-serve", daemon=True)
        self._thread.start()
        assert self._ready.wait(60), "nonoka serve did not start"
        if self._failure is not None:
            raise self._failure

    def _main(self) -> None:
        project, database_url, model, key, with_keys = self._args

        async def main() -> None:
            served, stores = open_served(project, database_url, model)
            self.api = served
            keys = open_keys(project, database_url) if with_keys else None
            try:
                sock = bind("127.0.0.1", 0)
                self.port = sock.getsockname()[1]
                self.url = base_url("127.0.0.1", self.port)
                hosts = frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})
                self.checked = Checked(create_app(served, hosts=hosts,
                                                  gate=Gate(keys, key)))
                config = uvicorn.Config(self.checked, log_level="warning", lifespan="off")
                self._server = _Started(config, self._ready)
                await self._server.serve(sockets=[sock])
            finally:
                for task in list(served.tasks):
                    task.cancel()
                await asyncio.gather(*served.tasks, return_exceptions=True)
                if keys is not None:
                    await keys.close()
                await served.chat.kept.close()
                await stores.close()

        try:
            asyncio.run(main())
        except BaseException as exc:
            self._failure = exc
            self._ready.set()

    def client(self, key: str = "client-key", headers: dict[str, str] | None = None
               ) -> OpenAI:
        """openai-python pointed at this server, closed by ``stop``."""
        opened = OpenAI(base_url=self.url, api_key=key, max_retries=0,
                        default_headers=headers)
        self._clients.append(opened)
        return opened

    def stop(self) -> None:
        for opened in self._clients:
            opened.close()
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(60)
        assert not self._thread.is_alive(), "nonoka serve did not stop"
        assert self.checked is not None
        assert not self.checked.failures, self.checked.failures

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return request(self.port, method, path, body, headers)

    def events(self, body: dict[str, Any], headers: dict[str, str] | None = None
               ) -> list[dict[str, Any]]:
        return sse(self.port, "/v1/responses", {**body, "stream": True}, headers)


def request(port: int, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP request; the status, the headers (lower-case names), the body."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers=sent)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, \
            response.read()
    finally:
        connection.close()


def sse(port: int, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
        ) -> list[dict[str, Any]]:
    """A streamed request's events, as the server sent them (``data:`` lines; each
    ``event:`` line must name its data's type). ``[DONE]`` ends a chat stream."""
    status, got, raw = request(port, "POST", path, body, headers)
    assert status == 200, raw
    assert got["content-type"].startswith("text/event-stream")
    events: list[dict[str, Any]] = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        if fields["data"] == "[DONE]":
            events.append({"type": "[DONE]"})
            continue
        data = json.loads(fields["data"])
        if "event" in fields:
            assert fields["event"] == data["type"]
        events.append(data)
    return events


ADDRESS = re.compile(r"(http://127\.0\.0\.1:(\d+)/v1)")


class ServeProcess:
    """``nonoka serve --port 0`` as a process of its own, in ``project``."""

    def __init__(self, project: Path, model: str, env: dict[str, str]) -> None:
        command = [sys.executable, "-m", "nonoka", "serve", "--port", "0", "--model", model]
        self.process = subprocess.Popen(command, cwd=project, env={**os.environ, **env},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        self.output = ""
        for line in self.process.stdout:
            self.output += line
            found = ADDRESS.search(line)
            if found:
                self.url, self.port = found.group(1), int(found.group(2))
                return
        raise AssertionError(f"nonoka serve printed no address: {self.output}"
                             f"{self.process.stderr.read() if self.process.stderr else ''}")

    def kill(self) -> None:
        """SIGKILL: nothing gets to clean up."""
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)

    def stop(self) -> str:
        """Ctrl+C; returns what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        _, errors = self.process.communicate(timeout=30)
        return errors

    def stop_clean(self) -> None:
        """Ctrl+C, and no traceback on its stderr."""
        errors = self.stop()
        assert "Traceback" not in errors, errors


def openai_upstream(base_url: str, key: str = "sk-up") -> dict[str, str]:
    """A ``ServeProcess``'s environment for an OpenAI-compatible model at ``base_url``
    (the project's SQLite; ``NONOKA_MODEL`` empty, so ``--model`` is the server's)."""
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key, "NONOKA_DATABASE_URL": "",
            "NONOKA_MODEL": ""}


@contextmanager
def served_with(project: Path, model: str, env: Mapping[str, str],
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A ``Served`` in this process whose upstream is named by ``env`` (set for the
    test, with ``NONOKA_MODEL`` unset so ``model`` is the server's)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NONOKA_MODEL", raising=False)
    running = Served(project, model)
    try:
        yield running
    finally:
        running.stop()
