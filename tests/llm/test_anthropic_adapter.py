"""The ``anthropic:`` adapter: the request it builds (blocks, merging, options, cache
breakpoints, byte stability), and what it reads from a real scripted Messages API server
(streaming, thinking, usage and cost, stop reasons, errors and retries, keys)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from nonoka.errors import ConfigurationError, ModelError, ModelNotConfiguredError
from nonoka.llm import resolve_model
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.anthropic_wire import DEFAULT_MAX_TOKENS, THINKING_BUDGETS
from nonoka.llm.base import CallOptions, ToolSpec
from nonoka.llm.catalog import cost, known_model
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import FilePart, Message, ReasoningPart, TextPart, ToolCall
from nonoka.testing import call, text
from nonoka.testing.server import (
    AnthropicReply,
    DropConnection,
    HttpError,
    ScriptedAnthropicServer,
    StreamError,
    Thinking,
    anthropic_overloaded,
    anthropic_rate_limited,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(32))).decode()
PDF = base64.b64encode(b"%PDF-1.4 scripted").decode()
TOOLS = [ToolSpec("lookup", "Look up the weather.",
                  {"type": "object", "properties": {"city": {"type": "string"}}}),
         ToolSpec("read", "Read a file.", {"type": "object", "properties": {}})]
SIGNED = {"anthropic": {"signature": "c2lnbmVk"}}
MARK = ', "cache_control": {"type": "ephemeral"}'


def model(base_url: str = "http://127.0.0.1:9", **kwargs: Any) -> AnthropicChatModel:
    kwargs.setdefault("api_key", "sk-ant-test")
    return AnthropicChatModel("claude-test", base_url=base_url, **kwargs)


def body(messages: Any, tools: Any = (), options: CallOptions | None = None,
         **kwargs: Any) -> dict[str, Any]:
    sent: dict[str, Any] = json.loads(model(**kwargs).request_body(messages, tools, options))
    return sent


def loop_conversation() -> list[Message]:
    return [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Look at this and the report.", parts=[
            TextPart(text="Look at this"), FilePart(media_type="image/png", data=PNG),
            TextPart(text="and the report."),
            FilePart(media_type="application/pdf", data=PDF, filename="report.pdf")]),
        Message(role="assistant", content="Checking.", tool_calls=[
            ToolCall(id="toolu_1", name="lookup", arguments='{"city": "Lyon"}'),
            ToolCall(id="toolu_2", name="read", arguments="{}")],
            reasoning=[ReasoningPart(text="Two lookups.", provider_metadata=SIGNED),
                       ReasoningPart(provider_metadata={"anthropic": {"data": "UkVE"}})]),
        Message(role="tool", content="sunny", tool_call_id="toolu_1"),
        Message(role="tool", content="chart.png", tool_call_id="toolu_2", parts=[
            TextPart(text="chart.png"), FilePart(media_type="image/png", data=PNG)]),
    ]


def entries(messages: list[Message]) -> EntryMessages:
    return EntryMessages([MemoryEntry.from_message(m) for m in messages])


# -- the request -------------------------------------------------------------------------


def test_stored_entries_and_messages_encode_to_the_same_bytes() -> None:
    messages = loop_conversation()
    options = CallOptions(reasoning_effort="low")
    assert model().request_body(entries(messages), TOOLS, options) \
        == model().request_body(messages, TOOLS, options)


def test_the_body_holds_blocks_in_the_apis_shapes() -> None:
    sent = body(loop_conversation(), TOOLS)
    assert list(sent) == ["model", "max_tokens", "stream", "tools", "system", "messages"]
    assert (sent["model"], sent["max_tokens"], sent["stream"]) \
        == ("claude-test", DEFAULT_MAX_TOKENS, True)
    assert sent["tools"][0] == {"name": "lookup", "description": "Look up the weather.",
                                "input_schema": TOOLS[0].parameters}
    assert sent["system"] == [{"type": "text", "text": "Be brief.",
                               "cache_control": {"type": "ephemeral"}}]
    user, assistant, results = sent["messages"]
    assert user["content"][:4] == [
        {"type": "text", "text": "Look at this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "and the report."},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": PDF}, "title": "report.pdf",
         "cache_control": {"type": "ephemeral"}}]
    assert assistant == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Two lookups.", "signature": "c2lnbmVk"},
        {"type": "redacted_thinking", "data": "UkVE"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Lyon"}},
        {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}}]}
    assert results["role"] == "user"  # tool results are the user's, in one message
    assert [b["tool_use_id"] for b in results["content"]] == ["toolu_1", "toolu_2"]
    assert results["content"][1]["content"] == [
        {"type": "text", "text": "chart.png"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]


def test_four_breakpoints_at_most_on_the_stable_prefix() -> None:
    raw = model().request_body(loop_conversation(), TOOLS).decode()
    assert raw.count('"cache_control"') == 4
    sent = json.loads(raw)
    assert "cache_control" in sent["tools"][-1] and "cache_control" not in sent["tools"][0]
    assert "cache_control" in sent["system"][-1]
    user, assistant, results = sent["messages"]
    # the message before the last assistant one (where the last request ended) and the end
    assert "cache_control" in user["content"][-1]
    assert all("cache_control" not in b for b in assistant["content"])
    assert "cache_control" in results["content"][-1]
    assert "cache_control" not in results["content"][-1]["content"][-1]


def test_each_step_starts_with_the_bytes_of_the_step_before() -> None:
    """A tool loop: each request is the previous one plus the new exchange; a
    breakpoint moves by adding its mark, and the previous step's fixed one is dropped."""
    messages: list[Message] = [Message(role="system", content="You are terse. " * 50),
                               Message(role="user", content="Start.")]
    adapter = model()
    before = adapter.request_body(entries(messages), TOOLS).decode()
    for step in range(6):
        messages += [
            Message(role="assistant", content="", tool_calls=[
                ToolCall(id=f"toolu_{step}", name="lookup", arguments='{"city": "Oslo"}')],
                reasoning=[ReasoningPart(text=f"step {step}", provider_metadata=SIGNED)]),
            Message(role="tool", content=f"result {step} é", tool_call_id=f"toolu_{step}")]
        after = adapter.request_body(entries(messages), TOOLS).decode()
        assert after.count('"cache_control"') == 4
        # the previous request's last message keeps its bytes, mark included
        last_before = before[before.rindex('{"role": '):-2]
        assert last_before.endswith("}]}") and MARK in last_before
        dropped = len(MARK) if step else 0  # the mark of the step before the last
        assert after.index(last_before) == before.index(last_before) - dropped
        # unmarked, the previous request is a prefix of this one
        assert after.replace(MARK, "").startswith(before.replace(MARK, "")[:-2])
        # and the bytes are identical up to the mark dropped from the step before
        shared = next(i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b)
        if step == 0:  # nothing to drop yet: the new exchange follows the old end
            assert shared == len(before) - 2
        else:
            assert before[shared:].startswith(MARK) and shared > len(before) - 400
        before = after


