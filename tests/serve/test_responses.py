"""The Responses API through the official ``openai`` client: streamed and not, chains,
forks (each continuation is sent exactly its own path: asserted on what the upstream
received), a tool loop, get, delete, input items, and the errors clients match on."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.serve.ids import parse_response_id
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing import call, text
from nonoka.testing.replies import Reply
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.conftest import UPSTREAM_KEY
from tests.serve.harness import Served, valid_events, valid_response

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def sent(server: ScriptedOpenAIServer, index: int = -1) -> list[tuple[str, str]]:
    """The conversation the upstream received in request ``index``: role and text."""
    return [(m["role"], m.get("content") or "") for m in server.requests[index]["messages"]]


def records(project: Path) -> list[SessionRecord]:
    async def read() -> list[SessionRecord]:
        async with open_project_stores(project) as stores:
            return await stores.index.list_sessions(limit=100)
    return asyncio.run(read())


def raw(served: Served, path: str) -> dict[str, Any]:
    status, _, body = served.request("GET", path)
    assert status == 200, body
    return valid_response(json.loads(body)) if path.count("/") == 3 else json.loads(body)


def test_a_response_is_a_stored_session_entry(client: OpenAI, scripted: list[Any],
                                              served: Served, project: Path,
                                              server: ScriptedOpenAIServer) -> None:
    scripted.append(text("Hello!"))
    response = client.responses.create(model="scripted-model", input="Say hello",
                                       metadata={"ticket": "42"}, temperature=0.5)
    assert response.output_text == "Hello!"
    assert response.status == "completed" and response.to_dict()["store"] is True
    assert response.usage is not None and response.usage.output_tokens > 0
    point = parse_response_id(response.id)
    assert point is not None
    [record] = records(project)
    assert record.session_id == point.session_id
    assert record.title == "Say hello" and record.message_count == 2
    assert client.responses.retrieve(response.id).output_text == "Hello!"
    got = raw(served, f"/v1/responses/{response.id}")
    assert got["metadata"] == {"ticket": "42"} and got["temperature"] == 0.5
    assert got["model"] == "openai:scripted-model"
    assert server.requests[0]["temperature"] == 0.5


def test_streamed_through_the_client(client: OpenAI, scripted: list[Any],
                                     served: Served) -> None:
    scripted += [text("streamed answer"), text("again")]
    stream = client.responses.create(model="m", input="Stream it", stream=True)
    kinds = [event.type for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    with client.responses.stream(model="m", input="And with the helper") as helper:
        final = helper.get_final_response()
    assert final.output_text == "again"
    assert client.responses.retrieve(final.id).output_text == "again"


def test_a_chain_sends_its_whole_path(client: OpenAI, scripted: list[Any],
                                      server: ScriptedOpenAIServer, project: Path) -> None:
    scripted += [text("one"), text("two"), text("three")]
    first = client.responses.create(model="m", input="1?")
    second = client.responses.create(model="m", input="2?", previous_response_id=first.id)
    third = client.responses.create(model="m", input="3?", previous_response_id=second.id)
    assert sent(server) == [("user", "1?"), ("assistant", "one"), ("user", "2?"),
                            ("assistant", "two"), ("user", "3?")]
    assert third.previous_response_id == second.id
    assert len(records(project)) == 1  # continuing from the tip continues the session


def test_two_responses_with_one_parent_each_see_only_their_own_path(
        client: OpenAI, scripted: list[Any], server: ScriptedOpenAIServer,
        project: Path) -> None:
    scripted += [text("root answer"), text("A answer"), text("B answer"), text("A2"),
                 text("B2")]
    root = client.responses.create(model="m", input="root")
    a = client.responses.create(model="m", input="branch A", previous_response_id=root.id)
    b = client.responses.create(model="m", input="branch B", previous_response_id=root.id)
    assert sent(server) == [("user", "root"), ("assistant", "root answer"),
                            ("user", "branch B")]
    client.responses.create(model="m", input="A again", previous_response_id=a.id)
    assert sent(server) == [("user", "root"), ("assistant", "root answer"),
                            ("user", "branch A"), ("assistant", "A answer"),
                            ("user", "A again")]
    client.responses.create(model="m", input="B again", previous_response_id=b.id)
    assert sent(server) == [("user", "root"), ("assistant", "root answer"),
                            ("user", "branch B"), ("assistant", "B answer"),
                            ("user", "B again")]
    rows = {r.session_id: r for r in records(project)}
    root_session = parse_response_id(root.id)
    b_point = parse_response_id(b.id)
    assert root_session is not None and b_point is not None
    assert len(rows) == 2
    assert rows[b_point.session_id].metadata["forked_from"] == root_session.session_id
    assert rows[b_point.session_id].metadata["fork_point"] == 2


def test_a_random_tree_sends_every_node_exactly_its_path(
        client: OpenAI, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    rng = random.Random(35)
    scripted.extend(lambda body: text(f"answer to {body['messages'][-1]['content']}")
                    for _ in range(40))
    paths: dict[str, list[tuple[str, str]]] = {}
    for n in range(40):
        parent = rng.choice([None, *paths]) if paths else None
        prompt = f"node {n}"
        response = client.responses.create(model="m", input=prompt,
                                           previous_response_id=parent)
        path = [*(paths[parent] if parent else []), ("user", prompt)]
        assert sent(server) == path
        paths[response.id] = [*path, ("assistant", f"answer to {prompt}")]
    for response_id, path in paths.items():  # every node still reads back as it was
        assert client.responses.retrieve(response_id).output_text == path[-1][1]


def test_instructions_are_for_one_response(client: OpenAI, scripted: list[Any],
                                           server: ScriptedOpenAIServer) -> None:
    scripted += [text("Arr"), text("plain")]
    first = client.responses.create(model="m", input="hi", instructions="Talk like a pirate.")
    assert sent(server) == [("system", "Talk like a pirate."), ("user", "hi")]
    assert first.instructions == "Talk like a pirate."
    second = client.responses.create(model="m", input="and now?",
                                     previous_response_id=first.id)
    assert sent(server) == [("user", "hi"), ("assistant", "Arr"), ("user", "and now?")]
    assert second.instructions is None


def test_a_three_step_tool_loop(client: OpenAI, scripted: list[Any], served: Served,
                                server: ScriptedOpenAIServer, project: Path) -> None:
    scripted += [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Lyon"}),
                 text("Paris 20, Lyon 22.")]
    response = client.responses.create(model="m", input="Weather in Paris and Lyon?",
                                       tools=[WEATHER])  # type: ignore[list-item]
    for temperature in ("20", "22"):
        [function_call] = [item for item in response.output if item.type == "function_call"]
        assert function_call.status == "completed"
        response = client.responses.create(
            model="m", previous_response_id=response.id, tools=[WEATHER],  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": function_call.call_id,
                    "output": temperature}])
    assert response.output_text == "Paris 20, Lyon 22."
    assert [role for role, _ in sent(server)] == ["user", "assistant", "tool", "assistant",
                                                  "tool"]
    assert all(len(request["tools"]) == 1 for request in server.requests)
    assert len(records(project)) == 1
    got = raw(served, f"/v1/responses/{response.id}")
    assert [t["name"] for t in got["tools"]] == ["get_weather"]  # stored once, referred to


def test_unknown_previous_response_is_a_400_clients_can_match(
        client: OpenAI, served: Served) -> None:
    for unknown in ("resp_nope", "resp_" + "0" * 48, "resp_" + "1" * 32 + "0" * 16):
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="m", input="hi", previous_response_id=unknown)
        assert raised.value.body == {
            "type": "invalid_request_error", "code": "previous_response_not_found",
            "param": "previous_response_id",
            "message": f"Previous response with id '{unknown}' not found."}
    status, _, body = served.request("POST", "/v1/responses", {
        "model": "m", "input": "hi", "previous_response_id": "resp_nope"})
    assert status == 400 and json.loads(body) == {"error": {
        "type": "invalid_request_error", "code": "previous_response_not_found",
        "param": "previous_response_id",
        "message": "Previous response with id 'resp_nope' not found."}}


def test_get_delete_and_input_items(client: OpenAI, scripted: list[Any],
                                    served: Served) -> None:
    scripted += [text("first"), text("second")]
    first = client.responses.create(model="m", input=[
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": "one"}])
    second = client.responses.create(model="m", input="two", previous_response_id=first.id)
    items = client.responses.input_items.list(first.id)
    assert [(i.type, i.role) for i in items.data] == [  # type: ignore[union-attr]
        ("message", "user"), ("message", "system")]  # newest first, as OpenAI lists them
    ascending = client.responses.input_items.list(first.id, order="asc", limit=1)
    assert [i.id for i in ascending.data] == [items.data[1].id] and ascending.has_more
    assert client.responses.input_items.list(second.id).data[0].id != items.data[0].id
    assert raw(served, f"/v1/responses/{first.id}/input_items") == raw(
        served, f"/v1/responses/{first.id}/input_items")  # ids are where items are stored
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", input="three", previous_response_id=first.id)
    assert raised.value.code == "previous_response_not_found"
    assert client.responses.retrieve(second.id).output_text == "second"


def test_item_references_resolve(client: OpenAI, scripted: list[Any],
                                 server: ScriptedOpenAIServer) -> None:
    scripted += [text("It is blue."), text("Blue, as I said.")]
    first = client.responses.create(model="m", input="What colour is the sky?")
    [user_item] = client.responses.input_items.list(first.id).data
    items: list[Any] = [{"type": "item_reference", "id": user_item.id},
                        {"type": "item_reference", "id": first.output[0].id},
                        {"type": "message", "role": "user", "content": "Sure?"}]
    client.responses.create(model="m", input=items)
    assert sent(server) == [("user", "What colour is the sky?"), ("assistant", "It is blue."),
                            ("user", "Sure?")]
    unknown: list[Any] = [{"type": "item_reference", "id": "msg_unknown"}]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="m", input=unknown)


def test_tool_outputs_must_answer_the_calls_made(client: OpenAI, scripted: list[Any]) -> None:
    scripted.append(call("get_weather", {"city": "Paris"}))
    response = client.responses.create(model="m", input="Weather?",
                                       tools=[WEATHER])  # type: ignore[list-item]
    with pytest.raises(openai.BadRequestError, match="No tool output found"):
        client.responses.create(model="m", input="never mind",
                                previous_response_id=response.id)
    with pytest.raises(openai.BadRequestError, match="No tool call found"):
        client.responses.create(model="m", previous_response_id=response.id, input=[
            {"type": "function_call_output", "call_id": "call_other", "output": "x"}])


def test_store_false_writes_nothing(client: OpenAI, scripted: list[Any],
                                    server: ScriptedOpenAIServer, project: Path) -> None:
    scripted += [text("kept"), text("not kept")]
    first = client.responses.create(model="m", input="keep this")
    before = records(project)
    unstored = client.responses.create(model="m", input="and this?", store=False,
                                       previous_response_id=first.id)
    assert unstored.to_dict()["store"] is False and unstored.output_text == "not kept"
    assert sent(server) == [("user", "keep this"), ("assistant", "kept"),
                            ("user", "and this?")]
    assert [(r.session_id, r.message_count) for r in records(project)] == [
        (r.session_id, r.message_count) for r in before]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_streamed_tool_call_events(served: Served, scripted: list[Any]) -> None:
    scripted.append(call("get_weather", {"city": "Paris"}, content="Let me look."))
    events = valid_events(served.events({"model": "m", "input": "Weather?",
                                         "tools": [WEATHER]}))
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == final["output"]
    arguments = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert json.loads(arguments[0]["arguments"]) == {"city": "Paris"}


def test_upstream_failures_keep_the_upstream_key(client: OpenAI, scripted: list[Any],
                                                 served: Served) -> None:
    from nonoka.testing.server import HttpError

    scripted.append(HttpError(401, {"error": {
        "message": f"Incorrect API key provided: {UPSTREAM_KEY}", "type": "invalid_request_error",
        "code": "invalid_api_key"}}))
    status, _, body = served.request("POST", "/v1/responses", {"model": "m", "input": "hi"})
    assert status == 502, body
    assert UPSTREAM_KEY not in body.decode() and UPSTREAM_KEY[8:30] not in body.decode()
    assert json.loads(body)["error"]["type"] == "server_error"
    assert os.environ["OPENAI_API_KEY"] == UPSTREAM_KEY


def test_the_session_commands_see_responses(client: OpenAI, scripted: list[Any],
                                            project: Path) -> None:
    from tests.support.processes import run_nonoka

    scripted += [text("The answer is papaya."), text("Still papaya.")]
    first = client.responses.create(model="m", input="What fruit?")
    client.responses.create(model="m", input="Sure?", previous_response_id=first.id)
    point = parse_response_id(first.id)
    assert point is not None
    env = {**os.environ, "NONOKA_DATABASE_URL": ""}
    listed = run_nonoka(project, "sessions", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert point.session_id in listed.stdout
    shown = run_nonoka(project, "sessions", "show", point.session_id[:8], "--entries",
                       env=env)
    assert shown.returncode == 0, shown.stderr
    assert "Still papaya." in shown.stdout and first.id in shown.stdout
    found = run_nonoka(project, "sessions", "search", "papaya", "--json", env=env)
    assert found.returncode == 0 and point.session_id in found.stdout
    exported = run_nonoka(project, "sessions", "export", point.session_id, env=env)
    assert exported.returncode == 0 and first.id in exported.stdout


def test_an_answer_the_model_cut_or_filtered_is_incomplete(client: OpenAI,
                                                           scripted: list[Any]) -> None:
    scripted += [Reply(text="Once upon a", finish_reason="length"),
                 Reply(text="", finish_reason="content_filter")]
    cut = client.responses.create(model="m", input="A story", max_output_tokens=16)
    assert cut.status == "incomplete" and cut.output_text == "Once upon a"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    stream = client.responses.create(model="m", input="Something else", stream=True)
    final = [event for event in stream][-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details is not None
    assert final.response.incomplete_details.reason == "content_filter"
