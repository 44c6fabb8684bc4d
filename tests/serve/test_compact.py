"""``POST /v1/responses/compact`` through the official client: exactly one
``compaction`` item (held to the spec's ``CompactResource`` by the harness), the whole
conversation kept behind it in the session, and a request that sends the item back is
sent the summary in the conversation's place."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.serve.compaction import PROMPT, SUMMARY_PREFIX
from nonoka.testing import text
from nonoka.testing.server import HttpError, ScriptedOpenAIServer
from tests.serve.harness import Served


def sent(server: ScriptedOpenAIServer, index: int = -1) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in server.requests[index]["messages"]]


def test_a_chain_compacted_and_continued(client: OpenAI, scripted: list[Any],
                                         served: Served, server: ScriptedOpenAIServer) -> None:
    scripted += [text("Noted: papaya."), text("Noted: mango."),
                 text("The user named two fruits: papaya, then mango."), text("papaya")]
    first = client.responses.create(model="m", input="Remember papaya.")
    second = client.responses.create(model="m", input="And mango.",
                                     previous_response_id=first.id)
    compacted = client.responses.compact(model="m", previous_response_id=second.id)
    assert compacted.object == "response.compaction"
    [item] = compacted.output
    assert item.type == "compaction" and item.encrypted_content
    assert sent(server) == [("user", "Remember papaya."), ("assistant", "Noted: papaya."),
                            ("user", "And mango."), ("assistant", "Noted: mango."),
                            ("user", PROMPT)]  # the compaction saw the whole conversation
    # Codex's next turn: the compaction item in place of the conversation
    following: Any = [item.to_dict(),
                      {"type": "message", "role": "user", "content": "Which came first?"}]
    later = client.responses.create(model="m", store=False, input=following)
    assert later.output_text == "papaya"
    assert sent(server) == [
        ("user", SUMMARY_PREFIX + "The user named two fruits: papaya, then mango."),
        ("user", "Which came first?")]
    # nothing is lost: the compaction is a stored response on the conversation's line
    behind = client.responses.retrieve(compacted.id)
    assert behind.previous_response_id == second.id
    assert behind.output_text == "The user named two fruits: papaya, then mango."
    status, _, raw = served.request("GET", f"/v1/responses/{second.id}")
    assert status == 200 and json.loads(raw)["output"][0]["content"][0]["text"] == \
        "Noted: mango."


def test_a_history_sent_whole_is_compacted(client: OpenAI, scripted: list[Any],
                                           server: ScriptedOpenAIServer) -> None:
    scripted.append(text("Summary: a greeting."))
    history: Any = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "hello"}]}]
    compacted = client.responses.compact(model="m", input=history,
                                         instructions="You are terse.")
    assert [i.type for i in compacted.output] == ["compaction"]
    assert sent(server) == [("system", "You are terse."), ("user", "hi"),
                            ("assistant", "hello"), ("user", PROMPT)]
    assert compacted.usage.output_tokens > 0


def test_a_failed_compaction_gives_no_item(client: OpenAI, scripted: list[Any]) -> None:
    scripted += [HttpError(502, retry_after=0)] * 4
    with pytest.raises(openai.APIStatusError) as raised:
        client.responses.compact(model="m", input="compact me")
    assert raised.value.status_code == 502


def test_a_foreign_compaction_item_is_refused(client: OpenAI) -> None:
    foreign: Any = [{"type": "compaction", "id": "cmp_x", "encrypted_content": "gAAAAB..."},
                    {"type": "message", "role": "user", "content": "go on"}]
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", input=foreign)
    assert raised.value.param == "input[0].encrypted_content"


def test_a_compaction_trigger_streams_exactly_one_compaction_item(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    scripted += [text("Summary: the user said hi."), text("hi again")]
    events = served.events({"model": "m", "store": False, "tools": [], "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "hello"}]},
        {"type": "compaction_trigger"}]})
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in done] == ["compaction"]
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["compaction"]
    assert not [e for e in events if e["type"] == "response.output_text.delta"]
    assert sent(server) == [("user", "hi"), ("assistant", "hello"), ("user", PROMPT)]
    status, _, raw = served.request("POST", "/v1/responses", {"model": "m", "input": [
        done[0], {"type": "message", "role": "user", "content": "again"}]})
    assert status == 200, raw
    assert sent(server) == [("user", SUMMARY_PREFIX + "Summary: the user said hi."),
                            ("user", "again")]