def test_consecutive_same_role_messages_are_merged_tool_results_first() -> None:
    sent = body([Message(role="user", content="one"), Message(role="user", content="two"),
                 Message(role="assistant", content="", tool_calls=[
                     ToolCall(id="t1", name="lookup", arguments="{}")]),
                 Message(role="user", content="note first"),
                 Message(role="tool", content="done", tool_call_id="t1"),
                 Message(role="assistant", content="")],  # empty: left out
                options=CallOptions(extra={"prompt_cache": "off"}))
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "one"},
                                             {"type": "text", "text": "two"}]
    assert [b["type"] for b in sent["messages"][2]["content"]] == ["tool_result", "text"]


def test_reasoning_without_an_anthropic_signature_is_not_sent() -> None:
    sent = body([Message(role="user", content="hi"), Message(
        role="assistant", content="ok", reasoning=[
            ReasoningPart(text="from deepseek", provider_metadata={
                "openai_compatible": {"field": "reasoning_content"}}),
            ReasoningPart(text="unsigned"),
            ReasoningPart(provider_metadata={"anthropic": {"redactedData": "QUk="}})])],
        prompt_cache="off")
    assert sent["messages"][1]["content"] == [{"type": "redacted_thinking", "data": "QUk="},
                                              {"type": "text", "text": "ok"}]


def test_files_of_every_kind() -> None:
    notes = base64.b64encode("note ✓".encode()).decode()
    sent = body([Message(role="user", content="", parts=[
        FilePart(media_type="image/jpeg", url="https://example.com/a.jpg"),
        FilePart(media_type="image/png", url=f"data:image/png;base64,{PNG}"),
        FilePart(media_type="application/pdf", url="https://example.com/r.pdf"),
        FilePart(media_type="text/markdown", data=notes, filename="notes.md"),
        FilePart(media_type="application/zip", data="UEs=", filename="a.zip")])],
        options=CallOptions(extra={"prompt_cache": "off"}))
    assert sent["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/r.pdf"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "note ✓"}, "title": "notes.md"},
        {"type": "text", "text": "[file a.zip (application/zip) not sent: the Messages API "
                                 "takes images, PDFs and text files]"}]


