"""Campaign: ``nonoka serve`` (a process of its own) is killed with SIGKILL at random
moments while streamed and background responses run — once a response's id reached its
client, after a number of its streamed events, once the model was asked — and started
again on the same database. Every response a client saw the id of is then found (never
``previous_response_not_found``), none is left ``in_progress``, and each one is
continued, the model sent exactly its path. Every other cut one that continues another
is first retried as openai-python retries a lost connection: the same response is made
again in its place (same id), once."""

from __future__ import annotations

import http.client
import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nonoka.serve.ids import parse_response_id
from nonoka.testing import text
from nonoka.testing.server import DropConnection, Linger, ScriptedOpenAIServer
from tests.pg import schema_url, temp_schema
from tests.serve.conftest import MODEL, UPSTREAM_KEY
from tests.serve.harness import ServeProcess, request

KINDS = ("stream", "background", "background_stream")
PARTIAL = "half of an answer that never ends"


def session_of(response_id: str) -> str:
    """The session a response id names."""
    point = parse_response_id(response_id)
    assert point is not None, response_id
    return point.session_id


@dataclass
class Sent:
    """One request of a round, and what its client saw."""

    said: str
    parent: str | None
    kind: str
    ident: str | None = None
    events: int = 0
    refused: str = ""


@dataclass
class Upstream:
    """The model: a request whose last message starts with ``hang`` streams part of an
    answer and never ends, unless it is ``retried``; any other is answered ``answer to
    …``. ``asked`` is set as each question arrives."""

    asked: dict[str, threading.Event] = field(default_factory=dict)
    retried: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def question(self, said: str) -> threading.Event:
        with self.lock:
            return self.asked.setdefault(said, threading.Event())

    def __call__(self, body: dict[str, Any]) -> Any:
        said = str(body["messages"][-1]["content"])
        self.question(said).set()
        if said.startswith("hang") and said not in self.retried:
            return Linger(DropConnection(PARTIAL))
        return text(f"answer to {said}")


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, ScriptedOpenAIServer]]:
    model = Upstream()
    with ScriptedOpenAIServer(model) as running:
        yield model, running


