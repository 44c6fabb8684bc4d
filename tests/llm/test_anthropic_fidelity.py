"""ScriptedAnthropicServer and the ``anthropic:`` adapter, held to the vendor's own code.

The official ``anthropic`` SDK reads the scripted server's streams (``messages.stream``,
``messages.create(stream=True)``) and messages to the same content the adapter reads;
raises its errors as it raises Anthropic's; its own message objects, sent back, pass the
strict mode, and altered or dropped thinking does not. Every request the adapter builds
is a valid ``MessageCreateParamsStreaming`` (pydantic, against the SDK's types) and goes
through the SDK's client unchanged.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from pydantic import TypeAdapter

from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.base import CallOptions, ModelResponse, ToolSpec
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import FilePart, Message, ReasoningPart, TextPart, ToolCall
from nonoka.testing.server import (
    AnthropicReply,
    ScriptedAnthropicServer,
    StreamError,
    Thinking,
    anthropic_overloaded,
    anthropic_rate_limited,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(40))).decode()
PDF = base64.b64encode(b"%PDF-1.7 fidelity").decode()
USER: list[Any] = [{"role": "user", "content": "Weather in Oslo and Rome?"}]
TOOLS = [ToolSpec("weather", "The weather in a city.",
                  {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]})]
FULL = AnthropicReply(
    text="Checking both.",
    thinking=(Thinking("Two cities, so two calls."), Thinking(redacted_data="ZW5jcnlwdGVk")),
    tool_calls=(ToolCall(id="toolu_o", name="weather", arguments='{"city": "Oslo"}'),
                ToolCall(id="toolu_r", name="weather", arguments='{"city": "Rome"}')),
    thinking_tokens=12)
PARAMS = TypeAdapter(MessageCreateParamsStreaming)


def sdk(server: ScriptedAnthropicServer, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-fidelity",
                               max_retries=retries)


def adapter(server: ScriptedAnthropicServer, **kwargs: Any) -> AnthropicChatModel:
    return AnthropicChatModel("claude-fidelity", base_url=server.base_url,
                              api_key="sk-ant-fidelity", max_retries=0, **kwargs)


def materialised(value: Any) -> Any:
    """A validated value with pydantic's lazy iterables consumed (which validates them)."""
    if isinstance(value, dict):
        return {k: materialised(v) for k, v in value.items()}
    if isinstance(value, list | tuple | Iterator):
        return [materialised(v) for v in value]
    return value


def assert_valid_request(raw: bytes) -> dict[str, Any]:
    """``raw`` is a ``MessageCreateParamsStreaming``: validating it against the SDK's
    types gives it back whole (an unknown field, a wrong type or shape would be dropped
    or refused)."""
    body: dict[str, Any] = json.loads(raw)
    assert materialised(PARAMS.validate_python(body)) == body
    return body