def test_call_options_in_the_apis_fields() -> None:
    sent = body([Message(role="user", content="hi")], TOOLS, CallOptions(
        max_tokens=2000, temperature=0.5, top_p=0.9, stop=["END"], seed=7,
        tool_choice="required", response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object"}}},
        extra={"metadata": {"user_id": "u1"}, "service_tier": "auto", "model": "not-this",
               "max_tokens": 1}))
    assert sent["model"] == "claude-test"
    assert list(sent) == ["model", "max_tokens", "temperature", "stop_sequences",
                          "tool_choice", "output_config", "metadata", "service_tier", "stream",
                          "tools", "messages"]
    assert {k: sent[k] for k in ("max_tokens", "temperature", "stop_sequences", "tool_choice",
                                 "output_config", "metadata", "service_tier")} == {
        "max_tokens": 2000, "temperature": 0.5, "stop_sequences": ["END"],
        "tool_choice": {"type": "any"},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "metadata": {"user_id": "u1"}, "service_tier": "auto"}
    # a Claude model takes temperature or top_p, not both (as the AI SDK sends them); the
    # Messages API has no seed
    assert not {"top_p", "seed", "thinking"} & set(sent)
    sampled = body([Message(role="user", content="hi")],
                   options=CallOptions(top_p=0.9, extra={"top_k": 40}))
    assert (sampled["top_p"], sampled["top_k"]) == (0.9, 40)
    named = body([Message(role="user", content="hi")], TOOLS, CallOptions(
        tool_choice={"type": "function", "function": {"name": "lookup"}}))
    assert named["tool_choice"] == {"type": "tool", "name": "lookup"}


def test_top_k_and_the_tools_eager_input_streaming_as_the_ai_sdk_sends_them() -> None:
    """The call's ``top_k`` and the tools it names in ``eager_input_streaming`` arrive as
    the AI SDK's Anthropic provider writes them (OpenCode directly): ``top_k`` beside the
    other sampling fields, ``eager_input_streaming: true`` on each named tool only."""
    hi = [Message(role="user", content="hi")]
    sent = body(hi, TOOLS, CallOptions(top_k=40, eager_input_streaming=["read"]))
    assert sent["top_k"] == 40
    assert sent["tools"][0] == {"name": "lookup", "description": "Look up the weather.",
                                "input_schema": TOOLS[0].parameters}
    assert sent["tools"][1]["eager_input_streaming"] is True
    assert list(sent["tools"][1]) == ["name", "description", "input_schema",
                                      "eager_input_streaming", "cache_control"]
    # the thinking rules hold for it as for extra's top_k: none beside thinking
    thinking = body(hi, options=CallOptions(top_k=40, reasoning_effort="low"))
    assert "top_k" not in thinking and thinking["thinking"]["type"] == "enabled"
    # extra's top_k (a model's options) wins over the call's
    assert body(hi, options=CallOptions(top_k=40, extra={"top_k": 5}))["top_k"] == 5
    # a name that is no tool of the call changes nothing
    assert "eager_input_streaming" not in json.dumps(
        body(hi, TOOLS, CallOptions(eager_input_streaming=["write"])))


def test_the_other_adapters_leave_anthropic_s_top_k_and_eager_streaming_out() -> None:
    from nonoka.llm.openai import OpenAIChatModel
    from nonoka.llm.responses import OpenAIResponsesModel

    options = CallOptions(top_k=40, eager_input_streaming=["read"])
    hi = [Message(role="user", content="hi")]
    chat = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    responses = OpenAIResponsesModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    for sent in (chat.request_body(hi, TOOLS, options).decode(),
                 responses.body(hi, TOOLS, options).decode()):
        assert "top_k" not in sent and "eager_input_streaming" not in sent, sent


@pytest.mark.parametrize(("effort", "budget"), sorted(THINKING_BUDGETS.items()))
def test_reasoning_effort_is_a_thinking_budget(effort: str, budget: int) -> None:
    known = known_model("anthropic:claude-sonnet-4-5")
    sent = body([Message(role="user", content="hi")],
                options=CallOptions(reasoning_effort=effort), known=known)
    assert known is not None and sent["max_tokens"] == known.max_output_tokens
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": budget}


