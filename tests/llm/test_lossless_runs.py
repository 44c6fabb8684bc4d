"""What a host sends reaches the model, and what the model returns reaches the store:
runs through the ``Runner`` and the real OpenAI-compatible adapter against a scripted
server that answers as the vendors do, strict modes included.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonoka import Agent, Message, Runner, tool
from nonoka.llm.base import CallOptions
from nonoka.llm.openai import OpenAIChatModel
from nonoka.state.messages import FilePart, TextPart
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing import call, text
from nonoka.testing.server import (
    Reply,
    ScriptedOpenAIServer,
    Step,
    context_length_exceeded,
    insufficient_quota,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(64))).decode()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    yield store
    await store.close()


def _server(script: list[Step], *strict: str) -> ScriptedOpenAIServer:
    return ScriptedOpenAIServer(script, strict=strict).start()


def _model(server: ScriptedOpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, api_key="sk-test",
                           max_retries=0, **kwargs)


@tool(idempotent=True)
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


async def test_deepseek_reasoning_comes_back_in_a_tool_loop(store: SQLiteCheckpointStore) -> None:
    """DeepSeek's thinking mode refuses a tool loop whose assistant message lost its
    ``reasoning_content``: nonoka stores the reasoning and sends it back."""
    server = _server([
        Reply.of(call("lookup", {"city": "Lyon"}, id="c1"), reasoning="I should look it up."),
        Reply(text="Sunny.", reasoning="The tool said sunny."),
    ], "deepseek_thinking")
    try:
        agent = Agent(model=_model(server, send_reasoning=True), tools=[lookup])
        result = await Runner(store).run_react(agent, "Weather in Lyon?")
    finally:
        server.close()
    assert result.success, result.error
    assert server.rejections == []
    sent = server.requests[1]["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["reasoning_content"] == "I should look it up."
    state = await store.load_session(result.session_id)
    assert state is not None
    stored = state.memory_entries[1]
    assert [r.text for r in stored.reasoning] == ["I should look it up."]


async def test_a_provider_that_is_not_sent_reasoning_is_refused_by_the_strict_mode(
        store: SQLiteCheckpointStore) -> None:
    """The strict mode can fail: a model told not to send reasoning back (as for an
    endpoint known to refuse it) sends nothing back."""
    server = _server([
        Reply.of(call("lookup", {"city": "Lyon"}, id="c1"), reasoning="look it up"),
        text("unused"),
    ], "deepseek_thinking")
    try:
        agent = Agent(model=_model(server, send_reasoning=False), tools=[lookup])
        result = await Runner(store).run_react(agent, "Weather in Lyon?")
    finally:
        server.close()
    assert not result.success
    assert server.rejections == [1]
    assert result.failure is not None and result.failure.status == 400


async def test_a_gemini_thought_signature_goes_back_with_its_call(
        store: SQLiteCheckpointStore) -> None:
    server = _server([
        Reply.of(call("lookup", {"city": "Oslo"}, id="c7"),
                 thought_signatures={"c7": "c2lnbmF0dXJl"}),
        text("Cold."),
    ], "gemini_signatures")
    try:
        agent = Agent(model=_model(server), tools=[lookup])
        result = await Runner(store).run_react(agent, "Weather in Oslo?")
    finally:
        server.close()
    assert result.success, result.error
    assert server.rejections == []
    call_sent = server.requests[1]["messages"][1]["tool_calls"][0]
    assert call_sent["extra_content"] == {"google": {"thought_signature": "c2lnbmF0dXJl"}}


async def test_an_image_reaches_the_model_and_a_tools_image_follows_its_run(
        store: SQLiteCheckpointStore) -> None:
    @tool(idempotent=True)
    def screenshot() -> str:
        """Take a screenshot."""
        return "taken"

    server = _server([call("screenshot", {}, id="s1"), text("A red square.")])
    prompt = Message(role="user", content="What is this?\nAnd this?", parts=[
        TextPart(text="What is this?"), FilePart(media_type="image/png", data=PNG),
        TextPart(text="And this?")])
    try:
        agent = Agent(model=_model(server), tools=[screenshot])
        result = await Runner(store).run_react(agent, prompt)
    finally:
        server.close()
    assert result.success, result.error
    user = server.requests[0]["messages"][0]
    assert user["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "And this?"}]
    state = await store.load_session(result.session_id)
    assert state is not None
    assert state.memory_entries[0].parts == prompt.parts


async def test_the_fields_a_host_adds_to_a_part_reach_the_model(
        store: SQLiteCheckpointStore) -> None:
    """What OpenCode's provider spreads onto a wire part (the part's
    ``providerOptions``: a text's cache hint, a field of the host's own) arrives there
    through nonoka."""
    server = _server([text("Fine print.")])
    prompt = Message(role="user", content="Read it", parts=[
        TextPart(text="Read it", provider_metadata={
            "openai_compatible": {"cache_control": {"type": "ephemeral"}}}),
        FilePart(media_type="image/png", data=PNG, provider_metadata={
            "openai_compatible": {"x_trace": "a1"}})])
    try:
        result = await Runner(store).run_react(Agent(model=_model(server)), prompt)
    finally:
        server.close()
    assert result.success, result.error
    assert server.requests[0]["messages"][0]["content"] == [
        {"type": "text", "text": "Read it", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"},
         "x_trace": "a1"}]


async def test_a_host_tool_result_with_an_image_is_sent_after_the_run(
        store: SQLiteCheckpointStore) -> None:
    from nonoka import ToolResult, host_tool

    read = host_tool("read", "read a file", {"type": "object"})
    server = _server([call("read", {"path": "a.png"}, id="r1"), text("A chart.")])
    try:
        agent = Agent(model=_model(server), tools=[read])
        runner = Runner(store)
        paused = await runner.run_react(agent, "Read a.png")
        assert paused.paused
        result = await runner.submit_tool_results(agent, paused.session_id, [ToolResult(
            tool_call_id="r1", content="a.png", parts=[
                TextPart(text="a.png"), FilePart(media_type="image/png", data=PNG)])])
    finally:
        server.close()
    assert result.success, result.error
    sent = server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2]["content"] == "a.png"
    assert sent[3]["content"][1] == {
        "type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}


async def test_cached_and_reasoning_tokens_reach_the_ledger_at_the_cache_rate(
        store: SQLiteCheckpointStore) -> None:
    from nonoka.llm.catalog import known_model

    known = known_model("openai:gpt-4o")
    assert known is not None
    server = _server([Reply(text="ok", input_tokens=10_000, output_tokens=200,
                            cached_tokens=8_000, reasoning_tokens=50)])
    try:
        agent = Agent(model=_model(server, known=known))
        result = await Runner(store).run_react(agent, "hi")
    finally:
        server.close()
    usage = result.usage
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (8_000, 50)
    prices = known.prices
    assert prices.cache_read is not None and prices.cache_read < prices.input
    expected = (2_000 * prices.input + 8_000 * prices.cache_read + 200 * prices.output) / 1e6
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.cost_usd < (10_000 * prices.input + 200 * prices.output) / 1e6


async def test_call_options_reach_the_body(store: SQLiteCheckpointStore) -> None:
    server = _server([text("ok")])
    options = CallOptions(max_tokens=32, temperature=0.2, top_p=0.9, stop=["END"], seed=7,
                          tool_choice="auto", reasoning_effort="low",
                          response_format={"type": "json_object"},
                          extra={"parallel_tool_calls": False})
    try:
        agent = Agent(model=_model(server), call_options=options)
        result = await Runner(store).run_react(agent, "hi")
    finally:
        server.close()
    assert result.success
    body = server.requests[0]
    for name, value in [*options.wire_fields().items()]:
        assert body[name] == value, name
    assert body["stream"] is True and body["model"] == "test-model"


@pytest.mark.parametrize(("step", "status", "code", "retryable"), [
    (context_length_exceeded(), 400, "context_length_exceeded", False),
    (insufficient_quota(), 429, "insufficient_quota", False)])
async def test_a_provider_error_reaches_the_caller_as_the_provider_gave_it(
        store: SQLiteCheckpointStore, step: Step, status: int, code: str,
        retryable: bool) -> None:
    server = _server([step])
    try:
        agent = Agent(model=_model(server))
        result = await Runner(store).run_react(agent, "hi")
    finally:
        server.close()
    assert not result.success and result.failure is not None
    provider = result.failure.provider_error()
    assert provider is not None
    assert provider["status"] == status and provider["retryable"] is retryable
    assert json.loads(provider["body"])["error"]["code"] == code
    assert len(server.requests) == 1  # a spent quota is not retried
