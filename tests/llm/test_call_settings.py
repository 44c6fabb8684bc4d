"""Every setting arrives, in each provider's own form (issue 34, item 3, adapter side):
temperature, top_p, max tokens, stop, seed, reasoning effort and thinking budgets reach
every adapter as its API takes them; OpenCode's thinking syntax (``budgetTokens``)
becomes Anthropic's ``budget_tokens``; options an API does not have are not sent (the
real APIs refuse unknown fields, and so do the scripted Anthropic and Responses
servers) but named in a ``model_option_dropped`` warning, unless the user lists them in
``passthrough``. Through the ``Runner`` and the real adapters over real HTTP; the bodies
are checked against the official SDKs' request types where those have the fields."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import message_create_params as anthropic_params
from anthropic.types.beta import message_create_params as anthropic_beta
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params

from nonoka import Agent, Message, Runner
from nonoka.events import RunEvent, RunWarning
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.anthropic_wire import ANTHROPIC_FIELDS
from nonoka.llm.base import OPTION_DROPPED, CallOptions
from nonoka.llm.catalog import known_model
from nonoka.llm.openai import COMPATIBLE_FIELDS, OPENAI_FIELDS, OpenAIChatModel
from nonoka.llm.responses import RESPONSES_FIELDS, OpenAIResponsesModel
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing.anthropic_checks import BODY_FIELDS
from nonoka.testing.responses import REQUEST_FIELDS
from nonoka.testing.server import (
    AnthropicReply,
    ResponsesReply,
    ScriptedAnthropicServer,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from tests.llm.test_anthropic_fidelity import assert_valid_request

KEY = "sk-test-settings"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    yield store
    await store.close()


async def _run(store: SQLiteCheckpointStore, model: Any, options: CallOptions
               ) -> tuple[Any, list[RunWarning]]:
    events: list[RunEvent] = []
    result = await Runner(store).run_react(Agent(model=model, call_options=options), "Hello?",
                                           on_event=events.append)
    return result, [e for e in events if isinstance(e, RunWarning)]


def _anthropic(server: ScriptedAnthropicServer, name: str = "claude-sonnet-4-5",
               **kwargs: Any) -> AnthropicChatModel:
    return AnthropicChatModel(name, base_url=server.base_url, api_key=KEY, max_retries=0,
                              **kwargs)


# Anthropic ---------------------------------------------------------------------------------


async def test_opencodes_thinking_syntax_reaches_anthropic_as_budget_tokens(
        store: SQLiteCheckpointStore) -> None:
    """``thinking: {type: "enabled", budgetTokens}`` as OpenCode's variants write it: the
    API's ``budget_tokens``, with ``max_tokens`` the answer's room plus the budget (as
    OpenCode's own Anthropic provider sends it). The scripted server refuses
    ``budgetTokens`` as the API does."""
    options = CallOptions(max_tokens=4000,
                          extra={"thinking": {"type": "enabled", "budgetTokens": 2048}})
    with ScriptedAnthropicServer([AnthropicReply(text="Thought it through.")]) as server:
        result, warnings = await _run(store, _anthropic(server), options)
        body = assert_valid_request(server.bodies[0])
    assert result.success, result.error
    assert server.rejections == []
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 4000 + 2048
    assert warnings == []


async def test_the_thinking_budget_and_max_tokens_stay_within_the_models_limit(
        store: SQLiteCheckpointStore) -> None:
    known = known_model("anthropic:claude-sonnet-4-5")
    assert known is not None
    options = CallOptions(max_tokens=known.max_output_tokens,
                          extra={"thinking": {"type": "enabled", "budgetTokens": 16000}})
    with ScriptedAnthropicServer([AnthropicReply(text="ok")]) as server:
        result, _ = await _run(store, _anthropic(server, known=known), options)
    assert result.success, result.error
    assert server.requests[0]["max_tokens"] == known.max_output_tokens


async def test_an_effort_variant_reaches_anthropic_in_output_config(
        store: SQLiteCheckpointStore) -> None:
    """OpenCode's variants of the models that take an effort (``effort: "high"``, beside
    adaptive thinking): ``output_config.effort``, as OpenCode's own Anthropic provider
    sends it, merged with a structured-output format; no warning."""
    options = CallOptions(max_tokens=2000, response_format={
        "type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
        extra={"thinking": {"type": "adaptive"}, "effort": "high"})
    with ScriptedAnthropicServer([AnthropicReply(text="{}")]) as server:
        result, warnings = await _run(store, _anthropic(server, "claude-opus-4-6"), options)
    assert result.success, result.error
    assert server.rejections == []
    sent = server.requests[0]
    assert sent["output_config"] == {"format": {"type": "json_schema",
                                                "schema": {"type": "object"}},
                                     "effort": "high"}
    assert "effort" not in sent and warnings == []


async def test_temperature_reaches_anthropic(store: SQLiteCheckpointStore) -> None:
    options = CallOptions(temperature=0.3, max_tokens=1000, stop=["END"])
    with ScriptedAnthropicServer([AnthropicReply(text="Warm.")]) as server:
        result, warnings = await _run(store, _anthropic(server), options)
    assert result.success, result.error
    sent = server.requests[0]
    assert (sent["temperature"], sent["max_tokens"], sent["stop_sequences"]) == (0.3, 1000,
                                                                                  ["END"])
    assert warnings == []


async def test_sampling_beside_thinking_is_left_out_and_said(
        store: SQLiteCheckpointStore) -> None:
    """The API refuses ``temperature`` (other than 1) and ``top_k`` while thinking is on:
    they are left out, as OpenCode's own provider does, and the warning says why."""
    options = CallOptions(temperature=0.7, reasoning_effort="low", seed=5, max_tokens=8000,
                          extra={"top_k": 10})
    with ScriptedAnthropicServer([AnthropicReply(text="ok")]) as server:
        result, warnings = await _run(store, _anthropic(server), options)
    assert result.success, result.error
    assert server.rejections == []
    sent = server.requests[0]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert not {"temperature", "top_k", "seed"} & set(sent)
    [warning] = warnings
    assert warning.code == OPTION_DROPPED
    assert warning.details["options"] == ["seed", "temperature", "top_k"]
    assert "while extended thinking is on" in warning.message
    assert "has no seed" in warning.message