def test_the_thinking_budget_stays_below_max_tokens() -> None:
    sent = body([Message(role="user", content="hi")],
                options=CallOptions(reasoning_effort="high", max_tokens=5000))
    assert sent["thinking"]["budget_tokens"] == 4999
    assert "thinking" not in body([Message(role="user", content="hi")],
                                  options=CallOptions(reasoning_effort="none"))
    explicit = {"type": "enabled", "budget_tokens": 2048}
    assert body([Message(role="user", content="hi")], options=CallOptions(
        reasoning_effort="high", extra={"thinking": explicit}))["thinking"] == explicit
    with pytest.raises(ConfigurationError, match="raise max_tokens"):
        body([Message(role="user", content="hi")],
             options=CallOptions(reasoning_effort="low", max_tokens=1000))
    with pytest.raises(ConfigurationError, match="minimal, low, medium, high"):
        body([Message(role="user", content="hi")],
             options=CallOptions(reasoning_effort="extreme"))


def test_prompt_caching_off_one_hour_or_automatic() -> None:
    messages = loop_conversation()
    off = model(prompt_cache="off").request_body(messages, TOOLS).decode()
    assert "cache_control" not in off
    hour = model(prompt_cache="1h").request_body(messages, TOOLS).decode()
    assert hour.count('"cache_control": {"type": "ephemeral", "ttl": "1h"}') == 4
    per_call = model().request_body(messages, TOOLS, CallOptions(extra={"prompt_cache": "1h"}))
    assert per_call.decode() == hour
    assert b"prompt_cache" not in per_call
    automatic = json.loads(model().request_body(messages, TOOLS, CallOptions(
        extra={"cache_control": {"type": "ephemeral"}})))
    assert automatic["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(automatic).count("cache_control") == 1
    with pytest.raises(ConfigurationError, match="prompt cache setting '2h'"):
        model(prompt_cache="2h")


# -- against the scripted server ------------------------------------------------------------------


def serve(script: Any, **kwargs: Any) -> ScriptedAnthropicServer:
    kwargs.setdefault("min_cache_tokens", 0)
    return ScriptedAnthropicServer(script, **kwargs).start()


async def test_streams_text_and_thinking_and_keeps_the_signatures() -> None:
    reply = AnthropicReply(text="It is sunny.", thinking=(
        Thinking("The user asks about weather."), Thinking(redacted_data="RVJST1I=")),
        tool_calls=(ToolCall(id="toolu_9", name="lookup", arguments='{"city": "Lyon"}'),))
    server = serve([reply], chunk_size=4)
    texts: list[str] = []
    thoughts: list[str] = []
    try:
        response = await model(server.base_url).complete_with(
            [Message(role="user", content="Weather?")], TOOLS, on_text=texts.append,
            on_reasoning=thoughts.append)
    finally:
        server.close()
    assert len(texts) > 1 and "".join(texts) == "It is sunny." == response.text
    assert "".join(thoughts) == "The user asks about weather."
    signature = reply.thinking[0].block()["signature"]
    assert response.reasoning == [
        ReasoningPart(text="The user asks about weather.",
                      provider_metadata={"anthropic": {"signature": signature}}),
        ReasoningPart(provider_metadata={"anthropic": {"data": "RVJST1I="}})]
    assert response.tool_calls == [ToolCall(id="toolu_9", name="lookup",
                                            arguments='{"city": "Lyon"}')]
    assert response.finish_reason == "tool_calls"
    headers = server.headers[0]
    assert (headers["x-api-key"], headers["anthropic-version"]) == ("sk-ant-test", "2023-06-01")
    assert "authorization" not in headers


@pytest.mark.parametrize(("stop", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("refusal", "content_filter"), ("pause_turn", "pause_turn"),
    ("model_context_window_exceeded", "length")])
async def test_stop_reasons(stop: str, finish: str) -> None:
    server = serve([AnthropicReply(text="x", stop_reason=stop)])
    try:
        response = await model(server.base_url).complete([Message(role="user", content="hi")])
    finally:
        server.close()
    assert response.finish_reason == finish


async def test_usage_counts_every_input_token_and_prices_cache_reads_and_writes() -> None:
    known = known_model("anthropic:claude-sonnet-4-5")
    assert known is not None
    server = serve([AnthropicReply(text="ok", input_tokens=100, output_tokens=50,
                                   cache_read_tokens=8000, cache_write_tokens=2000,
                                   thinking=(Thinking("hm"),), thinking_tokens=20)])
    try:
        response = await model(server.base_url, known=known).complete(
            [Message(role="user", content="hi")])
    finally:
        server.close()
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
            usage.cache_write_tokens, usage.reasoning_tokens) == (10_100, 50, 8000, 2000, 20)
    assert usage.cost_usd == pytest.approx(cost(
        known, input_tokens=10_100, output_tokens=50, cached_tokens=8000,
        cache_write_tokens=2000))
    p = known.prices
    assert p.cache_read is not None and p.cache_write_5m is not None
    assert usage.cost_usd == pytest.approx(
        (100 * p.input + 8000 * p.cache_read + 2000 * p.cache_write_5m + 50 * p.output) / 1e6)


