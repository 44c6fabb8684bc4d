"""ScriptedResponsesServer and OpenAIResponsesModel, checked against the official ``openai``
package's own code.

The SDK's stream parser (``client.responses.create(stream=True)``) and its accumulating
helper (``client.responses.stream``) read every scripted stream; each event validates
against the SDK's event types and names its type on its ``event:`` line; what the SDK
assembles is what nonoka reads. Every request nonoka sends validates against the SDK's
request type (``ResponseCreateParamsStreaming``, every nested list checked, no field
dropped) and goes through the SDK client unchanged. The ``openai_reasoning`` strict mode
accepts the SDK's own output items sent back and refuses, with OpenAI's errors as the SDK
raises them, reasoning that is dropped or altered.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from nonoka.llm.base import CallOptions, ModelResponse, ToolSpec
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import FilePart, Message, TextPart, ToolCall
from nonoka.testing.server import (
    ReasoningItem,
    ResponseFailed,
    ResponsesReply,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
    rate_limited,
)
from tests.support.responses_api import assert_valid_request

USER: list[Any] = [{"role": "user", "content": "Weather in Oslo and Rome?"}]
OSLO = ToolCall(id="call_o", name="weather", arguments='{"city": "Oslo"}')
ROME = ToolCall(id="call_r", name="weather", arguments='{"city": "Rome"}')
TWO_CALLS = ResponsesReply(
    output=(ReasoningItem(("Two cities,", "so two calls.")), "Checking.", OSLO,
            ReasoningItem(()), ROME),
    input_tokens=1200, output_tokens=300, cached_tokens=1024, reasoning_tokens=256)
REPLIES = [
    TWO_CALLS,
    ResponsesReply(output=("Sunny in Oslo, ", "rain in Rome.")),
    ResponsesReply(output=(ReasoningItem(("Quick.",)), "Short.")),
    ResponsesReply(output=("Cut sh",), incomplete="max_output_tokens"),
]
RESULTS: list[Any] = [{"type": "function_call_output", "call_id": "call_o", "output": "sunny"},
                      {"type": "function_call_output", "call_id": "call_r", "output": "rain"}]
WEATHER = ToolSpec("weather", "The weather in a city.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
STATELESS: dict[str, Any] = {"store": False, "include": ["reasoning.encrypted_content"]}

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def sdk(server: ScriptedResponsesServer, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-fidelity", max_retries=retries)


def raw_events(server: ScriptedResponsesServer, body: dict[str, Any]
               ) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server's SSE stream as ``(event line, decoded data)`` pairs."""
    request = urllib.request.Request(f"{server.base_url}/responses",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        name = ""
        for raw in response:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                yield name, json.loads(line[6:])


def nonoka_reads(reply: ResponsesReply) -> ModelResponse:
    import asyncio

    async def read() -> ModelResponse:
        with ScriptedResponsesServer([reply]) as server:
            model = OpenAIResponsesModel("gpt-5", base_url=server.base_url, api_key="sk-x")
            return await model.complete([Message(role="user", content="?")])

    return asyncio.run(read())


# the streams, as the SDK reads them ------------------------------------------------------------


@pytest.mark.parametrize("reply", REPLIES)
def test_every_event_is_one_of_the_sdks_and_names_its_type(reply: ResponsesReply) -> None:
    with ScriptedResponsesServer([reply, reply], chunk_size=4) as server:
        events = list(raw_events(server, {"model": "gpt-5", "input": "?", "stream": True,
                                          **STATELESS}))
        whole = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{server.base_url}/responses", data=json.dumps(
                {"model": "gpt-5", "input": "?", **STATELESS}).encode()), timeout=10).read())
    for name, data in events:
        assert name == data["type"]
        EVENTS.validate_python(data)  # strict validation, unlike the SDK's own parsing
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    kinds = [d["type"] for _, d in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == ("response.incomplete" if reply.incomplete else "response.completed")
    assert kinds.count("response.output_item.added") == len(reply.output)
    final = Response.model_validate(events[-1][1]["response"])
    assert _shape(Response.model_validate(whole)) == _shape(final)


def _shape(response: Response) -> list[dict[str, Any]]:
    """A response's output without what differs between two responses (ids, tokens)."""
    return [{k: v for k, v in item.to_dict().items() if k not in ("id", "encrypted_content")}
            for item in response.output]


@pytest.mark.parametrize("reply", REPLIES)
def test_the_sdk_assembles_what_nonoka_reads(reply: ResponsesReply) -> None:
    with ScriptedResponsesServer([reply, reply], chunk_size=5) as server, \
            sdk(server) as client:
        streamed = list(client.responses.create(model="gpt-5", input=USER, stream=True,
                                                **STATELESS))
        with client.responses.stream(model="gpt-5", input=USER, **STATELESS) as helper:
            deltas = [e.delta for e in helper if e.type == "response.output_text.delta"]
            if reply.incomplete:  # the helper wants response.completed, which never comes
                with pytest.raises(RuntimeError, match=r"response\.completed"):
                    helper.get_final_response()
                final = streamed[-1].response
            else:
                final = helper.get_final_response()
    ours = nonoka_reads(reply)
    texts = [item for item in final.output if item.type == "message"]
    assert ours.text == "\n\n".join(m.content[0].text for m in texts if m.content[0].text)
    assert "".join(deltas) == ours.text.replace("\n\n", "")
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        (c.id, c.name, c.arguments) for c in ours.tool_calls]
    reasoning = [item for item in final.output if item.type == "reasoning"]
    stored = [(r.provider_metadata or {})["openai_responses"] for r in ours.reasoning]
    assert [r.to_dict().keys() for r in reasoning] == [s.keys() for s in stored]
    assert all(s["encrypted_content"].startswith("gAAAAA") for s in stored)
    assert [[p.text for p in r.summary] for r in reasoning] == [
        [p["text"] for p in s["summary"]] for s in stored]
    assert [type(e).__module__.startswith("openai.types.responses") for e in streamed] \
        == [True] * len(streamed)
    usage = final.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (ours.usage.input_tokens,
                                                         ours.usage.output_tokens)
    assert usage.input_tokens_details.cached_tokens == ours.usage.cache_read_tokens
    assert usage.output_tokens_details.reasoning_tokens == ours.usage.reasoning_tokens
    assert final.status == ("incomplete" if reply.incomplete else "completed")