async def test_unknown_options_are_dropped_with_a_warning_and_known_ones_translated(
        store: SQLiteCheckpointStore) -> None:
    """OpenCode hands a model's options over as written (camelCase): known ones reach the
    API under its names; unknown ones (which the API would refuse with a 400) are not
    sent, and a warning names them and the way to send them anyway."""
    options = CallOptions(extra={"serviceTier": "auto", "metadata": {"userId": "u-1"},
                                 "frequency_penalty": 0.4, "customFlag": "on"})
    with ScriptedAnthropicServer([AnthropicReply(text="ok")]) as server:
        result, warnings = await _run(store, _anthropic(server), options)
        body = assert_valid_request(server.bodies[0])
    assert result.success, result.error
    assert (body["service_tier"], body["metadata"]) == ("auto", {"user_id": "u-1"})
    assert not {"frequency_penalty", "customFlag", "custom_flag"} & set(body)
    [warning] = warnings
    assert warning.details["options"] == ["customFlag", "frequency_penalty"]
    assert '"passthrough": ["customFlag"]' in warning.message


async def test_a_passthrough_option_is_sent_exactly_as_given(
        store: SQLiteCheckpointStore) -> None:
    """Named in ``passthrough``, an option goes as given: here the scripted Anthropic
    server then refuses it as the API would, which shows it was sent."""
    options = CallOptions(extra={"passthrough": ["customFlag"], "customFlag": "on"})
    with ScriptedAnthropicServer([AnthropicReply(text="unused")]) as server:
        result, warnings = await _run(store, _anthropic(server), options)
    assert not result.success
    assert server.requests[0]["customFlag"] == "on"
    assert "passthrough" not in server.requests[0]
    assert "customFlag: Extra inputs are not permitted" in str(result.error)
    assert warnings == []


async def test_a_model_that_refuses_sampling_gets_none(store: SQLiteCheckpointStore) -> None:
    with ScriptedAnthropicServer([AnthropicReply(text="ok")]) as server:
        result, warnings = await _run(store, _anthropic(server, "claude-opus-4-7"),
                                      CallOptions(temperature=0.2, top_p=0.9))
    assert result.success, result.error
    assert not {"temperature", "top_p"} & set(server.requests[0])
    assert "claude-opus-4-7 takes no sampling parameters" in warnings[0].message


# OpenAI-compatible ---------------------------------------------------------------------------


async def test_an_openai_compatible_endpoint_gets_its_fields_and_not_unknown_ones(
        store: SQLiteCheckpointStore) -> None:
    options = CallOptions(temperature=0.2, top_p=0.8, seed=3, max_tokens=300,
                          reasoning_effort="high", extra={
                              "top_k": 20, "chat_template_kwargs": {"enable_thinking": True},
                              "parallelToolCalls": False, "custom_flag": "on"})
    with ScriptedOpenAIServer(["ok"]) as server:
        model = OpenAIChatModel("qwen3", base_url=server.base_url, api_key=KEY, max_retries=0)
        result, warnings = await _run(store, model, options)
    assert result.success, result.error
    sent = server.requests[0]
    assert {k: sent[k] for k in ("temperature", "top_p", "seed", "max_tokens",
                                 "reasoning_effort", "top_k", "chat_template_kwargs",
                                 "parallel_tool_calls")} == {
        "temperature": 0.2, "top_p": 0.8, "seed": 3, "max_tokens": 300,
        "reasoning_effort": "high", "top_k": 20,
        "chat_template_kwargs": {"enable_thinking": True}, "parallel_tool_calls": False}
    assert "custom_flag" not in sent
    [warning] = warnings
    assert warning.details["options"] == ["custom_flag"]


