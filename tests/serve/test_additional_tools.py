"""``additional_tools`` input items on ``POST /v1/responses``, with the official ``openai``
client against real ``nonoka serve`` processes: in front of a Chat Completions model the
item's tools are offered as the request's are (and still are to a continuation after a
restart, from the stored item); in front of the Responses API the item goes to the
upstream in its place, again from storage after a restart; listed as itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, OpenAI
from openai.types.responses import ResponseItem
from pydantic import TypeAdapter

from nonoka.testing import call, text
from nonoka.testing.server import (
    HostedItem,
    ResponsesReply,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from tests.serve.harness import ServeProcess, openai_upstream

LOOKUP = {"type": "function", "name": "lookup", "description": "Look a customer up.",
          "parameters": {"type": "object", "properties": {"who": {"type": "string"}},
                         "required": ["who"]}}
ADDED = {"type": "additional_tools", "role": "developer", "tools": [LOOKUP]}
ASKED: list[Any] = [ADDED, {"type": "message", "role": "user", "content": "Who is Aiko?"}]
OUTPUT = [{"type": "function_call_output", "call_id": "call_1", "output": "a customer"}]
ITEM: TypeAdapter[ResponseItem] = TypeAdapter(ResponseItem)


def started(project: Path, model: str, base_url: str) -> ServeProcess:
    return ServeProcess(project, model, openai_upstream(base_url))


def stopped(process: ServeProcess) -> None:
    process.stop_clean()


def client_of(process: ServeProcess) -> OpenAI:
    return OpenAI(base_url=process.url, api_key="client-key", max_retries=0)


def test_a_chat_model_is_offered_the_items_tools_after_a_restart_too(project: Path) -> None:
    with ScriptedOpenAIServer([call("lookup", {"who": "Aiko"}, id="call_1"),
                               text("Aiko is a customer.")]) as chat:
        first = started(project, "openai:scripted-model", chat.base_url)
        try:
            with client_of(first) as client:
                paused = client.responses.create(model="m", input=ASKED)
        finally:
            stopped(first)
        assert [(i.type, getattr(i, "name", None)) for i in paused.output] == \
            [("function_call", "lookup")]
        second = started(project, "openai:scripted-model", chat.base_url)
        try:
            with client_of(second) as client:
                done = client.responses.create(model="m", previous_response_id=paused.id,
                                               input=OUTPUT)  # type: ignore[arg-type]
                listed = client.responses.input_items.list(paused.id, order="asc").data
        finally:
            stopped(second)
        assert chat.rejections == []
    assert done.output_text == "Aiko is a customer."
    for sent in chat.requests:
        assert [t["function"]["name"] for t in sent["tools"]] == ["lookup"]
        assert [m["role"] for m in sent["messages"]][:1] == ["user"]  # no item for it
    assert [i.type for i in listed] == ["additional_tools", "message"]
    shown = listed[0].model_dump(exclude_none=True)
    ITEM.validate_python(shown)
    assert (shown["role"], shown["tools"][0]["name"]) == ("developer", "lookup")


def test_a_responses_model_is_sent_the_item_in_its_place_after_a_restart_too(
        project: Path) -> None:
    asked = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
             "arguments": '{"who": "Aiko"}'}
    with ScriptedResponsesServer([ResponsesReply(output=(HostedItem(asked),)),
                                  ResponsesReply(output=("Aiko is a customer.",))],
                                 strict=["openai_reasoning"]) as upstream:
        first = started(project, "openai-responses:scripted-model", upstream.base_url)
        try:
            with client_of(first) as client:
                paused = client.responses.create(model="m", input=ASKED)
        finally:
            stopped(first)
        second = started(project, "openai-responses:scripted-model", upstream.base_url)
        try:
            with client_of(second) as client:
                done = client.responses.create(model="m", previous_response_id=paused.id,
                                               input=OUTPUT)  # type: ignore[arg-type]
        finally:
            stopped(second)
        assert not upstream.failures, upstream.failures
    assert done.output_text == "Aiko is a customer."
    for sent in upstream.requests:
        assert sent["input"][0] == ADDED
        assert "tools" not in sent or not sent["tools"]
    assert [i["type"] for i in upstream.requests[1]["input"]] == \
        ["additional_tools", "message", "function_call", "function_call_output"]


@pytest.mark.parametrize(("item", "param", "says"), [
    ({**ADDED, "role": "user"}, "input[0].role", "role must be developer"),
    ({**ADDED, "tools": {"lookup": LOOKUP}}, "input[0].tools", "needs a list of tools"),
    ({**ADDED, "tools": [{"type": "function"}]}, "input[0].tools[0].name", "needs a name"),
    ({**ADDED, "tools": [{"type": "web_search"}]}, "input", "additional_tools item"),
])
def test_a_wrong_item_is_a_clear_400(project: Path, item: dict[str, Any], param: str,
                                     says: str) -> None:
    with ScriptedOpenAIServer([]) as chat:
        process = started(project, "openai:scripted-model", chat.base_url)
        try:
            with client_of(process) as client, pytest.raises(BadRequestError) as raised:
                client.responses.create(model="m", input=[item, ASKED[1]])  # type: ignore[list-item]
        finally:
            stopped(process)
    error = json.loads(raised.value.response.text)["error"]
    assert error["param"] == param and says in error["message"], error


def test_a_resent_history_with_other_additional_tools_sends_the_new_ones(
        project: Path) -> None:
    """A client keeping its own history (Codex) resends it each turn on one line: when
    the tools there changed, the upstream is sent the new item, not the stored one."""
    email = {"type": "function", "name": "email", "parameters": {"type": "object"}}
    changed = {**ADDED, "tools": [LOOKUP, email]}
    asked = ASKED[1]
    with ScriptedResponsesServer([ResponsesReply(output=("A customer.",)),
                                  ResponsesReply(output=("Sent.",))],
                                 strict=["openai_reasoning"]) as upstream:
        process = started(project, "openai-responses:scripted-model", upstream.base_url)
        try:
            with client_of(process) as client:
                header = {"session-id": "thread-1"}
                first = client.responses.create(model="m", input=ASKED, store=False,
                                                prompt_cache_key="thread-1",
                                                extra_headers=header)
                again: list[Any] = [
                    changed, asked, *[o.model_dump(exclude_none=True) for o in first.output],
                    {"type": "message", "role": "user", "content": "Email her."}]
                client.responses.create(model="m", input=again, store=False,
                                        prompt_cache_key="thread-1", extra_headers=header)
        finally:
            stopped(process)
        assert not upstream.failures, upstream.failures
    assert upstream.requests[0]["input"][0] == ADDED
    assert upstream.requests[1]["input"][0] == changed