class Campaign:
    """Rounds of requests, a kill, a restart and the checks; ``paths`` is what
    continuing from each verified response must send the model."""

    def __init__(self, project: Path, upstream: tuple[Upstream, ScriptedOpenAIServer],
                 seed: int, database_url: str) -> None:
        self.project = project
        self.model, self.server = upstream
        self.env = {"OPENAI_BASE_URL": self.server.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
                    "NONOKA_DATABASE_URL": database_url, "NONOKA_MODEL": ""}
        self.rng = random.Random(seed)
        self.paths: dict[str, list[str]] = {}
        self.count = 0
        self.retries = self.cut = 0
        self.process = ServeProcess(project, MODEL, self.env)

    def round(self) -> None:
        """A few requests at once; one of them decides the moment of the kill."""
        taken: set[str] = set()
        sent = [self._new(taken) for _ in range(self.rng.randint(1, 4))]
        trigger, after = self.rng.choice(sent), self.rng.randint(1, 6)  # a hang streams 9
        moment = self.rng.choice(("id", "events", "asked"))
        kill = threading.Event()
        if moment == "asked":
            threading.Thread(target=self._when_asked, args=(trigger.said, kill),
                             daemon=True).start()
        port = self.process.port
        threads = [threading.Thread(target=self._client, daemon=True, args=(
            port, one, kill if one is trigger else None,
            1 if moment == "id" else after if moment == "events" else 10**9))
            for one in sent]
        for thread in threads:
            thread.start()
        assert kill.wait(120), f"no moment to kill at: {sent}"
        self.process.kill()
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive()
        assert [one.refused for one in sent if one.refused] == []
        self.process = ServeProcess(self.project, MODEL, self.env)
        for one in sent:
            if one.ident is not None:
                self._check(one)

    def _when_asked(self, said: str, kill: threading.Event) -> None:
        if self.model.question(said).wait(120):
            kill.set()

    def _new(self, taken: set[str]) -> Sent:
        """A request from a random response, of a session no other request of the round
        continues: one whose model hangs would hold the others back until the kill."""
        self.count += 1
        free = sorted(p for p in self.paths if session_of(p) not in taken)
        parent = self.rng.choice(free) if free and self.rng.random() > 0.1 else None
        if parent is not None:
            taken.add(session_of(parent))
        words = "hang" if self.rng.random() < 0.6 else "ask"
        return Sent(f"{words} {self.count}", parent, self.rng.choice(KINDS))

    @staticmethod
    def _body(one: Sent) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "m", "input": one.said,
                                "stream": one.kind != "background",
                                "background": one.kind != "stream"}
        if one.parent is not None:
            body["previous_response_id"] = one.parent
        return body

    def _client(self, port: int, one: Sent, kill: threading.Event | None, after: int) -> None:
        body = self._body(one)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            connection.request("POST", "/v1/responses", json.dumps(body),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            if answer.status != 200:
                one.refused = f"{answer.status} {answer.read()!r}"
            elif one.kind == "background":
                one.ident, one.events = json.loads(answer.read())["id"], 1
            else:
                for line in answer:
                    if line.startswith(b"data: "):
                        event = json.loads(line[6:])
                        one.ident = one.ident or event.get("response", {}).get("id")
                        one.events += 1
                        if kill is not None and one.events >= after:
                            kill.set()
        except (OSError, http.client.HTTPException):
            pass  # the server was killed
        finally:
            connection.close()
            if kill is not None:
                kill.set()  # ended before its moment: the kill comes now

    def _check(self, one: Sent) -> None:
        """Found, finished, and continued with exactly its path."""
        assert one.ident is not None
        status, _, raw = request(self.process.port, "GET", f"/v1/responses/{one.ident}")
        assert status == 200, f"{one}: {raw!r}"
        got = json.loads(raw)
        assert got["status"] in ("completed", "incomplete", "failed", "cancelled"), got
        path = [*(self.paths[one.parent] if one.parent else []), one.said]
        if got["status"] != "completed" and one.parent is not None:
            self.cut += 1
            if self.cut % 2:
                got = self._retried(one)
                assert [m["content"] for m in self.server.requests[-1]["messages"]] == path
        if got["status"] == "completed":
            path.append(f"answer to {one.said}")
        self.count += 1
        then = f"after {self.count}"
        status, _, raw = request(self.process.port, "POST", "/v1/responses", {
            "model": "m", "input": then, "previous_response_id": one.ident})
        assert status == 200, f"{one} ({got['status']}): {raw!r}"
        assert json.loads(raw)["status"] == "completed", raw
        sent = [m["content"] for m in self.server.requests[-1]["messages"]]
        assert sent == [*path, then], f"{one} ({got['status']})"
        self.paths[one.ident] = path
        self.paths[json.loads(raw)["id"]] = [*path, then, f"answer to {then}"]

    def _retried(self, one: Sent) -> dict[str, Any]:
        """openai-python's retry of a request whose connection the kill cut (the same
        body, ``x-stainless-retry-count: 1``): the response made again in its place."""
        port = self.process.port
        self.model.retried.add(one.said)
        status, _, raw = request(port, "POST", "/v1/responses", self._body(one),
                                 {"x-stainless-retry-count": "1"})
        assert status == 200, f"retry of {one}: {raw!r}"
        if one.kind != "stream":  # attached to until it ends
            request(port, "GET", f"/v1/responses/{one.ident}?stream=true")
        status, _, raw = request(port, "GET", f"/v1/responses/{one.ident}")
        got = dict(json.loads(raw))
        assert got["status"] == "completed", f"retry of {one}: {got}"
        self.retries += 1
        return got

    def close(self) -> None:
        assert "Traceback" not in self.process.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The project's SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield ""
        return
    with temp_schema() as schema:
        yield schema_url(schema)


def run(project: Path, upstream: tuple[Upstream, ScriptedOpenAIServer], database_url: str,
        kills: int, seed: int) -> None:
    campaign = Campaign(project, upstream, seed, database_url)
    try:
        for _ in range(kills):
            campaign.round()
    finally:
        campaign.close()
    assert len(campaign.paths) >= kills and campaign.retries > 0


def test_ten_kills_leave_every_seen_response_found_finished_and_continuable(
        project: Path, upstream: tuple[Upstream, ScriptedOpenAIServer],
        database_url: str) -> None:
    run(project, upstream, database_url, 10, seed=3)


@pytest.mark.slow
def test_three_hundred_kills(project: Path, upstream: tuple[Upstream, ScriptedOpenAIServer],
                             database_url: str) -> None:
    run(project, upstream, database_url, 300, seed=300)