def test_the_sdk_reads_cached_and_reasoning_tokens() -> None:
    with ScriptedResponsesServer([TWO_CALLS]) as server, sdk(server) as client:
        response = client.responses.create(model="gpt-5", input=USER, **STATELESS)
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (1200, 300, 1500)
    assert response.usage.input_tokens_details.cached_tokens == 1024
    assert response.usage.output_tokens_details.reasoning_tokens == 256


def test_reasoning_is_encrypted_only_when_asked_for() -> None:
    with ScriptedResponsesServer([TWO_CALLS]) as server, sdk(server) as client:
        response = client.responses.create(model="gpt-5", input=USER)
    reasoning = [item for item in response.output if item.type == "reasoning"]
    assert reasoning and all(r.encrypted_content is None for r in reasoning)


# errors ----------------------------------------------------------------------------------------


def test_the_sdk_sees_failures_in_the_stream() -> None:
    steps = [ResponseFailed(code="server_error", message="Try again."),
             ResponseFailed(code="invalid_prompt", message="Flagged.", as_error_event=True)]
    with ScriptedResponsesServer(steps) as server, sdk(server) as client:
        failed = list(client.responses.create(model="m", input=USER, stream=True))
        errored = list(client.responses.create(model="m", input=USER, stream=True))
    assert failed[-1].type == "response.failed"
    assert failed[-1].response.error is not None
    assert (failed[-1].response.error.code, failed[-1].response.error.message) \
        == ("server_error", "Try again.")
    assert errored[-1].type == "error"
    assert (errored[-1].code, errored[-1].message) == ("invalid_prompt", "Flagged.")


def test_the_sdk_raises_http_errors_as_openai_does() -> None:
    with ScriptedResponsesServer([rate_limited(2)]) as server, sdk(server) as client, \
            pytest.raises(openai.RateLimitError) as raised:
        client.responses.create(model="m", input=USER)
    assert (raised.value.code, raised.value.type) == ("rate_limit_exceeded", "tokens")
    assert raised.value.response.headers["retry-after"] == "2"


# nonoka's requests, as the SDK types them --------------------------------------------------------


