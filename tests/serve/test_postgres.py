"""The same server on PostgreSQL: a chain, a fork and a chat conversation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.serve.keys import add_key, digest, open_keys
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.pg import schema_url, temp_schema
from tests.serve.conftest import MODEL
from tests.serve.harness import Served, request


@pytest.fixture
def pg_served(project: Path, upstream_env: dict[str, str],
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    with temp_schema() as schema:
        url = schema_url(schema)
        monkeypatch.setenv("NONOKA_DATABASE_URL", url)  # as the command sets it for chat
        running = Served(project, MODEL, database_url=url)
        try:
            yield running
        finally:
            running.stop()


def post(served: Served, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = request(served.port, "POST", path, body)
    assert status == 200, raw
    return dict(json.loads(raw))


def test_lineage_on_postgres(pg_served: Served, scripted: list[Any],
                             server: ScriptedOpenAIServer) -> None:
    scripted.extend(lambda body: text(f"re {body['messages'][-1]['content']}")
                    for _ in range(5))
    root = post(pg_served, "/v1/responses", {"model": "m", "input": "root"})
    post(pg_served, "/v1/responses", {"model": "m", "input": "a",
                                      "previous_response_id": root["id"]})
    b = post(pg_served, "/v1/responses", {"model": "m", "input": "b",
                                          "previous_response_id": root["id"]})
    assert [m["content"] for m in server.requests[-1]["messages"]] == ["root", "re root", "b"]
    status, _, raw = request(pg_served.port, "GET", f"/v1/responses/{b['id']}")
    assert status == 200 and json.loads(raw)["output"][0]["content"][0]["text"] == "re b"
    chat = post(pg_served, "/v1/chat/completions",
                {"model": "m", "messages": [{"role": "user", "content": "chat"}]})
    assert chat["choices"][0]["message"]["content"] == "re chat"
    post(pg_served, "/v1/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "chat"}, {"role": "assistant", "content": "re chat"},
        {"role": "user", "content": "more"}]})
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "chat", "re chat", "more"]


def test_keys_and_owners_on_postgres(project: Path, upstream_env: dict[str, str],
                                     scripted: list[Any],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with temp_schema() as schema:
        url = schema_url(schema)
        monkeypatch.setenv("NONOKA_DATABASE_URL", url)

        async def make() -> list[str]:
            keys = open_keys(project, url)
            try:
                made = [(await add_key(keys, name))[1] for name in ("alice", "bob", "gone")]
                assert [r.name for r in await keys.revoke("gone", 1.0)] == ["gone"]
                assert await keys.owner(digest(made[2])) is None
                return made
            finally:
                await keys.close()

        alice, bob, gone = asyncio.run(make())
        running = Served(project, MODEL, database_url=url, keys=True)
        try:
            scripted.append(text("alice's"))
            status, _, raw = request(running.port, "POST", "/v1/responses",
                                     {"model": "m", "input": "hi"},
                                     {"Authorization": f"Bearer {alice}"})
            assert status == 200, raw
            made = json.loads(raw)["id"]
            for key, expected in ((alice, 200), (bob, 404), (gone, 401), ("", 401)):
                status, _, raw = request(running.port, "GET", f"/v1/responses/{made}",
                                         headers={"Authorization": f"Bearer {key}"})
                assert status == expected, raw
        finally:
            running.stop()


def test_conversations_and_background_streams_on_postgres(pg_served: Served,
                                                          scripted: list[Any]) -> None:
    scripted += [text("first answer"), text("in the background")]
    made = post(pg_served, "/v1/conversations", {"items": [
        {"type": "message", "role": "user", "content": str(n)} for n in range(20)]})
    for n in range(20, 25):
        post(pg_served, f"/v1/conversations/{made['id']}/items",
             {"items": [{"type": "message", "role": "user", "content": str(n)}]})
    answered = post(pg_served, "/v1/responses", {"model": "m", "input": "go",
                                                  "conversation": made["id"]})
    status, _, raw = request(pg_served.port, "GET",
                             f"/v1/conversations/{made['id']}/items?order=asc&limit=100")
    assert status == 200
    items = json.loads(raw)["data"]
    assert [i["content"][0]["text"] for i in items] == [
        *map(str, range(25)), "go", "first answer"]
    assert items[-1]["id"] == answered["output"][0]["id"]
    queued = post(pg_served, "/v1/responses", {"model": "m", "input": "later",
                                                "background": True})
    assert queued["status"] == "queued"
    status, _, raw = request(pg_served.port, "GET",
                             f"/v1/responses/{queued['id']}?stream=true")
    assert status == 200
    events = [json.loads(block.split("data: ", 1)[1])
              for block in raw.decode().split("\n\n") if block.strip()]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "in the background"
