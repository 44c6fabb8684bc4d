"""Usage an endpoint reports is checked at the adapter boundary: counts of 2**63, NaN,
Infinity, negative or fractional counts never poison a session. The answer is kept and
stored, what could not be counted is counted as 0 (a fraction rounded down), and a
``model_usage_invalid`` warning says so. Every adapter, against its scripted server
(real HTTP), through the ``Runner`` and a real SQLite store; ``nonoka run`` as a real
process for the count that broke the session list."""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from nonoka import Agent, Runner
from nonoka.events import RunEvent, RunWarning
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.base import USAGE_INVALID, ChatModel
from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing.server import (
    AnthropicReply,
    Reply,
    ResponsesReply,
    ScriptedAnthropicServer,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from tests.support.processes import model_env, run_nonoka

HUGE = 2**63
BROKEN = [HUGE, math.nan, math.inf, -math.inf, -5, "12", True]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    yield store
    await store.close()


Served = tuple[Any, Callable[[Any], ChatModel]]


def _openai(value: object) -> Served:
    server = ScriptedOpenAIServer([Reply(text="The answer.", raw_usage={
        "prompt_tokens": value, "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": value}})])
    return server, lambda s: OpenAIChatModel("m", base_url=s.base_url, api_key="sk-test",
                                             max_retries=0)


def _anthropic(value: object) -> Served:
    server = ScriptedAnthropicServer([AnthropicReply(text="The answer.", raw_usage={
        "input_tokens": value, "output_tokens": 7, "cache_read_input_tokens": value})])
    return server, lambda s: AnthropicChatModel("claude-test", base_url=s.base_url,
                                                api_key="sk-test", max_retries=0)


def _responses(value: object) -> Served:
    server = ScriptedResponsesServer([ResponsesReply(output=("The answer.",), raw_usage={
        "input_tokens": value, "output_tokens": 7,
        "input_tokens_details": {"cached_tokens": value, "cache_write_tokens": 0}})])
    return server, lambda s: OpenAIResponsesModel("m", base_url=s.base_url, api_key="sk-test",
                                                  max_retries=0)


@pytest.mark.parametrize("value", BROKEN, ids=repr)
@pytest.mark.parametrize("served", [_openai, _anthropic, _responses],
                         ids=["openai", "anthropic", "responses"])
async def test_broken_usage_keeps_the_answer_and_warns(
        store: SQLiteCheckpointStore, served: Callable[[object], Served], value: object) -> None:
    server, make = served(value)
    events: list[RunEvent] = []
    with server:
        result = await Runner(store).run_react(Agent(model=make(server)), "Question?",
                                               on_event=events.append)
    assert result.success, result.error
    assert result.output == "The answer."
    # what could not be a count is 0; the valid counts are kept
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (0, 0)
    assert result.usage.output_tokens == 7
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert [w.code for w in warnings] == [USAGE_INVALID]
    assert "counted as 0" in warnings[0].message
    state = await store.load_session(result.session_id)
    assert state is not None
    assert state.memory_entries[-1].content == "The answer."
    assert state.runtime_state.usage.input_tokens == 0


async def test_a_fractional_count_is_rounded_down_and_said(
        store: SQLiteCheckpointStore) -> None:
    events: list[RunEvent] = []
    with ScriptedOpenAIServer([Reply(text="ok", raw_usage={"prompt_tokens": 12.7,
                                                           "completion_tokens": 3.0})]) as s:
        model = OpenAIChatModel("m", base_url=s.base_url, api_key="sk-test", max_retries=0)
        result = await Runner(store).run_react(Agent(model=model), "hi", on_event=events.append)
    assert result.success, result.error
    assert (result.usage.input_tokens, result.usage.output_tokens) == (12, 3)
    [warning] = [e for e in events if isinstance(e, RunWarning)]
    assert warning.details["fields"] == ["prompt_tokens"]
    assert "rounded down" in warning.message


async def test_a_reported_cost_that_is_not_a_cost_is_ignored(
        store: SQLiteCheckpointStore) -> None:
    with ScriptedOpenAIServer([Reply(text="ok", raw_usage={"cost": math.nan})]) as s:
        model = OpenAIChatModel("m", base_url=s.base_url, api_key="sk-test", max_retries=0,
                                input_price_per_mtok=1.0, output_price_per_mtok=1.0)
        result = await Runner(store).run_react(Agent(model=model), "hi")
    assert result.success, result.error
    assert result.usage.cost_usd == (10 + 5) / 1e6  # the configured prices, not NaN


async def test_valid_usage_gives_no_warning(store: SQLiteCheckpointStore) -> None:
    events: list[RunEvent] = []
    with ScriptedOpenAIServer([Reply(text="ok", input_tokens=11, output_tokens=4)]) as s:
        model = OpenAIChatModel("m", base_url=s.base_url, api_key="sk-test", max_retries=0)
        result = await Runner(store).run_react(Agent(model=model), "hi", on_event=events.append)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (11, 4)
    assert not [e for e in events if isinstance(e, RunWarning)]


def test_a_count_of_two_to_the_63_does_not_break_the_session_list(tmp_path: Path) -> None:
    """``nonoka run`` stores the answer and lists the session with its turns: the count
    never reaches the session list's row (an ``OverflowError`` on SQLite before)."""
    replies = [Reply(text="First.", raw_usage={"prompt_tokens": HUGE}),
               Reply(text="Second.", raw_usage={"prompt_tokens": -3, "completion_tokens": 2})]
    with ScriptedOpenAIServer(replies) as server:
        env = {**os.environ, **model_env(server.base_url)}
        env.pop("NONOKA_DATABASE_URL", None)
        first = run_nonoka(tmp_path, "run", "hello", env=env)
        second = run_nonoka(tmp_path, "run", "-c", "again", env=env)
        listed = run_nonoka(tmp_path, "sessions", "list", "--json", env=env)
    for ran in (first, second, listed):
        assert ran.returncode == 0, ran.stderr
        assert "Traceback" not in ran.stderr
    assert "First." in first.stdout and "Second." in second.stdout
    assert "usage that is not a token count" in first.stderr + first.stdout
    [row] = json.loads(listed.stdout)
    assert (row["turn_count"], row["input_tokens"], row["output_tokens"]) == (2, 0, 7)
    shown = run_nonoka(tmp_path, "sessions", "show", "--json", row["session_id"], env=env)
    assert shown.returncode == 0, shown.stderr
    usage = json.loads(shown.stdout)["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (0, 7)  # 0 + 0, 5 + 2