async def test_every_request_nonoka_sends_is_the_sdks_request_type() -> None:
    png = "iVBORw0KGgo="
    prompt = Message(role="user", content="Look.", parts=[
        TextPart(text="Look."), FilePart(media_type="image/png", data=png),
        FilePart(media_type="image/png", url="https://example.com/a.png"),
        FilePart(media_type="application/pdf", data="JVBERi0=", filename="a.pdf"),
        FilePart(media_type="application/pdf", url="https://example.com/b.pdf")])
    options = CallOptions(max_tokens=100, temperature=0.5, top_p=0.9, tool_choice="auto",
                          reasoning_effort="medium",
                          response_format={"type": "json_schema", "json_schema": {
                              "name": "w", "schema": {"type": "object"}, "strict": False}},
                          extra={"parallel_tool_calls": True, "instructions": "Be brief."})
    with ScriptedResponsesServer([TWO_CALLS, REPLIES[1]]) as server:
        model = OpenAIResponsesModel("gpt-5", base_url=server.base_url, api_key="sk-x")
        first = await model.complete_with(
            [Message(role="system", content="sys"), prompt], [WEATHER], options=options)
        stored = MemoryEntry.assistant(first.text, first.tool_calls, reasoning=first.reasoning,
                                       provider_metadata=first.provider_metadata)
        results = [Message(role="tool", tool_call_id="call_o", content="sunny", parts=[
            TextPart(text="sunny"), FilePart(media_type="image/png", data=png),
            FilePart(media_type="application/pdf", data="JVBERi0=")]),
            Message(role="tool", tool_call_id="call_r", content="rain"),
            Message(role="assistant", content="From another provider.")]
        await model.complete_with([Message(role="system", content="sys"), prompt,
                                   stored.to_message(), *results], [WEATHER])
    for body in server.requests:
        assert_valid_request(body)
    with ScriptedResponsesServer(["a", "b"]) as server, sdk(server) as client:
        for body in (server_body for server_body in [*_sent_bodies(first)]):
            list(client.responses.create(**body))
        assert server.requests == _sent_bodies(first)  # the SDK sent them unchanged


def _sent_bodies(first: ModelResponse) -> list[dict[str, Any]]:
    """Two of nonoka's bodies, rebuilt (the SDK sends them to another server)."""
    model = OpenAIResponsesModel("gpt-5", base_url="http://127.0.0.1:9/v1", api_key="sk-x")
    stored = MemoryEntry.assistant(first.text, first.tool_calls, reasoning=first.reasoning,
                                   provider_metadata=first.provider_metadata)
    history = [Message(role="user", content="?"), stored.to_message(),
               Message(role="tool", tool_call_id="call_o", content="sunny"),
               Message(role="tool", tool_call_id="call_r", content="rain")]
    return [json.loads(model.body(history[:1], [WEATHER])),
            json.loads(model.body(history, [WEATHER], CallOptions(reasoning_effort="low")))]


def test_a_malformed_request_fails_the_check() -> None:
    """The check can fail: an id-less output message, and a misspelt field."""
    body = {"model": "m", "stream": True, "input": [
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "x", "annotations": []}]}]}
    with pytest.raises(ValueError, match="validation error"):
        assert_valid_request(body)
    with pytest.raises(AssertionError):
        assert_valid_request({"model": "m", "stream": True, "input": "hi", "stroe": False})


# strict: encrypted reasoning ------------------------------------------------------------------


def strict_server(*steps: Any) -> ScriptedResponsesServer:
    return ScriptedResponsesServer(list(steps), strict=["openai_reasoning"])


def output_items(response: Response) -> list[Any]:
    """The SDK's output items as input, the way its guide sends them back."""
    return [item.to_dict() for item in response.output]


def test_strict_accepts_the_sdks_own_output_items_sent_back() -> None:
    with strict_server(TWO_CALLS, "Both done.") as server, sdk(server) as client:
        first = client.responses.create(model="gpt-5", input=USER, **STATELESS)
        second = client.responses.create(
            model="gpt-5", input=[*USER, *output_items(first), *RESULTS], **STATELESS)
        server.assert_done()
    assert second.output_text == "Both done."
    assert server.rejections == []


def test_strict_refuses_a_call_without_its_reasoning() -> None:
    with strict_server(TWO_CALLS, "fine") as server, sdk(server) as client:
        first = output_items(client.responses.create(model="gpt-5", input=USER, **STATELESS))
        dropped = [i for i in first if i["type"] != "reasoning"]
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="gpt-5", input=[*USER, *dropped, *RESULTS],
                                    **STATELESS)
        assert server.remaining == 1  # a refused request uses no step
    fc, rs = first[2]["id"], first[0]["id"]
    assert raised.value.status_code == 400
    assert raised.value.body == {
        "message": f"Item '{fc}' of type 'function_call' was provided without its "
                   f"required 'reasoning' item: '{rs}'.",
        "type": "invalid_request_error", "param": "input", "code": None}
    assert server.rejections == [1]


