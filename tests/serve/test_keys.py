"""API keys: ``nonoka serve keys`` keeps them hashed; each key's owner reaches only what
its owner's keys stored, and another owner's request for it is answered exactly as for
an id that never existed; a revoked key is refused; keys of one owner share."""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.serve.keys import Gate, MemoryKeys, add_key, digest, open_keys
from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.conftest import MODEL, UPSTREAM_KEY
from tests.serve.harness import Served
from tests.support.processes import run_nonoka

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def make_key(project: Path, name: str, owner: str | None = None) -> str:
    async def make() -> str:
        keys = open_keys(project, None)
        try:
            return (await add_key(keys, name, owner))[1]
        finally:
            await keys.close()
    return asyncio.run(make())


@pytest.fixture
def keyed(project: Path, upstream_env: dict[str, str]) -> Iterator[tuple[Served, dict[str, str]]]:
    secrets_ = {"alice": make_key(project, "alice"),
                "alice-laptop": make_key(project, "alice-laptop", owner="alice"),
                "bob": make_key(project, "bob")}
    running = Served(project, MODEL, keys=True)
    try:
        yield running, secrets_
    finally:
        running.stop()


def as_(served: Served, key: str) -> OpenAI:
    return served.client(key)


def answer(served: Served, key: str, method: str, path: str,
           body: Any = None) -> tuple[int, Any]:
    status, _, raw = served.request(method, path, body, {"Authorization": f"Bearer {key}"})
    return status, json.loads(raw) if raw else None


def never_existed(ident: str) -> str:
    """An id of the same kind and form that names nothing stored."""
    prefix, _, _ = ident.partition("_")
    return f"{prefix}_{secrets.token_hex(24 if prefix == 'resp' else 28)}"


def test_another_owners_ids_are_ids_that_do_not_exist(
        keyed: tuple[Served, dict[str, str]], scripted: list[Any]) -> None:
    served, keys = keyed
    alice = as_(served, keys["alice"])
    responses: list[Any] = []
    for n in range(10):
        scripted += [call("get_weather", {"city": f"c{n}"}), text(f"sunny {n}")]
        first = alice.responses.create(model="m", input=f"Weather {n}?",
                                       tools=[WEATHER])  # type: ignore[list-item]
        [fc] = [i for i in first.output if i.type == "function_call"]
        second = alice.responses.create(
            model="m", previous_response_id=first.id, tools=[WEATHER],  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "20"}])
        responses += [first, second]
    item_ids = [item.id for r in responses for item in r.output if item.id]
    item_ids += [i.id for r in responses for i in alice.responses.input_items.list(r.id).data]

    def probes(ident: str) -> list[tuple[str, str, Any]]:
        if ident.startswith("resp_"):
            return [("GET", f"/v1/responses/{ident}", None),
                    ("GET", f"/v1/responses/{ident}/input_items", None),
                    ("DELETE", f"/v1/responses/{ident}", None),
                    ("POST", "/v1/responses", {"model": "m", "input": "and now?",
                                               "previous_response_id": ident})]
        return [("POST", "/v1/responses", {"model": "m", "input": [
            {"type": "item_reference", "id": ident},
            {"type": "message", "role": "user", "content": "go on"}]})]

    tried = succeeded = 0
    for ident in [r.id for r in responses] + item_ids:
        for (method, path, body), (_, fake_path, fake_body) in zip(
                probes(ident), probes(fake := never_existed(ident)), strict=True):
            status, got = answer(served, keys["bob"], method, path, body)
            fake_status, expected = answer(served, keys["bob"], method, fake_path, fake_body)
            tried += 1
            succeeded += status < 400
            assert status == fake_status and status in (400, 404)
            assert json.dumps(got).replace(ident, "ID") == \
                json.dumps(expected).replace(fake, "ID")
    assert tried >= 100 and succeeded == 0
    # bob's DELETEs deleted nothing; the owner's other key reaches everything
    laptop = as_(served, keys["alice-laptop"])
    assert [laptop.responses.retrieve(r.id).output_text for r in responses] == \
        [r.output_text for r in responses]
    scripted.append(text("still mine"))
    assert laptop.responses.create(model="m", input="more",
                                   previous_response_id=responses[-1].id).output_text == \
        "still mine"
    # bob's own responses are his, and alice's keys do not reach them
    scripted.append(text("bob's"))
    mine = as_(served, keys["bob"]).responses.create(model="m", input="hello")
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(mine.id)


def test_a_request_needs_a_key_once_one_exists_and_revoked_ones_are_refused(
        project: Path, keyed: tuple[Served, dict[str, str]], scripted: list[Any]) -> None:
    served, keys = keyed
    for key in ("", "nk-wrong", keys["bob"][:-1], UPSTREAM_KEY):
        status, body = answer(served, key, "GET", "/v1/models")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        as_(served, "unused").models.list()
    scripted.append(text("hi bob"))
    bob = as_(served, keys["bob"])
    made = bob.responses.create(model="m", input="hi")
    done = run_nonoka(project, "serve", "keys", "revoke", "bob")
    assert done.returncode == 0, done.stderr
    with pytest.raises(openai.AuthenticationError):
        bob.responses.retrieve(made.id)  # refused by this server at once: no cache
    with pytest.raises(openai.NotFoundError):  # and still not alice's
        as_(served, keys["alice"]).responses.retrieve(made.id)


