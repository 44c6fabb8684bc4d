"""Hosted, custom and namespace tools, and ``include``, on ``POST /v1/responses``.

A real ``nonoka serve`` process in front of the scripted Responses API endpoint (which
holds the hosted items it streams to the ``openai`` SDK's types), the official
``openai`` client, and every streamed event held to the ``openai`` SDK's event types
and, where the OpenResponses spec models the event and its item, to the spec too.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from openai import BadRequestError, OpenAI
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent, ToolParam
from pydantic import BaseModel, TypeAdapter

from nonoka.testing.server import (
    HostedItem,
    ReasoningItem,
    ResponsesReply,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from tests.serve.harness import EVENT_MODELS, ServeProcess, request, sse

MODEL = "openai-responses:scripted-model"
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9Q"
                       "DwADhgGAWjR9awAAAABJRU5ErkJggg==")
SPEC_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
"""The item types the OpenResponses spec models."""
OPENAI_EVENTS: dict[str, type[BaseModel]] = {
    get_args(model.model_fields["type"].annotation)[0]: model
    for model in get_args(get_args(ResponseStreamEvent)[0])}
"""Every streaming event of the ``openai`` SDK, by its ``type``."""
OPENAI_ITEM: TypeAdapter[ResponseOutputItem] = TypeAdapter(ResponseOutputItem)

WEB_SEARCH = {"id": "ws_67c9fa0502748190b7dd390736892e100be649c1a5ff9609",
              "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "weather in Kyoto today",
                         "sources": [{"type": "url", "url": "https://weather.example/kyoto"}]}}
CITED = {"id": "msg_67c9fa077e288190af08fdffda2e34f20be649c1a5ff9609", "type": "message",
         "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Sunny, 21°C.", "logprobs": [],
                      "annotations": [{"type": "url_citation", "start_index": 0,
                                       "end_index": 12, "title": "Kyoto weather",
                                       "url": "https://weather.example/kyoto"}]}]}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"
APPLY_PATCH = {"type": "custom", "name": "apply_patch",
               "description": "Edit files with a patch.",
               "format": {"type": "grammar", "syntax": "lark",
                          "definition": "start: /(.|\\n)+/"}}


def valid(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events``: each an event of the ``openai`` SDK's types and, where the spec models
    it (its item, the response's items), of the OpenResponses spec; numbered from 0,
    from ``response.created`` to the final event."""
    for event in events:
        OPENAI_EVENTS[event["type"]].model_validate(event)
        model = EVENT_MODELS.get(event["type"])
        item = event.get("item")
        if model is None or (isinstance(item, dict) and item["type"] not in SPEC_ITEMS):
            continue
        if isinstance(event.get("response"), dict):
            response = event["response"]
            event = {**event, "response": {
                **response, "tools": [t for t in response["tools"]
                                      if t.get("type") == "function"],
                "output": [i for i in response["output"] if i["type"] in SPEC_ITEMS]}}
        model.model_validate(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    return events


def placed(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """Each item a stream announced: its output index and type, in the stream's order
    (each announced once, ``done`` at the same index)."""
    added = [(e["output_index"], e["item"]["type"]) for e in events
             if e["type"] == "response.output_item.added"]
    done = [(e["output_index"], e["item"]["type"]) for e in events
            if e["type"] == "response.output_item.done"]
    assert sorted(added) == sorted(done)
    assert [index for index, _ in added] == list(range(len(added)))
    return added


@pytest.fixture
def upstream() -> Iterator[ScriptedResponsesServer]:
    with ScriptedResponsesServer([], strict=["openai_reasoning"]) as running:
        yield running
    assert not running.failures, running.failures


def started(project: Path, base_url: str, model: str = MODEL) -> ServeProcess:
    return ServeProcess(project, model, {"OPENAI_BASE_URL": base_url,
                                         "OPENAI_API_KEY": "sk-up",
                                         "NONOKA_DATABASE_URL": ""})


@pytest.fixture
def serving(project: Path, upstream: ScriptedResponsesServer) -> Iterator[list[ServeProcess]]:
    """The server processes a test started (the first one here), each stopped after."""
    running = [started(project, upstream.base_url)]
    try:
        yield running
    finally:
        errors = [process.stop() for process in running if process.process.poll() is None]
        assert not [e for e in errors if "Traceback" in e], errors


def client_of(process: ServeProcess) -> OpenAI:
    return OpenAI(base_url=process.url, api_key="client-key", max_retries=0)


def script(upstream: ScriptedResponsesServer, *steps: Any) -> None:
    upstream._script.extend(steps)  # type: ignore[union-attr]


def test_a_web_search_is_the_upstreams_in_its_order_and_comes_back_after_a_restart(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    script(upstream,
           ResponsesReply(output=(ReasoningItem(("Search the forecast.",)),
                                  HostedItem(WEB_SEARCH), HostedItem(CITED))),
           ResponsesReply(output=("Yes, take sunglasses.",)))
    body = {"model": "m", "input": "Weather in Kyoto?", "stream": True,
            "tools": [{"type": "web_search", "search_context_size": "low"}],
            "include": ["web_search_call.action.sources"]}
    events = valid(sse(serving[0].port, "/v1/responses", body))
    sent = upstream.requests[0]
    assert sent["tools"] == [{"type": "web_search", "search_context_size": "low"}]
    assert set(sent["include"]) == {"reasoning.encrypted_content",
                                    "web_search_call.action.sources"}
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "web_search_call", "message"]
    assert done[1] == WEB_SEARCH
    assert done[2]["content"] == CITED["content"]  # with the search's citation
    # the search's events as the upstream sent them, before the message's, in its place
    searched = [e for e in events if e.get("item_id") == WEB_SEARCH["id"]
                or e.get("item", {}).get("id") == WEB_SEARCH["id"]]
    assert [e["type"] for e in searched] == [
        "response.output_item.added", "response.web_search_call.in_progress",
        "response.web_search_call.searching", "response.web_search_call.completed",
        "response.output_item.done"]
    assert {e["output_index"] for e in searched} == {1}
    first_text = next(n for n, e in enumerate(events)
                      if e["type"] == "response.output_text.delta")
    assert events.index(searched[-1]) < first_text
    assert placed(events) == [(0, "reasoning"), (1, "web_search_call"), (2, "message")]
    final = events[-1]["response"]
    assert final["output"] == done
    assert final["tools"] == body["tools"]
    status, _, raw = request(serving[0].port, "GET", f"/v1/responses/{final['id']}")
    assert status == 200 and json.loads(raw)["output"] == done

    serving[0].kill()  # nothing but the store outlives it
    serving.append(started(project, upstream.base_url))
    with client_of(serving[1]) as client:
        got = client.responses.retrieve(final["id"])
        assert [i.type for i in got.output] == ["reasoning", "web_search_call", "message"]
        assert got.output[1].model_dump(exclude_none=True) == WEB_SEARCH
        later = client.responses.create(model="m", input="Sunglasses?",
                                        previous_response_id=final["id"],
                                        tools=[{"type": "web_search",
                                                "search_context_size": "low"}])
    assert later.output_text == "Yes, take sunglasses."
    again = upstream.requests[1]["input"]
    assert [i.get("type") for i in again] == ["message", "reasoning", "web_search_call",
                                              "message", "message"]
    assert again[2] == WEB_SEARCH  # exactly as the upstream made it
    assert again[3] == CITED
    assert not upstream.rejections


def test_a_custom_tool_is_the_clients_and_its_output_goes_back(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    call = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_patch_1",
            "name": "apply_patch", "input": PATCH}
    script(upstream, ResponsesReply(output=(HostedItem(call),)),
           ResponsesReply(output=("Patched hello.txt.",)))
    body = {"model": "m", "input": "Add hello.txt", "tools": [APPLY_PATCH], "stream": True}
    events = valid(sse(serving[0].port, "/v1/responses", body))
    assert upstream.requests[0]["tools"] == [APPLY_PATCH]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert len(done) == 1 and done[0]["type"] == "custom_tool_call"
    assert (done[0]["call_id"], done[0]["name"], done[0]["input"]) == \
        ("call_patch_1", "apply_patch", PATCH)
    deltas = "".join(e["delta"] for e in events
                     if e["type"] == "response.custom_tool_call_input.delta")
    assert deltas == PATCH
    first = events[-1]["response"]
    with client_of(serving[0]) as client:
        answer = client.responses.create(
            model="m", previous_response_id=first["id"], tools=[APPLY_PATCH],  # type: ignore[list-item]
            input=[{"type": "custom_tool_call_output", "call_id": "call_patch_1",
                    "output": "Done!"}])
        assert answer.output_text == "Patched hello.txt."
        listed = client.responses.input_items.list(answer.id).data
    sent = upstream.requests[1]["input"]
    assert sent[1] == {"type": "custom_tool_call", "call_id": "call_patch_1",
                       "name": "apply_patch", "input": PATCH, "id": "ctc_1"}
    assert sent[2] == {"type": "custom_tool_call_output", "call_id": "call_patch_1",
                       "output": "Done!"}
    assert [(i.type, getattr(i, "output", None)) for i in listed] == \
        [("custom_tool_call_output", "Done!")]


def test_a_namespace_tool_is_called_by_name_and_namespace(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    call = {"type": "function_call", "id": "fc_ns", "call_id": "call_ns", "name": "lookup",
            "namespace": "crm", "arguments": '{"who": "Aiko"}'}
    namespace = {"type": "namespace", "name": "crm", "description": "The CRM.",
                 "tools": [{"type": "function", "name": "lookup",
                            "parameters": {"type": "object",
                                           "properties": {"who": {"type": "string"}}}}]}
    script(upstream, ResponsesReply(output=(HostedItem(call),)),
           ResponsesReply(output=("Aiko is a customer.",)))
    with client_of(serving[0]) as client:
        first = client.responses.create(model="m", input="Who is Aiko?",
                                        tools=[namespace])  # type: ignore[list-item]
        made = first.output[0].model_dump(exclude_none=True)
        assert (made["type"], made["name"], made["namespace"]) == \
            ("function_call", "lookup", "crm")
        client.responses.create(model="m", previous_response_id=first.id,
                                tools=[namespace],  # type: ignore[list-item]
                                input=[{"type": "function_call_output",
                                        "call_id": "call_ns", "output": "a customer"}])
    assert upstream.requests[0]["tools"] == [namespace]
    back = upstream.requests[1]["input"][1]
    assert (back["type"], back["name"], back["namespace"]) == ("function_call", "lookup",
                                                              "crm")


@pytest.mark.parametrize("tool", [{"type": "web_search"},
                                  {"type": "mcp", "server_label": "docs",
                                   "server_url": "https://mcp.example/sse"}])
def test_a_hosted_tool_in_front_of_another_model_is_refused(
        project: Path, tool: dict[str, Any]) -> None:
    with ScriptedOpenAIServer([]) as chat:
        process = started(project, chat.base_url, "openai:scripted-model")
        try:
            status, _, raw = request(process.port, "POST", "/v1/responses", {
                "model": "m", "input": "hi",
                "tools": [{"type": "function", "name": "f"}, APPLY_PATCH, tool]})
        finally:
            process.stop()
        assert chat.requests == []
    error = json.loads(raw)["error"]
    assert status == 400
    # the custom tool is carried (as a function); the hosted one cannot run there
    assert (error["code"], error["param"]) == ("unsupported_feature", "tools[2].type")
    assert tool["type"] in error["message"] and "openai:scripted-model" in error["message"]
    assert "openai-responses:" in error["message"]


def test_include_on_create_get_and_input_items(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    script(upstream, ResponsesReply(output=(ReasoningItem(("Think.",)), "Hi.")))
    port = serving[0].port
    status, _, raw = request(port, "POST", "/v1/responses", {
        "model": "m", "input": "hi", "include": ["message.output_text.logprobs", "nope"]})
    error = json.loads(raw)["error"]
    assert status == 400 and (error["param"], error["code"]) == ("include[1]",
                                                                "invalid_value")
    assert "'nope'" in error["message"] and "'web_search_call.results'" in error["message"]
    assert upstream.requests == []
    with client_of(serving[0]) as client:
        made = client.responses.create(
            model="m", input="hi",
            include=["message.output_text.logprobs", "message.input_image.image_url"])
        assert upstream.requests[0]["include"] == ["reasoning.encrypted_content",
                                                   "message.output_text.logprobs"]
        plain = client.responses.retrieve(made.id)
        assert plain.output[0].type == "reasoning"
        assert plain.output[0].encrypted_content is None
        sealed = client.responses.retrieve(made.id, include=["reasoning.encrypted_content"])
        assert sealed.output[0].type == "reasoning"
        assert sealed.output[0].encrypted_content
        items = client.responses.input_items.list(
            made.id, include=["message.input_image.image_url"])
        assert [i.type for i in items.data] == ["message"]
        script(upstream, ResponsesReply(output=("A dot.",)))
        png = client.files.create(file=("dot.png", PNG, "image/png"), purpose="vision")
        seen = client.responses.create(model="m", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "file_id": png.id, "detail": "auto"}]}])
        bare = client.responses.input_items.list(seen.id).data[0].model_dump()
        assert bare["content"][1]["file_id"] == png.id
        assert bare["content"][1]["image_url"] is None
        filled = client.responses.input_items.list(
            seen.id, include=["message.input_image.image_url"]).data[0].model_dump()
        assert filled["content"][1]["file_id"] == png.id
        assert filled["content"][1]["image_url"] == \
            "data:image/png;base64," + base64.b64encode(PNG).decode()
        with pytest.raises(BadRequestError) as refused:
            client.responses.retrieve(made.id, include=["everything"])  # type: ignore[list-item]
        assert refused.value.body["param"] == "include[0]"  # type: ignore[index]