def test_strict_refuses_altered_encrypted_content_anywhere() -> None:
    with strict_server(TWO_CALLS, "unused") as server, sdk(server) as client:
        first = output_items(client.responses.create(model="gpt-5", input=USER, **STATELESS))
        first[3]["encrypted_content"] = "gAAAAABforged=="
        later: Any = {"role": "user", "content": "Thanks. Anything else?"}
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="gpt-5", input=[*USER, *first, *RESULTS, later],
                                    **STATELESS)
    assert raised.value.body == {
        "message": "The encrypted content gAAA...ed== could not be verified.",
        "type": "invalid_request_error", "param": None, "code": "invalid_encrypted_content"}


def test_strict_refuses_reasoning_sent_back_without_its_encrypted_content() -> None:
    with strict_server(TWO_CALLS) as server, sdk(server) as client:
        first = output_items(client.responses.create(model="gpt-5", input=USER, **STATELESS))
        for item in first:
            item.pop("encrypted_content", None)
        with pytest.raises(openai.NotFoundError) as raised:
            client.responses.create(model="gpt-5", input=[*USER, *first, *RESULTS],
                                    **STATELESS)
    assert raised.value.status_code == 404
    assert raised.value.body == {
        "message": f"Item with id '{first[0]['id']}' not found. Items are not persisted when "
                   "`store` is set to false. Try again with `store` set to true, or remove "
                   "this item from your input.",
        "type": "invalid_request_error", "param": "input", "code": None}


def test_strict_refuses_reasoning_without_the_item_that_followed_it() -> None:
    with strict_server(TWO_CALLS) as server, sdk(server) as client:
        first = output_items(client.responses.create(model="gpt-5", input=USER, **STATELESS))
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="gpt-5", input=[*USER, first[0], *RESULTS[:1]],
                                    **STATELESS)
    assert raised.value.body["message"] == (  # type: ignore[index]
        f"Item '{first[0]['id']}' of type 'reasoning' was provided without its required "
        "following item.")


def test_strict_checks_missing_reasoning_in_the_current_turn_only() -> None:
    with strict_server(TWO_CALLS, "Fine.") as server, sdk(server) as client:
        first = output_items(client.responses.create(model="gpt-5", input=USER, **STATELESS))
        dropped = [i for i in first if i["type"] != "reasoning"]
        later: Any = {"role": "user", "content": "Thanks. Anything else?"}
        answer = client.responses.create(model="gpt-5", input=[*USER, *dropped, *RESULTS,
                                                               later], **STATELESS)
        server.assert_done()
    assert answer.output_text == "Fine."


def test_strict_modes_are_the_servers_own() -> None:
    with pytest.raises(ValueError, match="unknown strict mode 'gemini_signatures'"):
        ScriptedResponsesServer([], strict=["gemini_signatures"])


def test_a_responses_step_on_the_chat_server_fails_clearly() -> None:
    with ScriptedOpenAIServer([ResponsesReply(output=("hi",))]) as server, \
            openai.OpenAI(base_url=server.base_url, api_key="sk-x", max_retries=0) as client, \
            pytest.raises(openai.InternalServerError, match="for the Responses API"):
        client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(AssertionError, match="ScriptedResponsesServer"):
        server.assert_done()


def test_the_server_process_serves_the_responses_api(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([
        {"text": "", "reasoning_content": "think", "tool_calls": [{"id": "c1", "name": "f"}]},
        "done"]))
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "nonoka.testing.server", "--api", "responses", "--script",
         str(script), "--port-file", str(port_file), "--strict", "openai_reasoning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not port_file.exists():
            assert process.poll() is None, "the server process died"
            assert time.monotonic() < deadline, "the server never wrote its port file"
            time.sleep(0.02)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{int(port_file.read_text())}/v1",
                               api_key="sk-x", max_retries=0)
        first = client.responses.create(model="gpt-5", input=USER, **STATELESS)
        items = output_items(first)
        call_result: Any = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="gpt-5", input=[*USER, *items[1:], call_result],
                                    **STATELESS)
        second = client.responses.create(model="gpt-5", input=[*USER, *items, call_result],
                                         **STATELESS)
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr.decode()
    assert [i["type"] for i in items] == ["reasoning", "function_call"]
    assert second.output_text == "done"