async def test_one_hour_writes_are_priced_at_the_one_hour_rate() -> None:
    known = known_model("anthropic:claude-haiku-4-5")
    assert known is not None
    server = serve(["first", "second"])
    system = Message(role="system", content="x" * 8000)
    try:
        adapter = model(server.base_url, known=known, prompt_cache="1h")
        first = await adapter.complete([system, Message(role="user", content="hi")])
        second = await adapter.complete([system, Message(role="user", content="hi"),
                                         Message(role="assistant", content="first"),
                                         Message(role="user", content="again")])
    finally:
        server.close()
    assert server.usages[0]["cache_creation"]["ephemeral_1h_input_tokens"] \
        == first.usage.cache_write_tokens > 2000
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert first.usage.cost_usd == pytest.approx(cost(
        known, input_tokens=first.usage.input_tokens, output_tokens=first.usage.output_tokens,
        cache_write_1h_tokens=first.usage.cache_write_tokens))


async def test_overloaded_and_rate_limited_are_retried_honouring_retry_after() -> None:
    server = serve([anthropic_overloaded(), anthropic_rate_limited(retry_after=0.3), "Done."])
    try:
        started = time.monotonic()
        response = await model(server.base_url, backoff_base=0.01).complete(
            [Message(role="user", content="hi")])
        waited = time.monotonic() - started
    finally:
        server.close()
    assert response.text == "Done." and len(server.requests) == 3
    assert waited >= 0.3


async def test_an_error_that_outlasts_the_retries_names_status_type_and_wait() -> None:
    server = serve([anthropic_rate_limited(retry_after=0.0)] * 2)
    try:
        with pytest.raises(ModelError) as raised:
            await model(server.base_url, max_retries=1).complete(
                [Message(role="user", content="hi")])
    finally:
        server.close()
    error = raised.value
    assert (error.status, error.retryable, error.retry_after) == (429, True, 0.0)
    assert "rate_limit_error" in str(error) and "gave up after 2 attempts" in str(error)
    assert error.body is not None and json.loads(error.body)["error"]["type"] \
        == "rate_limit_error"


