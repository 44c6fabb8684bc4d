"""A retry of a request that names no session (no ``previous_response_id``) is
recognized by a server that did not serve the first request — the same one restarted,
or another process on the same PostgreSQL database — from the timelines of its owner's
newest sessions: it gets the stored response, or the failed one made again in its place,
and never a second session. Another owner's identical retry finds nothing of it; a
request without a retry signal is never matched (and does not look)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.store.project import open_project_stores
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.pg import schema_url, temp_schema
from tests.serve.conftest import MODEL
from tests.serve.harness import Served, ServeProcess, request
from tests.serve.test_campaign_owners import add_key
from tests.serve.test_retries import ADAPTER_ATTEMPTS, UPSTREAM_502

RETRY = {"x-stainless-retry-count": "1"}


def sessions(project: Path, url: str | None = None) -> dict[str, tuple[int, int, int]]:
    """Each session's entries, its ``response`` timeline entries, and how many response
    ids they name (a response made again in place keeps its id)."""
    async def read() -> dict[str, tuple[int, int, int]]:
        async with open_project_stores(project, url) as stores:
            found = {}
            for row in await stores.index.list_sessions(limit=1000):
                state = await stores.checkpoints.load_session(row.session_id)
                events = await stores.events.list_events(row.session_id, limit=10_000)
                asked = [e.data["id"] for e in events if e.kind == "response"]
                found[row.session_id] = (len(state.memory_entries) if state else 0,
                                         len(asked), len(set(asked)))
            return found
    return asyncio.run(read())


def restarted(served: Served, project: Path, **kw: Any) -> Served:
    served.stop()
    return Served(project, MODEL, **kw)


def test_a_retry_after_a_restart_gets_the_stored_response(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted += [text("first"), text("never asked")]
    body = {"model": "m", "input": "a new conversation"}
    status, _, made = served.request("POST", "/v1/responses", body)
    assert status == 200  # ... and the client lost it; its SDK sends it again
    again = restarted(served, project)
    try:
        retried = again.request("POST", "/v1/responses", body, RETRY)
        streamed = again.events(body, RETRY)
    finally:
        again.stop()
    assert retried[0] == 200 and json.loads(retried[2]) == json.loads(made)
    assert streamed[-1]["response"]["id"] == json.loads(made)["id"]
    assert len(server.requests) == 1
    assert list(sessions(project).values()) == [(2, 1, 1)]


def test_a_retry_after_a_502_and_a_restart_makes_the_response_again_in_place(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted += [UPSTREAM_502] * ADAPTER_ATTEMPTS + [text("answered")]
    body = {"model": "m", "input": "a question"}
    assert served.request("POST", "/v1/responses", body)[0] == 502
    again = restarted(served, project)
    try:
        status, _, raw = again.request("POST", "/v1/responses", body, RETRY)
        made = json.loads(raw)
        assert status == 200 and made["output"][0]["content"][0]["text"] == "answered"
        assert json.loads(again.request("GET", f"/v1/responses/{made['id']}")[2]) == made
    finally:
        again.stop()
    assert len(server.requests) == ADAPTER_ATTEMPTS + 1
    assert [m["content"] for m in server.requests[-1]["messages"]] == ["a question"]
    # one session: the question stored once, its answer, the response asked twice
    assert list(sessions(project).values()) == [(2, 2, 1)]


def test_a_conversation_retry_after_a_restart_makes_the_turn_again_in_place(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted += [UPSTREAM_502] * ADAPTER_ATTEMPTS + [text("answered")]
    status, _, raw = served.request("POST", "/v1/conversations", {"items": []})
    assert status == 200
    body = {"model": "m", "input": "in the conversation",
            "conversation": json.loads(raw)["id"]}
    assert served.request("POST", "/v1/responses", body)[0] == 502
    again = restarted(served, project)
    try:
        status, _, raw = again.request("POST", "/v1/responses", body, RETRY)
    finally:
        again.stop()
    assert status == 200, raw
    assert json.loads(raw)["output"][0]["content"][0]["text"] == "answered"
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "in the conversation"]
    assert list(sessions(project).values()) == [(2, 2, 1)]


@pytest.fixture
def pair(project: Path, upstream_env: dict[str, str]
         ) -> Iterator[tuple[list[ServeProcess], str]]:
    with temp_schema() as schema:
        url = schema_url(schema)
        started: list[ServeProcess] = []
        try:
            started += [ServeProcess(project, MODEL, {**upstream_env,
                                                      "NONOKA_DATABASE_URL": url})
                        for _ in range(2)]
            yield started, url
        finally:
            errors = [process.stop() for process in started]
            assert not [e for e in errors if "Traceback" in e], errors


def test_a_retry_in_another_process_gets_the_response_the_first_made(
        pair: tuple[list[ServeProcess], str], scripted: list[Any],
        server: ScriptedOpenAIServer, project: Path) -> None:
    (one, other), url = pair
    scripted += [text("from one"), *[UPSTREAM_502] * ADAPTER_ATTEMPTS, text("made again")]
    body = {"model": "m", "input": "served by one"}
    status, _, made = request(one.port, "POST", "/v1/responses", body)
    assert status == 200
    status, _, retried = request(other.port, "POST", "/v1/responses", body, RETRY)
    assert status == 200 and json.loads(retried) == json.loads(made)
    failing = {"model": "m", "input": "failed in one"}
    assert request(one.port, "POST", "/v1/responses", failing)[0] == 502
    status, _, raw = request(other.port, "POST", "/v1/responses", failing, RETRY)
    assert status == 200 and b"made again" in raw
    assert len(server.requests) == 1 + ADAPTER_ATTEMPTS + 1
    assert sorted(sessions(project, url).values()) == [(2, 1, 1), (2, 2, 1)]


def test_another_owners_identical_retry_finds_nothing_of_the_first(
        project: Path, upstream_env: dict[str, str], scripted: list[Any],
        server: ScriptedOpenAIServer) -> None:
    alice, bob = ({"Authorization": f"Bearer {add_key(project, name)}"}
                  for name in ("alice", "bob"))
    scripted += [text("for alice"), text("for bob")]
    body = {"model": "m", "input": "the same words"}
    served = Served(project, MODEL, keys=True)
    status, _, made = served.request("POST", "/v1/responses", body, alice)
    assert status == 200
    again = restarted(served, project, keys=True)
    try:
        status, _, theirs = again.request("POST", "/v1/responses", body, {**bob, **RETRY})
        assert status == 200 and b"for bob" in theirs
        assert json.loads(theirs)["id"] != json.loads(made)["id"]
        status, _, mine = again.request("POST", "/v1/responses", body, {**alice, **RETRY})
        assert status == 200 and json.loads(mine) == json.loads(made)
    finally:
        again.stop()
    assert len(server.requests) == 2
    assert sorted(sessions(project).values()) == [(2, 1, 1), (2, 1, 1)]


def test_a_request_without_a_retry_signal_is_never_matched_nor_looked_up(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted += [text("one"), text("two")]
    body = {"model": "m", "input": "same words"}
    first = json.loads(served.request("POST", "/v1/responses", body)[2])
    again = restarted(served, project)
    looked: list[Any] = []
    responses = again.api.responses
    listed = responses._retry_sessions

    async def noted(request: Any) -> Any:
        looked.append(request)
        return await listed(request)

    monkeypatch.setattr(responses, "_retry_sessions", noted)
    try:
        second = json.loads(again.request("POST", "/v1/responses", body)[2])
    finally:
        again.stop()
    assert first["output"][0]["content"][0]["text"] == "one"
    assert second["output"][0]["content"][0]["text"] == "two"
    assert first["id"] != second["id"] and len(server.requests) == 2 and looked == []
