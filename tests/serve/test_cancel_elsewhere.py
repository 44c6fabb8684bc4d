"""Cancelling a background response that another ``nonoka serve`` process is making:
two processes on one database (a SQLite file, a PostgreSQL schema), the official client
talking to each. The model streams part of an answer and holds its stream open; the
cancel sent to the other process stops the turn, keeps what streamed, and the session
goes on. Another key's cancel finds nothing, and a response whose process died is
answered as stored."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import DropConnection, Linger, ScriptedOpenAIServer
from tests.pg import schema_url, temp_schema
from tests.serve.conftest import MODEL
from tests.serve.harness import ServeProcess
from tests.support.processes import run_nonoka

PARTIAL = "the first half of an answer that never ends"


@dataclass
class Pair:
    """Two server processes on one database; alice's client for each, bob's for the
    second."""

    processes: list[ServeProcess]
    one: OpenAI
    other: OpenAI
    bob: OpenAI


def add_key(project: Path, name: str, env: dict[str, str]) -> str:
    done = run_nonoka(project, "serve", "keys", "add", name, "--json",
                      env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["secret"])


@pytest.fixture(params=["sqlite", "postgres"])
def pair(request: pytest.FixtureRequest, project: Path,
         upstream_env: dict[str, str]) -> Iterator[Pair]:
    with ExitStack() as stack:
        url = schema_url(stack.enter_context(temp_schema())) \
            if request.param == "postgres" else ""
        env = {**upstream_env, "NONOKA_DATABASE_URL": url}
        alice, bob = add_key(project, "alice", env), add_key(project, "bob", env)
        started: list[ServeProcess] = []
        try:
            started += [ServeProcess(project, MODEL, env) for _ in range(2)]
            clients = [stack.enter_context(OpenAI(base_url=process.url, api_key=key,
                                                  max_retries=0))
                       for process, key in ((started[0], alice), (started[1], alice),
                                            (started[1], bob))]
            yield Pair(started, *clients)
        finally:
            errors = [process.stop() for process in started]
            assert not [e for e in errors if "Traceback" in e], errors


def hanging(asked: threading.Event) -> Any:
    """The model: streams ``PARTIAL``, then holds the stream open until hung up on."""
    def step(body: dict[str, Any]) -> Any:
        asked.set()
        return Linger(DropConnection(PARTIAL))
    return step


def streamed_text(client: OpenAI, response_id: str) -> str:
    """Attached to the background response: its text once all of ``PARTIAL`` is in its
    stream (which holds only what its timeline holds)."""
    said = ""
    with client.responses.retrieve(response_id, stream=True) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                said += event.delta
                if said == PARTIAL:
                    return said
    raise AssertionError(f"the stream ended having said {said!r}")


def output_text(response: Any) -> str:
    return "".join(part.text for item in response.output if item.type == "message"
                   for part in item.content if part.type == "output_text")


def test_a_cancel_sent_to_the_other_process_stops_the_response(
        pair: Pair, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    asked = threading.Event()
    scripted += [hanging(asked), text("after the cancel")]
    made = pair.one.responses.create(model="m", input="long task", background=True)
    assert made.status == "queued"
    assert streamed_text(pair.one, made.id) == PARTIAL
    with pytest.raises(openai.NotFoundError):  # another owner's: as if it never existed
        pair.bob.responses.cancel(made.id)
    assert pair.other.responses.retrieve(made.id).status == "in_progress"
    cancelled = pair.other.responses.cancel(made.id)
    assert cancelled.status == "cancelled", cancelled
    assert output_text(cancelled) == PARTIAL  # what streamed before the cancel is kept
    assert pair.one.responses.retrieve(made.id).model_dump() == \
        pair.other.responses.retrieve(made.id).model_dump() == cancelled.model_dump()
    assert pair.one.responses.cancel(made.id).status == "cancelled"  # again: as it is
    later = pair.other.responses.create(model="m", input="go on",
                                        previous_response_id=made.id)
    assert later.output_text == "after the cancel"
    assert [m["content"] for m in server.requests[-1]["messages"]] == ["long task", "go on"]
    assert len(server.requests) == 2


def test_a_cancel_of_a_response_whose_process_died_answers_it_as_stored(
        pair: Pair, scripted: list[Any]) -> None:
    asked = threading.Event()
    scripted.append(hanging(asked))
    made = pair.one.responses.create(model="m", input="long task", background=True)
    assert streamed_text(pair.one, made.id) == PARTIAL
    pair.processes[0].kill()
    cancelled = pair.other.responses.cancel(made.id)
    assert cancelled.status == "incomplete"
    assert cancelled.model_dump()["incomplete_details"] == {"reason": "interrupted"}
    assert pair.other.responses.retrieve(made.id).model_dump() == cancelled.model_dump()
