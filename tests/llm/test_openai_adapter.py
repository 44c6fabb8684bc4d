"""OpenAIChatModel against ScriptedOpenAIServer over real HTTP: streaming, tool calls,
usage, request shape, retries, failures, cancellation and key hygiene."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import pytest

from nonoka.errors import ConfigurationError, ModelError
from nonoka.llm.base import ChatModel, ModelResponse, ToolSpec, Usage
from nonoka.llm.openai import OpenAIChatModel
from nonoka.state.messages import Message, ToolCall
from nonoka.testing import call, calls, text
from nonoka.testing.server import (
    Delay,
    DropConnection,
    HttpError,
    ScriptedOpenAIServer,
    Step,
)

HI = [Message(role="user", content="hi")]
SECRET = "sk-test-very-secret-key-0123456789"


def model_for(server: ScriptedOpenAIServer, **options: object) -> OpenAIChatModel:
    options.setdefault("backoff_base", 0.01)
    return OpenAIChatModel("gpt-test", base_url=server.base_url, **options)  # type: ignore[arg-type]


async def wait_until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def http_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nonoka-openai-http"]


# streaming and assembly ---------------------------------------------------------------------


async def test_streams_text_in_order_to_a_sync_sink() -> None:
    answer = "The quick brown fox jumps over the lazy dog."
    with ScriptedOpenAIServer([answer]) as server:
        chunks: list[str] = []
        response = await model_for(server).complete(HI, on_text=chunks.append)
        server.assert_done()
    assert len(chunks) > 3
    assert "".join(chunks) == answer == response.text
    assert response.finish_reason == "stop"
    assert response.tool_calls == []
    assert response.model == "gpt-test"


async def test_streams_text_to_an_async_sink_on_the_loop_thread() -> None:
    answer = "streamed through an async sink"
    loop_thread = threading.get_ident()
    seen: list[tuple[str, int]] = []

    async def sink(chunk: str) -> None:
        await asyncio.sleep(0)
        seen.append((chunk, threading.get_ident()))

    with ScriptedOpenAIServer([answer]) as server:
        response = await model_for(server).complete(HI, on_text=sink)
    assert "".join(c for c, _ in seen) == answer == response.text
    assert {ident for _, ident in seen} == {loop_thread}


async def test_several_tool_calls_with_fragmented_arguments_are_assembled() -> None:
    step = calls(("search", {"query": "durable agents", "limit": 5}, "call_a"),
                 ("read_file", {"path": "/tmp/some/long/path/name.txt"}, "call_b"),
                 content="Let me look.")
    with ScriptedOpenAIServer([step]) as server:
        chunks: list[str] = []
        response = await model_for(server).complete(HI, on_text=chunks.append)
    assert response.tool_calls == step.tool_calls
    assert response.text == "Let me look." == "".join(chunks)
    assert response.finish_reason == "tool_calls"


async def test_tool_calls_reported_with_finish_reason_stop_count_as_tool_calls() -> None:
    odd = ModelResponse(tool_calls=[ToolCall(id="c1", name="now", arguments="{}")],
                        finish_reason="stop")
    cut = ModelResponse(text="truncated", finish_reason="length")
    with ScriptedOpenAIServer([odd, cut]) as server:
        model = model_for(server)
        assert (await model.complete(HI)).finish_reason == "tool_calls"
        assert (await model.complete(HI)).finish_reason == "length"


# usage and cost ----------------------------------------------------------------------------


async def test_usage_and_server_sent_cost_win_over_configured_prices() -> None:
    step = text("hi", input_tokens=120, output_tokens=30, cost_usd=0.0042)
    with ScriptedOpenAIServer([step]) as server:
        model = model_for(server, input_price_per_mtok=1.0, output_price_per_mtok=1.0)
        response = await model.complete(HI)
    assert response.usage == Usage(input_tokens=120, output_tokens=30, cost_usd=0.0042)


async def test_cost_is_computed_from_configured_prices() -> None:
    step = text("hi", input_tokens=1_000_000, output_tokens=500_000)
    with ScriptedOpenAIServer([step]) as server:
        model = model_for(server, input_price_per_mtok=2.0, output_price_per_mtok=8.0)
        response = await model.complete(HI)
    assert response.usage == Usage(input_tokens=1_000_000, output_tokens=500_000, cost_usd=6.0)


async def test_cost_is_unknown_without_prices_or_server_cost() -> None:
    with ScriptedOpenAIServer([text("hi", input_tokens=7, output_tokens=3)]) as server:
        response = await model_for(server).complete(HI)
    assert response.usage == Usage(input_tokens=7, output_tokens=3, cost_usd=None)


# request shape ----------------------------------------------------------------------------


async def test_history_with_tool_calls_and_tools_serialise_in_openai_shape() -> None:
    first = ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 2}')
    second = ToolCall(id="call_2", name="now", arguments="{}")
    history = [
        Message(role="system", content="be brief"),
        Message(role="user", content="add 1 and 2, and tell the time"),
        Message(role="assistant", content="", tool_calls=[first, second]),
        Message(role="tool", content="3", tool_call_id="call_1"),
        Message(role="tool", content="noon", tool_call_id="call_2"),
        Message(role="assistant", content="3, at noon"),
        Message(role="user", content="thanks"),
    ]
    tool = ToolSpec("add", "Add two numbers.", {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"]})
    with ScriptedOpenAIServer(["you're welcome"]) as server:
        await model_for(server).complete(history, [tool])
    body = server.requests[0]
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [tool.to_openai()]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "add 1 and 2, and tell the time"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
            {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
        {"role": "assistant", "content": "3, at noon"},
        {"role": "user", "content": "thanks"},
    ]


async def test_tools_are_omitted_when_there_are_none() -> None:
    with ScriptedOpenAIServer(["ok"]) as server:
        await model_for(server).complete(HI)
    assert "tools" not in server.requests[0]


async def test_a_tool_message_without_call_id_is_refused_before_sending() -> None:
    with ScriptedOpenAIServer([]) as server:
        with pytest.raises(ConfigurationError, match="tool_call_id"):
            await model_for(server).complete([Message(role="tool", content="orphan")])
        assert server.requests == []


async def test_authorization_header_is_sent_with_a_key_and_absent_without() -> None:
    with ScriptedOpenAIServer(["one", "two"]) as server:
        await model_for(server, api_key=SECRET,
                        extra_headers={"X-Title": "nonoka tests"}).complete(HI)
        await model_for(server, api_key="").complete(HI)
    with_key, without_key = server.headers
    assert with_key["authorization"] == f"Bearer {SECRET}"
    assert with_key["x-title"] == "nonoka tests"
    assert "authorization" not in without_key


async def test_custom_base_url_from_environment_needs_no_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedOpenAIServer(["local"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        model = OpenAIChatModel("llama")
        assert model.endpoint == f"{server.base_url}/chat/completions"
        assert (await model.complete(HI)).text == "local"
    assert "authorization" not in server.headers[0]


def test_missing_key_for_the_default_endpoint_is_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY") as caught:
        OpenAIChatModel("gpt-4o-mini")
    assert "OPENAI_BASE_URL" in str(caught.value)


def test_names_and_protocol() -> None:
    model = OpenAIChatModel("gpt-4o-mini", api_key=SECRET)
    assert isinstance(model, ChatModel)
    assert model.name == "openai:gpt-4o-mini"
    assert model.endpoint == "https://api.openai.com/v1/chat/completions"
    assert OpenAIChatModel("m", base_url="http://h:1/v1", label="vllm:m").name == "vllm:m"
    assert SECRET not in repr(model)
    with pytest.raises(ConfigurationError, match="base URL"):
        OpenAIChatModel("m", base_url="ftp://example.com")


# retries and failures ----------------------------------------------------------------------


async def test_rate_limit_and_server_error_are_retried_then_succeed() -> None:
    script: list[Step] = [HttpError(429, retry_after=0), HttpError(500), "finally"]
    with ScriptedOpenAIServer(script) as server:
        chunks: list[str] = []
        response = await model_for(server).complete(HI, on_text=chunks.append)
        server.assert_done()
    assert response.text == "finally" == "".join(chunks)


async def test_retry_after_is_honoured() -> None:
    with ScriptedOpenAIServer([HttpError(429, retry_after=0.3), "ok"]) as server:
        started = time.monotonic()
        assert (await model_for(server).complete(HI)).text == "ok"
    assert time.monotonic() - started >= 0.3


async def test_gives_up_after_max_retries_naming_endpoint_and_status() -> None:
    body = {"error": {"message": "The engine is currently overloaded", "type": "server_error"}}
    with ScriptedOpenAIServer([HttpError(503, body)] * 3) as server:
        model = model_for(server, max_retries=2)
        with pytest.raises(ModelError) as caught:
            await model.complete(HI)
        server.assert_done()
    error = caught.value
    assert error.status == 503
    assert error.retryable is True
    assert error.endpoint == model.endpoint
    message = str(error)
    assert model.endpoint in message
    assert "HTTP 503" in message
    assert "currently overloaded" in message
    assert "3 attempts" in message


async def test_a_client_error_fails_at_once() -> None:
    body = {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}
    with ScriptedOpenAIServer([HttpError(400, body), "never sent"]) as server:
        with pytest.raises(ModelError, match="HTTP 400: The model `nope` does not exist") as caught:
            await model_for(server).complete(HI)
        assert len(server.requests) == 1
    assert caught.value.retryable is False
    assert caught.value.status == 400


async def test_a_dropped_stream_before_any_text_is_retried() -> None:
    with ScriptedOpenAIServer([DropConnection(), "whole answer"]) as server:
        chunks: list[str] = []
        response = await model_for(server).complete(HI, on_text=chunks.append)
        server.assert_done()
    assert response.text == "whole answer" == "".join(chunks)


async def test_a_dropped_stream_after_text_is_not_retried_and_text_not_duplicated() -> None:
    with ScriptedOpenAIServer([DropConnection("partial answer text"), "never"]) as server:
        chunks: list[str] = []
        with pytest.raises(ModelError, match="ended before the answer was complete") as caught:
            await model_for(server).complete(HI, on_text=chunks.append)
        assert len(server.requests) == 1
    assert "".join(chunks) == "partial answer text"
    assert caught.value.retryable is True  # the caller may start a fresh turn


async def test_without_a_sink_a_dropped_stream_is_retried_even_after_text() -> None:
    with ScriptedOpenAIServer([DropConnection("partial"), "whole"]) as server:
        assert (await model_for(server).complete(HI)).text == "whole"


async def test_timeout_is_a_retryable_model_error() -> None:
    with ScriptedOpenAIServer([Delay(5, "too late")]) as server:
        model = model_for(server, timeout=0.2, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ModelError, match="timeout") as caught:
            await model.complete(HI)
        assert time.monotonic() - started < 2
    assert caught.value.retryable is True
    assert caught.value.status is None
    assert model.endpoint in str(caught.value)


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_connection_refused_names_the_endpoint() -> None:
    url = f"http://127.0.0.1:{unused_port()}/v1"
    model = OpenAIChatModel("m", base_url=url, api_key=SECRET, max_retries=1, backoff_base=0.01)
    with pytest.raises(ModelError) as caught:
        await model.complete(HI)
    assert f"{url}/chat/completions" in str(caught.value)
    assert "2 attempts" in str(caught.value)
    assert caught.value.retryable is True
    assert SECRET not in str(caught.value)


async def test_https_endpoints_go_through_tls() -> None:
    with ScriptedOpenAIServer([]) as server:
        url = server.base_url.replace("http://", "https://")
        model = OpenAIChatModel("m", base_url=url, max_retries=0)
        with pytest.raises(ModelError, match=r"https://127\.0\.0\.1:\d+/v1/chat/completions"):
            await model.complete(HI)


async def test_the_api_key_never_appears_in_error_text() -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {SECRET}."}}
    with (ScriptedOpenAIServer([HttpError(401, echo)]) as server,
          pytest.raises(ModelError) as caught):
        await model_for(server, api_key=SECRET).complete(HI)
    assert "HTTP 401" in str(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)


async def test_a_script_that_runs_out_answers_500_with_a_clear_message() -> None:
    with ScriptedOpenAIServer(["only one"]) as server:
        model = model_for(server, max_retries=0)
        await model.complete(HI)
        with pytest.raises(ModelError, match="scripted server has no step left"):
            await model.complete(HI)
        with pytest.raises(AssertionError, match="no step left"):
            server.assert_done()


# cancellation ------------------------------------------------------------------------------


async def test_cancelling_while_waiting_for_the_server_ends_the_worker_promptly() -> None:
    with ScriptedOpenAIServer([Delay(30, "too late")]) as server:
        task = asyncio.create_task(model_for(server).complete(HI))
        await wait_until(lambda: len(server.requests) == 1)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: not http_workers(), within=1.0)
        assert time.monotonic() - started < 1.0


async def test_cancelling_mid_stream_ends_the_worker_promptly() -> None:
    first_chunk = asyncio.Event()

    async def stuck_sink(chunk: str) -> None:
        first_chunk.set()
        await asyncio.Event().wait()  # never returns

    with ScriptedOpenAIServer(["a long answer that streams in many chunks"]) as server:
        task = asyncio.create_task(model_for(server).complete(HI, on_text=stuck_sink))
        await asyncio.wait_for(first_chunk.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: not http_workers(), within=1.0)


async def test_tool_call_helper_steps_round_trip() -> None:
    with ScriptedOpenAIServer([call("weather", {"city": "Paris"}, id="w1")]) as server:
        response = await model_for(server).complete(HI)
    assert response.tool_calls == [ToolCall(id="w1", name="weather",
                                            arguments='{"city": "Paris"}')]


# The retry phrases of OpenCode 1.18.33 (its session retry reads a failure's message):
# a message with one of them makes the host retry a dead address ~6 more times.
HOST_RETRY_PHRASES = ("connection refused", "econnrefused", "getaddrinfo", "enotfound",
                      "fetch failed", "connection error", "network error", "eai_again")


async def test_an_unreachable_endpoint_fails_within_seconds_with_default_retries() -> None:
    url = f"http://127.0.0.1:{unused_port()}/v1"
    model = OpenAIChatModel("m", base_url=url)  # the defaults a bridge runs with
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        await model.complete(HI)
    assert time.monotonic() - started < 3
    message = str(caught.value)
    assert "nothing accepts connections at 127.0.0.1:" in message
    assert "2 attempts" in message  # one quick retry for a restarting server, no more
    assert not [p for p in HOST_RETRY_PHRASES if p in message.lower()], message


async def test_a_host_name_that_does_not_resolve_fails_within_seconds() -> None:
    model = OpenAIChatModel("m", base_url="http://nonoka-no-such-host.invalid/v1")
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        await model.complete(HI)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "'nonoka-no-such-host.invalid' does not resolve" in message
    assert not [p for p in HOST_RETRY_PHRASES if p in message.lower()], message


def test_a_sessions_conversation_is_posted_byte_for_byte_as_its_messages_would_be() -> None:
    """The adapter encodes a session's entries straight to the wire (in one call, then
    only the entries a longer conversation adds); the bytes are those of the same
    ``Message`` list."""
    from nonoka.state.entries import EntryMessages, MemoryEntry
    from nonoka.state.prefix_memo import ConversationPasses

    model = OpenAIChatModel("gpt-test", base_url="http://127.0.0.1:9/v1", api_key="k",
                            passes=ConversationPasses())
    call_ = ToolCall(id="c1", name="bash", arguments='{"cmd": "ls \\"ö\\""}')
    entries = [MemoryEntry.make("system", "rules"), MemoryEntry.make("user", "héllo\n\u2028"),
               MemoryEntry.assistant("", [call_]), MemoryEntry.tool_result(call_, "out"),
               MemoryEntry.tool_result(ToolCall(id="c2", name="x"), "bad", is_error=True),
               MemoryEntry.assistant("done 数据")]
    tools = [ToolSpec(name="bash", description="run", parameters={"type": "object"})]
    expected = model.request_body([e.to_message() for e in entries], tools)
    for end in (3, 3, 4, 6, 6, 2, 6):  # from scratch, resumed, resumed, again, shorter...
        want = model.request_body([e.to_message() for e in entries[:end]], tools)
        assert model.request_body(EntryMessages(entries[:end]), tools) == want
    assert model.request_body(EntryMessages(entries), tools) == expected
    assert model.request_body(EntryMessages([]), tools) == model.request_body([], tools)
    altered = [*entries[:2], MemoryEntry.make("user", "another"), *entries[3:]]
    assert model.request_body(EntryMessages(altered), tools) == model.request_body(
        [e.to_message() for e in altered], tools)
