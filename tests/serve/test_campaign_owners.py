"""Campaign: 1,000 requests by one key's owner with another owner's ids — responses
(get, stream again, delete, cancel, input items, ``previous_response_id``, compact),
items (``item_reference``), conversations and their items. None succeeds and each is
answered exactly as the same request with an id that never existed; the owner still has
everything afterwards. Keys are made by ``nonoka serve keys add``."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from tests.serve.conftest import MODEL
from tests.serve.harness import Served
from tests.support.processes import run_nonoka

REQUESTS = 1000
Probe = tuple[str, str, Any]


def add_key(project: Path, name: str) -> str:
    done = run_nonoka(project, "serve", "keys", "add", name, "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["secret"])


@pytest.fixture
def keyed(project: Path, upstream_env: dict[str, str]) -> Iterator[tuple[Served, str, str]]:
    alice, bob = add_key(project, "alice"), add_key(project, "bob")
    running = Served(project, MODEL, keys=True)
    try:
        yield running, alice, bob
    finally:
        running.stop()


def fake(ident: str) -> str:
    """An id of the same kind and length that names nothing stored."""
    prefix, _, rest = ident.partition("_")
    return f"{prefix}_{secrets.token_hex(len(rest))[:len(rest)]}"


def response_probes(ident: str) -> list[Probe]:
    return [("GET", f"/v1/responses/{ident}", None),
            ("GET", f"/v1/responses/{ident}?stream=true&starting_after=0", None),
            ("GET", f"/v1/responses/{ident}/input_items", None),
            ("POST", f"/v1/responses/{ident}/cancel", None),
            ("DELETE", f"/v1/responses/{ident}", None),
            ("POST", "/v1/responses", {"model": "m", "input": "mine now?",
                                       "previous_response_id": ident}),
            ("POST", "/v1/responses", {"model": "m", "input": "mine now?", "stream": True,
                                       "previous_response_id": ident}),
            ("POST", "/v1/responses/compact", {"model": "m", "previous_response_id": ident})]


def item_probes(ident: str) -> list[Probe]:
    return [("POST", "/v1/responses", {"model": "m", "input": [
        {"type": "item_reference", "id": ident},
        {"type": "message", "role": "user", "content": "go on"}]})]


def conversation_probes(ident: str) -> list[Probe]:
    return [("GET", f"/v1/conversations/{ident}", None),
            ("POST", f"/v1/conversations/{ident}", {"metadata": {"taken": "yes"}}),
            ("GET", f"/v1/conversations/{ident}/items", None),
            ("POST", f"/v1/conversations/{ident}/items", {"items": [
                {"type": "message", "role": "user", "content": "slipped in"}]}),
            ("POST", "/v1/responses", {"model": "m", "input": "hi", "conversation": ident}),
            ("POST", "/v1/responses", {"model": "m", "input": "hi",
                                       "conversation": {"id": ident}}),
            ("DELETE", f"/v1/conversations/{ident}", None)]


def conversation_item_probes(cid: str, item: str) -> list[Probe]:
    return [("GET", f"/v1/conversations/{cid}/items/{item}", None),
            ("DELETE", f"/v1/conversations/{cid}/items/{item}", None)]


def paired(responses: list[str], items: list[str], cid: str, conversation_items: list[str]
           ) -> list[tuple[str, str, list[Probe], list[Probe]]]:
    """Each id with a forged one, and the same requests made with each."""
    probes = []
    for ident in responses:
        forged = fake(ident)
        probes.append((ident, forged, response_probes(ident), response_probes(forged)))
    for ident in items:
        forged = fake(ident)
        probes.append((ident, forged, item_probes(ident), item_probes(forged)))
    forged = fake(cid)
    probes.append((cid, forged, conversation_probes(cid), conversation_probes(forged)))
    for ident in conversation_items:
        forged = fake(ident)
        probes.append((ident, forged, conversation_item_probes(cid, ident),
                       conversation_item_probes(cid, forged)))
    return probes


def test_a_thousand_requests_with_another_owners_ids_all_find_nothing(
        keyed: tuple[Served, str, str], scripted: list[Any]) -> None:
    served, alice_key, bob_key = keyed

    def as_(key: str, method: str, path: str, body: Any = None) -> tuple[int, str]:
        status, _, raw = served.request(method, path, body, {"Authorization": f"Bearer {key}"})
        return status, raw.decode()

    def alice(method: str, path: str, body: Any = None) -> Any:
        status, raw = as_(alice_key, method, path, body)
        assert status == 200, raw
        return json.loads(raw)

    held, asked = threading.Event(), threading.Event()

    def slow(body: dict[str, Any]) -> Any:
        asked.set()
        assert held.wait(120)
        return text("finished after all")

    scripted.extend(text(f"answer {n}") for n in range(5))
    first = alice("POST", "/v1/responses", {"model": "m", "input": "q0"})
    responses = [first]
    for n in range(1, 4):
        responses.append(alice("POST", "/v1/responses", {
            "model": "m", "input": f"q{n}", "previous_response_id": responses[-1]["id"]}))
    conversation = alice("POST", "/v1/conversations", {"items": [
        {"type": "message", "role": "user", "content": "before"}], "metadata": {"k": "v"}})
    cid = conversation["id"]
    responses.append(alice("POST", "/v1/responses", {"model": "m", "input": "in it",
                                                      "conversation": cid}))
    scripted.append(slow)
    running = alice("POST", "/v1/responses", {"model": "m", "input": "long one",
                                              "background": True})
    assert asked.wait(60)  # it runs while bob tries to cancel it
    responses.append(running)
    item_ids = [i["id"] for r in responses[:-1] for i in r["output"]]
    item_ids += [i["id"] for r in responses[:-1]
                 for i in alice("GET", f"/v1/responses/{r['id']}/input_items")["data"]]
    conversation_items = [i["id"] for i in alice("GET", f"/v1/conversations/{cid}/items")["data"]]
    probes = paired([r["id"] for r in responses], item_ids, cid, conversation_items)
    tried, succeeded, differed = 0, 0, []
    while tried < REQUESTS:
        for ident, forged, real, made_up in probes:
            for (method, path, body), (_, fake_path, fake_body) in zip(real, made_up,
                                                                      strict=True):
                status, got = as_(bob_key, method, path, body)
                fake_status, expected = as_(bob_key, method, fake_path, fake_body)
                tried += 1
                succeeded += status < 400
                if (status, got.replace(ident, "ID")) != (
                        fake_status, expected.replace(forged, "ID")) or status not in (
                        400, 404):
                    differed.append((method, path, body, status, got, fake_status, expected))
    assert succeeded == 0 and differed == [], differed[:3]
    assert tried >= REQUESTS
    # nothing of alice's was touched: every response, item and the conversation remain
    held.set()
    for r in responses[:-1]:
        assert alice("GET", f"/v1/responses/{r['id']}")["output"] == r["output"]
    got = alice("GET", f"/v1/conversations/{cid}")
    assert got["metadata"] == {"k": "v"}
    assert [i["id"] for i in alice("GET", f"/v1/conversations/{cid}/items")["data"]] == \
        conversation_items
    status, raw = as_(alice_key, "GET", f"/v1/responses/{running['id']}?stream=true")
    assert status == 200 and "finished after all" in raw and "response.completed" in raw