def test_a_client_that_keeps_its_history_sends_the_hosted_items_back(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    script(upstream, ResponsesReply(output=(HostedItem(WEB_SEARCH), HostedItem(CITED))),
           ResponsesReply(output=("Yes.",)), ResponsesReply(output=("Yes, in Kyoto.",)))
    tools: list[ToolParam] = [{"type": "web_search"}]
    with client_of(serving[0]) as client:
        first = client.responses.create(model="m", input="Weather in Kyoto?", store=False,
                                        tools=tools)
        kept = [item.model_dump(exclude_none=True) for item in first.output]
        assert [i["type"] for i in kept] == ["web_search_call", "message"]
        for question in ("Weather in Kyoto?", "Weather in Kyoto tomorrow?"):
            client.responses.create(
                model="m", store=False, tools=tools,
                input=[{"role": "user", "content": question}, *kept,  # type: ignore[list-item]
                       {"role": "user", "content": "Sunglasses?"}])
    # the history the server holds: its stored answer, the items in the upstream's order
    assert upstream.requests[1]["input"][1:3] == [WEB_SEARCH, CITED]
    # a history it does not hold (edited): the client's items, in the client's order
    sent = upstream.requests[2]["input"]
    assert [i.get("type") for i in sent] == ["message", "web_search_call", "message",
                                             "message"]
    assert sent[1] == WEB_SEARCH


def test_a_conversation_sends_its_hosted_items_back(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    script(upstream, ResponsesReply(output=(HostedItem(WEB_SEARCH), HostedItem(CITED))),
           ResponsesReply(output=("Yes.",)))
    tools: list[ToolParam] = [{"type": "web_search"}]
    with client_of(serving[0]) as client:
        conversation = client.conversations.create()
        client.responses.create(model="m", input="Weather in Kyoto?", tools=tools,
                                conversation=conversation.id)
        listed = client.conversations.items.list(conversation.id, order="asc").data
        assert [i.type for i in listed] == ["message", "web_search_call", "message"]
        client.responses.create(model="m", input="Sunglasses?", tools=tools,
                                conversation=conversation.id)
    assert upstream.requests[1]["input"][1:3] == [WEB_SEARCH, CITED]


def test_a_message_split_around_a_search_is_two_messages_in_the_upstreams_order(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    script(upstream,
           ResponsesReply(output=(ReasoningItem(("Look it up.",)), "Let me look that up.",
                                  HostedItem(WEB_SEARCH), HostedItem(CITED))),
           ResponsesReply(output=("Yes.",)))
    body = {"model": "m", "input": "Weather in Kyoto?", "stream": True,
            "tools": [{"type": "web_search"}]}
    events = valid(sse(serving[0].port, "/v1/responses", body))
    assert placed(events) == [(0, "reasoning"), (1, "message"), (2, "web_search_call"),
                              (3, "message")]
    kinds = [(e["type"], e["output_index"]) for e in events if "output_index" in e]
    # each item's events end before the next one's begin, as the upstream streamed them
    assert [index for _, index in kinds] == sorted(index for _, index in kinds)
    texts = {
        index: "".join(e["delta"] for e in events if e.get("output_index") == index
                       and e["type"] == "response.output_text.delta") for index in (1, 3)}
    assert texts == {1: "Let me look that up.", 3: "Sunny, 21°C."}
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[1]["content"][0]["text"] == "Let me look that up."
    assert done[2] == WEB_SEARCH
    assert done[3]["content"] == CITED["content"]
    assert done[1]["id"] != done[3]["id"]
    final = events[-1]["response"]
    assert final["output"] == done
    with client_of(serving[0]) as client:
        got = client.responses.retrieve(final["id"])
        assert [i.model_dump(exclude_none=True) for i in got.output] == \
            [OPENAI_ITEM.validate_python(i).model_dump(exclude_none=True) for i in done]
        client.responses.create(model="m", input="And tomorrow?",
                                previous_response_id=final["id"],
                                tools=[{"type": "web_search"}])
    # the upstream gets its answer back as it made it
    again = upstream.requests[1]["input"]
    assert [i.get("type") for i in again] == ["message", "reasoning", "message",
                                              "web_search_call", "message", "message"]
    assert again[3] == WEB_SEARCH and again[4] == CITED


def test_a_search_is_streamed_while_the_upstream_is_still_answering(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    gate = threading.Event()
    script(upstream, ResponsesReply(output=(HostedItem(WEB_SEARCH), HostedItem(CITED)),
                                    hold=(1, gate)))
    seen: list[str] = []
    with client_of(serving[0]) as client, client.responses.create(
            model="m", input="Weather in Kyoto?", tools=[{"type": "web_search"}],
            stream=True) as stream:
        for event in stream:
            seen.append(event.type)
            if event.type == "response.output_item.done" and \
                    event.item.type == "web_search_call":
                # the upstream holds its message until the client has seen the search
                assert not gate.is_set()
                assert "response.output_text.delta" not in seen
                gate.set()
    assert gate.is_set(), seen
    assert seen[-1] == "response.completed"
    assert seen.index("response.web_search_call.searching") < \
        seen.index("response.output_text.delta")


def test_a_background_search_streams_the_same_events_again_after_a_restart(
        project: Path, upstream: ScriptedResponsesServer,
        serving: list[ServeProcess]) -> None:
    script(upstream, ResponsesReply(output=(ReasoningItem(("Search.",)),
                                            HostedItem(WEB_SEARCH), HostedItem(CITED))))
    body = {"model": "m", "input": "Weather in Kyoto?", "stream": True, "background": True,
            "tools": [{"type": "web_search"}]}
    events = valid(sse(serving[0].port, "/v1/responses", body))
    assert placed(events) == [(0, "reasoning"), (1, "web_search_call"), (2, "message")]
    response_id = events[-1]["response"]["id"]
    serving[0].kill()
    serving.append(started(project, upstream.base_url))
    port = serving[1].port
    for after in (0, events.index(next(e for e in events
                                       if e["type"] == "response.web_search_call.searching"))):
        status, _, raw = request(port, "GET",
                                 f"/v1/responses/{response_id}?stream=true&starting_after={after}")
        assert status == 200, raw
        again = [json.loads(block.split("data: ", 1)[1])
                 for block in raw.decode().split("\n\n") if block.strip()]
        assert again == events[after + 1:]
    status, _, raw = request(port, "GET", f"/v1/responses/{response_id}")
    assert json.loads(raw)["output"] == events[-1]["response"]["output"]