async def test_a_bad_request_is_not_retried_and_the_key_never_shows() -> None:
    key = "sk-ant-secret-123"
    server = serve([HttpError(400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": f"bad key echo {key}"}})])
    try:
        with pytest.raises(ModelError) as raised:
            await model(server.base_url, api_key=key).complete(
                [Message(role="user", content="hi")])
    finally:
        server.close()
    assert raised.value.status == 400 and not raised.value.retryable
    assert key not in str(raised.value) and key not in (raised.value.body or "")
    assert len(server.requests) == 1


async def test_an_authentication_error_names_the_key_variable() -> None:
    server = serve([HttpError(401, {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid x-api-key"}})])
    try:
        with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
            await model(server.base_url).complete([Message(role="user", content="hi")])
    finally:
        server.close()


async def test_a_mid_stream_error_is_retried_only_before_text_was_delivered() -> None:
    server = serve([StreamError(), "Recovered."])
    try:
        response = await model(server.base_url, backoff_base=0.01).complete(
            [Message(role="user", content="hi")], on_text=lambda _: None)
    finally:
        server.close()
    assert response.text == "Recovered."
    server = serve([StreamError(partial_text="Half an ans"), "unused"])
    try:
        with pytest.raises(ModelError) as raised:
            await model(server.base_url, backoff_base=0.01).complete(
                [Message(role="user", content="hi")], on_text=lambda _: None)
    finally:
        server.close()
    assert raised.value.status == 529 and raised.value.retryable
    assert "overloaded_error" in str(raised.value) and len(server.requests) == 1


async def test_a_dropped_stream_is_retried() -> None:
    server = serve([DropConnection(), text("whole")])
    try:
        response = await model(server.base_url, backoff_base=0.01).complete(
            [Message(role="user", content="hi")])
    finally:
        server.close()
    assert response.text == "whole" and len(server.requests) == 2


async def test_x_should_retry_false_is_honoured() -> None:
    """Anthropic's ``x-should-retry`` header overrides the status (as the SDK does)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            hits.append(self.path)
            data = json.dumps({"type": "error", "error": {
                "type": "overloaded_error", "message": "Overloaded"}}).encode()
            self.send_response(529)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-should-retry", "false")
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ModelError) as raised:
            await model(f"http://127.0.0.1:{httpd.server_address[1]}").complete(
                [Message(role="user", content="hi")])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert hits == ["/v1/messages"]
    assert raised.value.status == 529 and not raised.value.retryable


async def test_an_unreachable_endpoint_names_the_base_url_variable() -> None:
    with pytest.raises(ModelError, match="ANTHROPIC_BASE_URL"):
        await model("http://127.0.0.1:9", max_retries=0).complete(
            [Message(role="user", content="hi")])


# -- resolving the spec and its settings -------------------------------------------------------


def test_the_spec_resolves_with_its_own_key_and_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="set ANTHROPIC_API_KEY, or set "
                                                 "ANTHROPIC_BASE_URL"):
        resolve_model("anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    resolved = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(resolved, AnthropicChatModel)
    assert resolved.name == "anthropic:claude-sonnet-4-5"
    assert resolved.endpoint == "https://api.anthropic.com/v1/messages"
    assert "sk-ant" not in repr(resolved)
    sent = json.loads(resolved.request_body([Message(role="user", content="hi")]))
    assert sent["max_tokens"] == 64_000  # the catalog's max output
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8123/proxy")
    proxied = resolve_model("anthropic:claude-x")
    assert isinstance(proxied, AnthropicChatModel)
    assert proxied.endpoint == "http://127.0.0.1:8123/proxy/v1/messages"
    with pytest.raises(ConfigurationError, match="names no model"):
        resolve_model("anthropic:")


def test_the_project_config_sets_the_prompt_cache(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from nonoka.turn.project import configured

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.delenv("NONOKA_MODEL", raising=False)
    (tmp_path / ".nonoka").mkdir()
    config = tmp_path / ".nonoka" / "config.toml"
    config.write_text('model = "anthropic:claude-haiku-4-5"\n[anthropic]\nprompt_cache = "1h"\n')
    chosen = configured(tmp_path)
    assert isinstance(chosen, AnthropicChatModel) and chosen.prompt_cache == "1h"
    config.write_text('model = "anthropic:claude-haiku-4-5"\n[anthropic]\nprompt_cache = "off"\n')
    chosen = configured(tmp_path)
    assert isinstance(chosen, AnthropicChatModel)
    assert b"cache_control" not in chosen.request_body([Message(role="user", content="hi")])
    config.write_text('model = "anthropic:claude-haiku-4-5"\n[anthropic]\nprompt_cache = 5\n')
    with pytest.raises(ModelNotConfiguredError, match=re.escape(
            "[anthropic] in .nonoka/config.toml: prompt_cache = 5 is not one of")):
        configured(tmp_path)
    config.write_text('model = "anthropic:claude-haiku-4-5"\n[anthropic]\ncache = "1h"\n')
    with pytest.raises(ModelNotConfiguredError, match="unknown field 'cache'"):
        configured(tmp_path)


async def test_cancelling_a_call_ends_it_at_once() -> None:
    from nonoka.testing.server import Delay

    server = serve([Delay(30, "late")])
    try:
        task = asyncio.ensure_future(model(server.base_url).complete(
            [Message(role="user", content="hi")]))
        await asyncio.sleep(0.2)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 1
    finally:
        server.close()


def test_a_tool_call_with_broken_arguments_goes_back_as_an_empty_object() -> None:
    sent = body([Message(role="user", content="hi"), Message(
        role="assistant", content="", tool_calls=[ToolCall(id="t", name="lookup",
                                                           arguments='{"city": "Ly')]),
        Message(role="tool", content="cut short", tool_call_id="t")])
    assert sent["messages"][1]["content"][0]["input"] == {}


def test_scripted_call_steps_are_served() -> None:
    assert AnthropicReply.of(call("lookup", {"city": "Oslo"}, id="c")).content() == [
        {"type": "tool_use", "id": "c", "name": "lookup", "input": {"city": "Oslo"}}]