def same_content(message: anthropic.types.Message, response: ModelResponse) -> None:
    """What the SDK parsed is what the adapter read."""
    texts = [b.text for b in message.content if b.type == "text"]
    assert "".join(texts) == response.text
    thinking: list[ReasoningPart] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "thinking":
            thinking.append(ReasoningPart(text=block.thinking, provider_metadata={
                "anthropic": {"signature": block.signature}}))
        elif block.type == "redacted_thinking":
            thinking.append(ReasoningPart(provider_metadata={"anthropic": {"data": block.data}}))
        elif block.type == "tool_use":
            calls.append(ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input)))
    assert response.reasoning == thinking
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] \
        == [(c.id, c.name, json.loads(c.arguments)) for c in calls]
    usage = message.usage
    assert response.usage.input_tokens == usage.input_tokens + (
        usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    assert (response.usage.output_tokens, response.usage.cache_read_tokens,
            response.usage.cache_write_tokens) == (usage.output_tokens,
                                                   usage.cache_read_input_tokens,
                                                   usage.cache_creation_input_tokens)
    assert usage.output_tokens_details is not None
    assert response.usage.reasoning_tokens == usage.output_tokens_details.thinking_tokens


# -- the stream and the message ------------------------------------------------------------


async def test_sdk_and_adapter_read_the_same_stream() -> None:
    with ScriptedAnthropicServer([FULL, FULL, FULL], chunk_size=5,
                                 min_cache_tokens=0) as server:
        client = sdk(server)
        with client.messages.stream(model="claude-fidelity", max_tokens=1024,
                                    messages=USER) as stream:
            streamed_text = "".join(stream.text_stream)
            final = stream.get_final_message()
        created = client.messages.create(model="claude-fidelity", max_tokens=1024,
                                         messages=USER)
        # the same request as the SDK's: no breakpoints, so the same usage
        response = await adapter(server, prompt_cache="off").complete(
            [Message(role="user", content=USER[0]["content"])])
    assert server.requests[2]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": USER[0]["content"]}]}]
    assert streamed_text == "Checking both."
    assert final.stop_reason == created.stop_reason == "tool_use"
    assert [b.to_dict() for b in final.content] == [b.to_dict() for b in created.content]
    same_content(final, response)
    same_content(created, response)
    assert response.finish_reason == "tool_calls"


def test_the_raw_events_are_the_apis() -> None:
    reply = AnthropicReply(text="Hi.", thinking=(Thinking("hm"),),
                           tool_calls=(ToolCall(id="toolu_1", name="weather",
                                                arguments='{"city": "Oslo"}'),))
    with ScriptedAnthropicServer([reply]) as server:
        events = list(sdk(server).messages.create(model="m", max_tokens=2048, messages=USER,
                                                  stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}
    assert kinds.count("content_block_stop") == 3
    start = events[0]
    assert start.type == "message_start" and start.message.content == []
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason == "tool_use"


def test_sdk_reads_the_counted_cache_usage() -> None:
    system: Any = [{"type": "text", "text": "Rules. " * 800,
                    "cache_control": {"type": "ephemeral"}}]
    with ScriptedAnthropicServer(["one", "two"]) as server:
        client = sdk(server)
        first = client.messages.create(model="m", max_tokens=64, system=system, messages=USER)
        second = client.messages.create(model="m", max_tokens=64, system=system, messages=USER)
    assert (first.usage.cache_creation_input_tokens or 0) > 1024
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens \
        == first.usage.cache_creation_input_tokens
    assert second.usage.input_tokens == first.usage.input_tokens > 0


# -- errors ------------------------------------------------------------------------------------


def test_sdk_raises_overloaded_and_rate_limits_as_anthropic_sends_them() -> None:
    with ScriptedAnthropicServer([anthropic_overloaded(),
                                  anthropic_rate_limited(retry_after=7)]) as server:
        client = sdk(server)
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            client.messages.create(model="m", max_tokens=10, messages=USER)
        with pytest.raises(anthropic.RateLimitError) as limited:
            client.messages.create(model="m", max_tokens=10, messages=USER)
    assert overloaded.value.status_code == 529
    assert isinstance(overloaded.value.body, dict)
    assert overloaded.value.body["error"] == {"type": "overloaded_error",
                                              "message": "Overloaded"}
    assert overloaded.value.type == "overloaded_error"
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.type == "rate_limit_error"


def test_sdk_raises_a_mid_stream_error_event() -> None:
    with ScriptedAnthropicServer([StreamError(partial_text="Par")]) as server, \
            pytest.raises(anthropic.APIStatusError, match="Overloaded"), \
            sdk(server).messages.stream(model="m", max_tokens=10, messages=USER) as stream:
        stream.get_final_message()


def test_sdk_gets_the_apis_400_for_a_request_it_always_refuses() -> None:
    many: Any = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
            for i in range(5)]
    with ScriptedAnthropicServer([]) as server, \
            pytest.raises(anthropic.BadRequestError) as refused:
        sdk(server).messages.create(model="m", max_tokens=10,
                                    messages=[{"role": "user", "content": many}])
    assert refused.value.type == "invalid_request_error"
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." \
        in refused.value.message
    assert server.rejections == [0]


# -- the strict mode against the SDK's own resent messages -------------------------------------


def _loop(client: anthropic.Anthropic, assistant: Any) -> anthropic.types.Message:
    return client.messages.create(
        model="m", max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048},
        tools=[{"name": "weather", "input_schema": TOOLS[0].parameters}],
        messages=[*USER, {"role": "assistant", "content": assistant},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "toolu_o", "content": "sunny"},
                      {"type": "tool_result", "tool_use_id": "toolu_r", "content": "rain"}]}])


def test_strict_thinking_accepts_what_the_sdk_sends_back() -> None:
    with ScriptedAnthropicServer([FULL, "Sunny and rainy."],
                                 strict=["anthropic_thinking"]) as server:
        client = sdk(server)
        first = client.messages.create(model="m", max_tokens=4096, messages=USER)
        second = _loop(client, first.to_param()["content"])
    assert server.rejections == []
    assert second.content[0].type == "text"