def test_chat_histories_meet_only_their_owners_sessions(
        keyed: tuple[Served, dict[str, str]], scripted: list[Any],
        server: ScriptedOpenAIServer) -> None:
    served, keys = keyed
    scripted += [text("Paris."), text("Alice again."), text("Bob's own.")]
    history: list[Any] = [{"role": "user", "content": "Capital of France?"}]
    named = {"x-nonoka-session": "shared-name"}

    def chat(key: str, messages: list[Any]) -> str:
        status, headers, raw = served.request(
            "POST", "/v1/chat/completions", {"model": "m", "messages": messages},
            {"Authorization": f"Bearer {key}", **named})
        assert status == 200, raw
        return headers["x-nonoka-session-id"]

    first = chat(keys["alice"], history)
    history += [{"role": "assistant", "content": "Paris."},
                {"role": "user", "content": "And Spain?"}]
    assert chat(keys["alice-laptop"], history) == first  # the owner's line, continued
    theirs = chat(keys["bob"], history)
    assert theirs != first  # same name, same history: bob gets a session of his own
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "Capital of France?", "Paris.", "And Spain?"]


def test_keys_are_stored_hashed_and_listed_without_secrets(project: Path) -> None:
    done = run_nonoka(project, "serve", "keys", "add", "ci", "--owner", "team", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    secret = made["secret"]
    assert secret.startswith("nk-") and made["owner"] == "team" and made["name"] == "ci"
    again = run_nonoka(project, "serve", "keys", "add", "ci")
    assert again.returncode != 0 and "exists" in again.stderr
    listed = run_nonoka(project, "serve", "keys", "list", "--json")
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["id"] == made["id"] and row["revoked_at"] is None
    assert secret not in listed.stdout and secret[:12] not in listed.stdout
    database = project / ".nonoka" / "sessions.db"
    with sqlite3.connect(database) as db:
        [(stored,)] = db.execute("SELECT digest FROM serve_keys").fetchall()
    assert stored == digest(secret) and secret.encode() not in database.read_bytes()
    assert run_nonoka(project, "serve", "keys", "revoke", made["id"]).returncode == 0
    missing = run_nonoka(project, "serve", "keys", "revoke", made["id"])
    assert missing.returncode != 0 and "no active key" in missing.stderr
    listed = run_nonoka(project, "serve", "keys", "list")
    assert "revoked" in listed.stdout


def test_the_gate() -> None:
    async def check() -> None:
        keys = MemoryKeys()
        open_gate = Gate(keys, None)
        assert await open_gate.owner("") == "" and await open_gate.owner("anything") == ""
        assert await Gate(keys, None, always=True).owner("anything") is None
        record, secret = await add_key(keys, "k1", "o1")
        assert await open_gate.owner("anything") is None  # a key exists: one is required
        assert await open_gate.owner(secret) == "o1"
        served_key = Gate(keys, "server-key")
        assert await served_key.owner("server-key") == ""
        await keys.revoke(record.key_id, 1.0)
        assert await open_gate.owner(secret) == ""  # no key left: the local owner's again
        assert await served_key.owner(secret) is None
    asyncio.run(check())


def test_binding_beyond_loopback_takes_a_stored_key(project: Path,
                                                    upstream_env: dict[str, str]) -> None:
    env = {**upstream_env, "NONOKA_SERVE_KEY": ""}
    done = run_nonoka(project, "serve", "--host", "0.0.0.0", "--model", MODEL, env=env)
    assert done.returncode == 2 and "nonoka serve keys add" in done.stderr


def test_a_summary_sent_word_for_word_finds_only_its_owners_session(
        keyed: tuple[Served, dict[str, str]], scripted: list[Any],
        server: ScriptedOpenAIServer, project: Path) -> None:
    """A history that opens with a compaction summary finds the session the summary was
    recorded for (the summary rule), but only among its owner's sessions: another
    owner's client sending the same words gets a session of its own, and the model never
    sees the first owner's conversation."""
    from nonoka.bridge.choose import remember_summary
    from nonoka.store.project import open_project_stores

    served, keys = keyed
    summary = "SUMMARY: alice asked about her private project plans."
    scripted += [text("Noted, secret plan."), text("Bob's own."), text("Alice's again.")]

    def chat(key: str, messages: list[Any]) -> str:
        status, headers, raw = served.request(
            "POST", "/v1/chat/completions", {"model": "m", "messages": messages},
            {"Authorization": f"Bearer {key}"})
        assert status == 200, raw
        return headers["x-nonoka-session-id"]

    alices = chat(keys["alice"], [{"role": "user", "content": "ALICE-PRIVATE plan"}])

    async def record() -> None:  # as her client's compaction would have recorded it
        stores = open_project_stores(project, None)
        try:
            assert await remember_summary(stores.index, alices, summary)
        finally:
            await stores.close()
    asyncio.run(record())

    after = [{"role": "assistant", "content": summary}, {"role": "user", "content": "go on"}]
    bobs = chat(keys["bob"], after)
    assert bobs != alices
    sent = json.dumps(server.requests[-1]["messages"])
    assert "ALICE-PRIVATE" not in sent and "secret plan" not in sent
    assert chat(keys["alice-laptop"], after) == alices  # her own client finds her line
