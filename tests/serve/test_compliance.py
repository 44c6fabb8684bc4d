"""The OpenResponses compliance cases, over raw HTTP as the compliance suite sends them:
each response is checked against the spec's ``ResponseResource`` and every streamed
event against its event model (``tests/serve/harness.py``), then the case's own checks,
then what the model was sent (the scripted upstream's requests)."""

from __future__ import annotations

import json
from typing import Any

from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.harness import Served, valid_events, valid_response

WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather for a location",
           "parameters": {"type": "object", "properties": {
               "location": {"type": "string",
                            "description": "The city and state, e.g. San Francisco, CA"}},
               "required": ["location"]}}
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAAB"
       "JRU5ErkJggg==")
PDF = ("JVBERi0xLjEKMSAwIG9iago8PCAvVHlwZSAvQ2F0YWxvZyAvUGFnZXMgMiAwIFIgPj4KZW5kb2JqCnRy"
       "YWlsZXIKPDwgL1Jvb3QgMSAwIFIgPj4KJSVFT0Y=")


def create(served: Served, body: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = served.request("POST", "/v1/responses", body)
    assert status == 200, raw
    return valid_response(json.loads(raw))


def completed_with_output(response: dict[str, Any]) -> None:
    assert response["output"], "Response has no output items"
    assert response["status"] == "completed"


def test_basic_response(served: Served, scripted: list[Any],
                        server: ScriptedOpenAIServer) -> None:
    scripted.append(text("Hello to you"))
    response = create(served, {"model": "m", "input": [
        {"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}]})
    completed_with_output(response)
    assert response["output"][0]["content"][0]["text"] == "Hello to you"
    assert server.requests[0]["messages"] == [
        {"role": "user", "content": "Say hello in exactly 3 words."}]


def test_streaming_response(served: Served, scripted: list[Any]) -> None:
    scripted.append(text("1, 2, 3, 4, 5"))
    events = valid_events(served.events({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "Count from 1 to 5."}]}))
    final = events[-1]["response"]
    completed_with_output(final)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == final["output"][0]["content"][0]["text"] == "1, 2, 3, 4, 5"
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * (len(events) - 8),
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert valid_response(json.loads(served.request(
        "GET", f"/v1/responses/{final['id']}")[2])) == final


def test_system_prompt(served: Served, scripted: list[Any],
                       server: ScriptedOpenAIServer) -> None:
    scripted.append(text("Ahoy!"))
    completed_with_output(create(served, {"model": "m", "input": [
        {"type": "message", "role": "system",
         "content": "You are a pirate. Always respond in pirate speak."},
        {"type": "message", "role": "user", "content": "Say hello."}]}))
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": "You are a pirate. Always respond in pirate speak."},
        {"role": "user", "content": "Say hello."}]


def test_tool_calling(served: Served, scripted: list[Any],
                      server: ScriptedOpenAIServer) -> None:
    scripted.append(call("get_weather", {"location": "San Francisco, CA"}))
    response = create(served, {"model": "m", "tools": [WEATHER], "input": [
        {"type": "message", "role": "user",
         "content": "What's the weather like in San Francisco?"}]})
    assert response["output"]
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"location": "San Francisco, CA"})]
    assert response["tools"][0]["name"] == "get_weather"
    sent = server.requests[0]["tools"]
    assert [t["function"]["name"] for t in sent] == ["get_weather"]
    assert sent[0]["function"]["parameters"] == WEATHER["parameters"]


def test_function_call_round_trip(served: Served, scripted: list[Any],
                                  server: ScriptedOpenAIServer) -> None:
    scripted += [call("get_weather", {"location": "San Francisco, CA"}),
                 text("It is 64 degrees and clear.")]
    first = create(served, {
        "model": "m", "tools": [WEATHER],
        "input": "Use the weather tool to get the temperature in San Francisco.",
        "tool_choice": {"type": "function", "name": "get_weather"}})
    function_call = next(i for i in first["output"] if i["type"] == "function_call")
    assert server.requests[0]["tool_choice"] == {"type": "function",
                                                 "function": {"name": "get_weather"}}
    second = create(served, {"model": "m", "previous_response_id": first["id"], "input": [
        {"type": "function_call_output", "call_id": function_call["call_id"],
         "output": "64 degrees and clear"}]})
    completed_with_output(second)
    assert second["previous_response_id"] == first["id"]
    assert server.requests[1]["messages"][-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": function_call["call_id"], "type": "function",
             "function": {"name": "get_weather", "arguments": function_call["arguments"]}}]},
        {"role": "tool", "tool_call_id": function_call["call_id"],
         "content": "64 degrees and clear"}]


def test_image_input(served: Served, scripted: list[Any],
                     server: ScriptedOpenAIServer) -> None:
    scripted.append(text("A red dot."))
    completed_with_output(create(served, {"model": "m", "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text",
             "text": "What do you see in this image? Answer in one sentence."},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]}]}))
    assert server.requests[0]["messages"][0]["content"] == [
        {"type": "text", "text": "What do you see in this image? Answer in one sentence."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]


def test_file_input(served: Served, scripted: list[Any],
                    server: ScriptedOpenAIServer) -> None:
    scripted.append(text("OpenResponses File Input Fixture"))
    completed_with_output(create(served, {"model": "m", "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text",
             "text": "Read the attached file and answer with its title only."},
            {"type": "input_file", "filename": "openresponses-fixture.pdf",
             "file_data": f"data:application/pdf;base64,{PDF}"}]}]}))
    assert server.requests[0]["messages"][0]["content"][1] == {
        "type": "file", "file": {"filename": "openresponses-fixture.pdf",
                                 "file_data": f"data:application/pdf;base64,{PDF}"}}


def test_multi_turn(served: Served, scripted: list[Any],
                    server: ScriptedOpenAIServer) -> None:
    scripted.append(text("Your name is Alice."))
    response = create(served, {"model": "m", "input": [
        {"type": "message", "role": "user", "content": "My name is Alice."},
        {"type": "message", "role": "assistant",
         "content": "Hello Alice! Nice to meet you. How can I help you today?"},
        {"type": "message", "role": "user", "content": "What is my name?"}]})
    completed_with_output(response)
    assert server.requests[0]["messages"] == [
        {"role": "user", "content": "My name is Alice."},
        {"role": "assistant",
         "content": "Hello Alice! Nice to meet you. How can I help you today?"},
        {"role": "user", "content": "What is my name?"}]
    status, _, raw = served.request("GET", f"/v1/responses/{response['id']}/input_items"
                                           "?order=asc")
    assert status == 200
    listed = json.loads(raw)["data"]
    assert [(i["role"], i["content"][0]["type"]) for i in listed] == [
        ("user", "input_text"), ("assistant", "output_text"), ("user", "input_text")]


def test_previous_response_id(served: Served, scripted: list[Any],
                              server: ScriptedOpenAIServer) -> None:
    scripted += [text("OK"), text("papaya")]
    first = create(served, {"model": "m",
                            "input": "Remember this code word: papaya. Reply with only OK."})
    second = create(served, {"model": "m", "previous_response_id": first["id"],
                             "input": "What code word did I ask you to remember?"})
    completed_with_output(second)
    assert server.requests[1]["messages"] == [
        {"role": "user", "content": "Remember this code word: papaya. Reply with only OK."},
        {"role": "assistant", "content": "OK"},
        {"role": "user", "content": "What code word did I ask you to remember?"}]