@pytest.mark.parametrize("change", ["signature", "text", "dropped", "redacted", "reordered"])
def test_strict_thinking_refuses_thinking_altered_or_missing(change: str) -> None:
    with ScriptedAnthropicServer([FULL], strict=["anthropic_thinking"]) as server:
        client = sdk(server)
        content: list[dict[str, Any]] = [
            b.model_dump(exclude_none=True)
            for b in client.messages.create(model="m", max_tokens=4096, messages=USER).content]
        for block in content:
            block.pop("citations", None)
            block.pop("caller", None)
        if change == "signature":
            content[0]["signature"] = "Zm9yZ2Vk"
        elif change == "text":
            content[0]["thinking"] += " (edited)"
        elif change == "dropped":
            content = content[2:]
        elif change == "redacted":
            del content[1]
        else:
            content[0], content[1] = content[1], content[0]
        with pytest.raises(anthropic.BadRequestError) as refused:
            _loop(client, content)
    assert server.rejections == [1]
    message = refused.value.message
    if change == "dropped":
        assert "must start with a thinking block" in message
    else:
        assert "cannot be modified" in message


def test_strict_thinking_refuses_a_forged_signature_in_an_earlier_turn() -> None:
    earlier: Any = [{"type": "thinking", "thinking": "old", "signature": "Zm9yZ2Vk"},
               {"type": "text", "text": "Hello."}]
    with ScriptedAnthropicServer(["unused"], strict=["anthropic_thinking"]) as server, \
            pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        sdk(server).messages.create(model="m", max_tokens=64, messages=[
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": earlier},
            {"role": "user", "content": "And now?"}])


# -- every request the adapter sends is the SDK's -------------------------------------------------


def _conversations() -> list[tuple[list[Message], CallOptions | None]]:
    signed = {"anthropic": {"signature": "c2ln"}}
    loop = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="What is in these?", parts=[
            TextPart(text="What is in these?"), FilePart(media_type="image/png", data=PNG),
            FilePart(media_type="application/pdf", data=PDF, filename="r.pdf"),
            FilePart(media_type="text/plain", data=base64.b64encode(b"notes").decode()),
            FilePart(media_type="image/jpeg", url="https://example.com/x.jpg")]),
        Message(role="assistant", content="", tool_calls=[
            ToolCall(id="toolu_a", name="weather", arguments='{"city": "Oslo"}')],
            reasoning=[ReasoningPart(text="look", provider_metadata=signed),
                       ReasoningPart(provider_metadata={"anthropic": {"data": "UkQ="}})]),
        Message(role="tool", content="shot", tool_call_id="toolu_a", parts=[
            TextPart(text="shot"), FilePart(media_type="image/png", data=PNG)]),
        Message(role="user", content="Thanks."),
    ]
    return [
        ([Message(role="user", content="hi")], None),
        (loop, None),
        (loop, CallOptions(max_tokens=8000, reasoning_effort="medium", stop=["X"],
                           tool_choice="auto", temperature=1.0, top_p=0.9, seed=3,
                           extra={"metadata": {"user_id": "u"}, "prompt_cache": "1h"})),
        (loop, CallOptions(tool_choice={"type": "function", "function": {"name": "weather"}},
                           response_format={"type": "json_schema", "json_schema": {
                               "name": "w", "schema": {"type": "object"}}},
                           extra={"prompt_cache": "off"})),
        (loop[:3], CallOptions(extra={"cache_control": {"type": "ephemeral", "ttl": "1h"}})),
    ]


@pytest.mark.parametrize("case", range(len(_conversations())))
def test_every_request_is_a_valid_message_create_params(case: int) -> None:
    messages, options = _conversations()[case]
    model = AnthropicChatModel("claude-fidelity", base_url="http://127.0.0.1:9", api_key="k")
    for conversation in (messages, EntryMessages([MemoryEntry.from_message(m)
                                                  for m in messages])):
        assert_valid_request(model.request_body(conversation, TOOLS, options))


def test_the_sdk_sends_the_adapters_request_unchanged() -> None:
    messages, options = _conversations()[2]
    model = AnthropicChatModel("claude-fidelity", base_url="http://127.0.0.1:9", api_key="k")
    params = assert_valid_request(model.request_body(messages, TOOLS, options))
    with ScriptedAnthropicServer(["ok"], min_cache_tokens=0) as server:
        with sdk(server).messages.stream(**{k: v for k, v in params.items()
                                            if k != "stream"}) as stream:
            stream.get_final_message()
        assert server.requests[0] == params