async def test_passthrough_sends_a_vendor_field_nonoka_does_not_know(
        store: SQLiteCheckpointStore) -> None:
    options = CallOptions(extra={"passthrough": ["custom_flag"], "custom_flag": "on",
                                 "model": "not-this"})
    with ScriptedOpenAIServer(["ok"]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key=KEY, max_retries=0)
        result, warnings = await _run(store, model, options)
    assert result.success, result.error
    sent = server.requests[0]
    assert (sent["custom_flag"], sent["model"]) == ("on", "m")
    assert "passthrough" not in sent
    assert warnings[0].details["options"] == ["model"]  # the adapter's own field


def test_openai_itself_is_sent_only_its_own_fields() -> None:
    """api.openai.com refuses ``top_k`` and other servers' extensions: the body holds only
    what the ``openai`` SDK's ``CompletionCreateParams`` has."""
    model = OpenAIChatModel("gpt-4o", base_url="https://api.openai.com/v1", api_key=KEY)
    options = CallOptions(temperature=0.5, extra={"top_k": 20, "parallelToolCalls": True})
    sent = json.loads(model.request_body([Message(role="user", content="hi")], (), options))
    assert (sent["temperature"], sent["parallel_tool_calls"]) == (0.5, True)
    assert "top_k" not in sent
    assert set(sent) - {"messages", "model", "stream", "stream_options"} <= set(
        chat_params.CompletionCreateParamsBase.__annotations__)


# the Responses API -------------------------------------------------------------------------


async def test_the_responses_api_gets_settings_in_its_own_shape(
        store: SQLiteCheckpointStore) -> None:
    """``verbosity`` (as a host names it) is ``text.verbosity``, ``reasoningSummary`` is
    ``reasoning.summary``; ``stop`` and ``seed`` have no field and are said; an unknown
    option, which the API (and the scripted server) refuses, is not sent."""
    options = CallOptions(temperature=0.4, top_p=0.9, max_tokens=500, stop=["X"], seed=1,
                          reasoning_effort="low", extra={
                              "verbosity": "low", "reasoningSummary": "detailed",
                              "parallelToolCalls": False, "custom": 1})
    with ScriptedResponsesServer([ResponsesReply(output=("ok",))]) as server:
        model = OpenAIResponsesModel("gpt-5", base_url=server.base_url, api_key=KEY,
                                     max_retries=0)
        result, warnings = await _run(store, model, options)
    assert result.success, result.error
    assert server.rejections == []
    sent = server.requests[0]
    assert {k: sent[k] for k in ("temperature", "top_p", "max_output_tokens", "reasoning",
                                 "text", "parallel_tool_calls")} == {
        "temperature": 0.4, "top_p": 0.9, "max_output_tokens": 500,
        "reasoning": {"effort": "low", "summary": "detailed"}, "text": {"verbosity": "low"},
        "parallel_tool_calls": False}
    assert not {"stop", "seed", "custom", "verbosity"} & set(sent)
    [warning] = warnings
    assert warning.details["options"] == ["custom", "seed", "stop"]


# the field lists are the SDKs' -------------------------------------------------------------


def test_the_known_fields_are_the_official_sdks() -> None:
    anthropic_base = set(anthropic_params.MessageCreateParamsBase.__annotations__)
    anthropic_all = anthropic_base | set(anthropic_beta.MessageCreateParamsBase.__annotations__)
    assert ANTHROPIC_FIELDS - {"top_k", "effort"} <= anthropic_all  # (effort: output_config's)
    assert BODY_FIELDS - {"temperature", "top_p", "top_k", "stream"} <= anthropic_all
    chat = set(chat_params.CompletionCreateParamsBase.__annotations__)
    assert chat >= OPENAI_FIELDS
    assert not COMPATIBLE_FIELDS & chat  # the extensions are other servers' own
    responses = set(responses_params.ResponseCreateParamsBase.__annotations__)
    assert responses >= RESPONSES_FIELDS
    assert responses | {"stream"} >= REQUEST_FIELDS


def test_history_is_untouched_by_options() -> None:
    """Options change fields, never the conversation: same messages, same bytes."""
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    messages = [Message(role="user", content="hi")]
    plain = model.request_body(messages, (), CallOptions(extra={"custom": 1}))
    assert plain == model.request_body(messages, (), CallOptions())
