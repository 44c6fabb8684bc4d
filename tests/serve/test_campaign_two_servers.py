"""Campaign: two ``nonoka serve`` processes on one PostgreSQL database take turns with
one conversation — each request to the other process, continuing what the first one
stored — as a ``previous_response_id`` chain and as a Conversation. Nothing is lost:
every turn is there, in order, and every model request carries the whole path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.pg import schema_url, temp_schema
from tests.serve.conftest import MODEL
from tests.serve.harness import ServeProcess, request

TURNS = 30


@pytest.fixture
def pair(project: Path, upstream_env: dict[str, str]) -> Iterator[list[ServeProcess]]:
    with temp_schema() as schema:
        env = {**upstream_env, "NONOKA_DATABASE_URL": schema_url(schema)}
        started: list[ServeProcess] = []
        try:
            started += [ServeProcess(project, MODEL, env) for _ in range(2)]
            yield started
        finally:
            errors = [process.stop() for process in started]
            assert not [e for e in errors if "Traceback" in e], errors


def post(process: ServeProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = request(process.port, "POST", path, body)
    assert status == 200, raw
    return dict(json.loads(raw))


def sent(server: ScriptedOpenAIServer) -> list[str]:
    return [m["content"] for m in server.requests[-1]["messages"]]


def test_two_processes_take_turns_with_one_chain_and_one_conversation(
        pair: list[ServeProcess], scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    scripted.extend(lambda body: text(f"re {body['messages'][-1]['content']}")
                    for _ in range(2 * TURNS))
    path: list[str] = []
    previous: str | None = None
    ids = []
    conversation = post(pair[1], "/v1/conversations", {"items": []})["id"]
    talked: list[str] = []
    for n in range(TURNS):
        here, there = pair[n % 2], pair[(n + 1) % 2]
        body: dict[str, Any] = {"model": "m", "input": f"chain {n}"}
        if previous:
            body["previous_response_id"] = previous
        made = post(here, "/v1/responses", body)
        path += [f"chain {n}", f"re chain {n}"]
        assert sent(server) == path[:-1], f"turn {n} on process {n % 2}"
        previous = made["id"]
        ids.append(previous)
        post(there, "/v1/responses", {"model": "m", "input": f"talk {n}",
                                      "conversation": conversation})
        talked += [f"talk {n}", f"re talk {n}"]
        assert sent(server) == talked[:-1], f"conversation turn {n}"
    for process in pair:  # each sees every turn the other stored, in order
        status, _, raw = request(process.port, "GET",
                                 f"/v1/responses/{ids[-1]}/input_items?order=asc&limit=100")
        assert status == 200, raw
        assert [i["content"][0]["text"] for i in json.loads(raw)["data"]] == [
            f"chain {TURNS - 1}"]
        for n, ident in enumerate(ids):
            status, _, raw = request(process.port, "GET", f"/v1/responses/{ident}")
            assert status == 200 and json.loads(raw)["output"][0]["content"][0]["text"] == \
                f"re chain {n}"
        status, _, raw = request(process.port, "GET",
                                 f"/v1/conversations/{conversation}/items?order=asc&limit=100")
        assert status == 200, raw
        assert [i["content"][0]["text"] for i in json.loads(raw)["data"]] == talked
    assert len(server.requests) == 2 * TURNS
