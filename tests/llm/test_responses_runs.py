"""Runs through the ``Runner`` (and the ``nonoka run`` command) with ``openai-responses:``,
against ScriptedResponsesServer in its strict mode: encrypted reasoning kept in the
session and sent back through a multi-step tool loop, across processes; files in;
cached and reasoning tokens in the ledger at the catalog's rates; provider errors as
given."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonoka import Agent, Message, Runner, tool
from nonoka.llm import resolve_model
from nonoka.llm.base import ChatModel
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.state.messages import FilePart, TextPart, ToolCall
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing.server import (
    ReasoningItem,
    ResponsesReply,
    ScriptedResponsesServer,
    Step,
    context_length_exceeded,
    insufficient_quota,
)
from tests.support.responses_api import assert_valid_request

SRC = Path(__file__).resolve().parents[2] / "src"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(64))).decode()
PDF = base64.b64encode(b"%PDF-1.7\n1 0 obj <<>> endobj\n").decode()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    yield store
    await store.close()


def _server(script: list[Step]) -> ScriptedResponsesServer:
    return ScriptedResponsesServer(script, strict=["openai_reasoning"]).start()


def _model(server: ScriptedResponsesServer, spec: str = "openai-responses:gpt-5"
           ) -> ChatModel:
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["OPENAI_API_KEY"] = "sk-test"
    try:
        return resolve_model(spec)
    finally:
        del os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]


@tool(idempotent=True)
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


def _call(city: str, id: str) -> ToolCall:
    return ToolCall(id=id, name="lookup", arguments=json.dumps({"city": city}))


LOOP: list[Step] = [
    ResponsesReply(output=(ReasoningItem(("Oslo first.",)), _call("Oslo", "c1"))),
    ResponsesReply(output=(ReasoningItem(()), "Now Rome.", _call("Rome", "c2"))),
    ResponsesReply(output=(ReasoningItem(("Both known.",)), "Sunny in both.")),
]


async def test_encrypted_reasoning_goes_back_through_a_tool_loop(
        store: SQLiteCheckpointStore) -> None:
    server = _server(list(LOOP))
    try:
        agent = Agent(model=_model(server), tools=[lookup], system_prompt="Be brief.")
        result = await Runner(store).run_react(agent, "Weather in Oslo, then Rome?")
        server.assert_done()
    finally:
        server.close()
    assert result.success, result.error
    assert result.output == "Sunny in both."
    assert server.rejections == []
    for body in server.requests:
        assert_valid_request(body)
    third = server.requests[2]["input"]
    assert [i.get("role", i["type"]) for i in third] == [
        "system", "user", "reasoning", "function_call", "function_call_output",
        "reasoning", "assistant", "function_call", "function_call_output"]
    assert all(i["encrypted_content"].startswith("gAAAAA") for i in third
               if i["type"] == "reasoning")
    state = await store.load_session(result.session_id)
    assert state is not None
    assistant = state.memory_entries[2]
    [part] = assistant.reasoning
    assert part.text == "Oslo first."
    assert (part.provider_metadata or {})["openai_responses"] == third[2]


async def test_a_session_resumed_in_a_new_runner_sends_the_same_reasoning(
        store: SQLiteCheckpointStore, tmp_path: Path) -> None:
    """What a later process sends comes from the stored session alone."""
    server = _server([LOOP[0], "Sunny.", ResponsesReply(output=(
        ReasoningItem(("Again.",)), _call("Oslo", "c3"))), "Still sunny."])
    try:
        agent = Agent(model=_model(server), tools=[lookup])
        first = await Runner(store).run_react(agent, "Oslo?")
        reopened = SQLiteCheckpointStore(tmp_path / "s.db")
        try:
            again = Agent(model=_model(server), tools=[lookup])
            second = await Runner(reopened).run_react(again, "And now?",
                                                      session_id=first.session_id)
        finally:
            await reopened.close()
        server.assert_done()
    finally:
        server.close()
    assert second.success, second.error
    assert server.rejections == []
    history = server.requests[1]["input"]
    assert server.requests[2]["input"][:len(history)] == history  # stable bytes
    assert json.dumps(server.requests[3]["input"][:len(history)]) == json.dumps(history)


async def test_a_model_that_dropped_the_reasoning_would_be_refused(
        store: SQLiteCheckpointStore) -> None:
    """The strict mode can fail: a client that keeps no reasoning gets OpenAI's 400."""

    class Forgetful(OpenAIResponsesModel):
        async def complete_with(self, messages: Any, tools: Any = (), **kwargs: Any) -> Any:
            plain = [m.model_copy(update={"reasoning": None}) for m in messages]
            return await super().complete_with(plain, tools, **kwargs)

    server = _server([LOOP[0], "unused"])
    try:
        model = Forgetful("gpt-5", base_url=server.base_url, api_key="sk-test", max_retries=0)
        result = await Runner(store).run_react(Agent(model=model, tools=[lookup]), "Oslo?")
    finally:
        server.close()
    assert not result.success and result.failure is not None
    assert server.rejections == [1]
    provider = result.failure.provider_error()
    assert provider is not None and provider["status"] == 400
    assert "without its required 'reasoning' item" in json.loads(provider["body"])[
        "error"]["message"]


async def test_images_and_a_pdf_reach_the_model_and_the_store(
        store: SQLiteCheckpointStore) -> None:
    @tool(idempotent=True)
    def screenshot() -> str:
        """Take a screenshot."""
        return "taken"

    server = _server([ResponsesReply(output=(ToolCall(id="s1", name="screenshot"),)),
                      "A red square and a paper."])
    prompt = Message(role="user", content="What are these?", parts=[
        TextPart(text="What are these?"), FilePart(media_type="image/png", data=PNG),
        FilePart(media_type="application/pdf", data=PDF, filename="paper.pdf")])
    try:
        agent = Agent(model=_model(server), tools=[screenshot])
        result = await Runner(store).run_react(agent, prompt)
    finally:
        server.close()
    assert result.success, result.error
    for body in server.requests:
        assert_valid_request(body)
    user = server.requests[0]["input"][0]
    assert user["content"] == [
        {"type": "input_text", "text": "What are these?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        {"type": "input_file", "filename": "paper.pdf",
         "file_data": f"data:application/pdf;base64,{PDF}"}]
    state = await store.load_session(result.session_id)
    assert state is not None
    assert state.memory_entries[0].parts == prompt.parts


async def test_cached_and_reasoning_tokens_reach_the_ledger_at_the_cache_rate(
        store: SQLiteCheckpointStore) -> None:
    from nonoka.llm.catalog import known_model

    known = known_model("openai-responses:gpt-5")
    assert known is not None
    prices, read = known.prices, known.prices.cache_read
    assert read is not None and read < prices.input
    server = _server([ResponsesReply(output=(ReasoningItem(()), "ok"), input_tokens=10_000,
                                     output_tokens=200, cached_tokens=8_000,
                                     reasoning_tokens=150)])
    try:
        result = await Runner(store).run_react(Agent(model=_model(server)), "hi")
    finally:
        server.close()
    usage = result.usage
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (8_000, 150)
    expected = (2_000 * prices.input + 8_000 * read + 200 * prices.output) / 1e6
    assert usage.cost_usd == pytest.approx(expected)


@pytest.mark.parametrize(("step", "status", "code"), [
    (context_length_exceeded(), 400, "context_length_exceeded"),
    (insufficient_quota(), 429, "insufficient_quota")])
async def test_a_provider_error_reaches_the_caller_as_the_provider_gave_it(
        store: SQLiteCheckpointStore, step: Step, status: int, code: str) -> None:
    server = _server([step])
    try:
        result = await Runner(store).run_react(Agent(model=_model(server)), "hi")
    finally:
        server.close()
    assert not result.success and result.failure is not None
    provider = result.failure.provider_error()
    assert provider is not None and provider["status"] == status
    assert json.loads(provider["body"])["error"]["code"] == code
    assert len(server.requests) == 1


def test_nonoka_run_with_the_responses_model(tmp_path: Path) -> None:
    steps: list[Step] = [
        ResponsesReply(output=(ReasoningItem(("List first.",)),
                               ToolCall(id="l1", name="list_dir", arguments='{"path": "."}'))),
        ResponsesReply(output=(ReasoningItem(()), "There is a notes file."),
                       input_tokens=40, output_tokens=7)]
    (tmp_path / "notes.txt").write_text("hello\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "NONOKA_MODEL": "openai:unused",
           "OPENAI_API_KEY": "sk-test"}
    for name in ("NONOKA_DATABASE_URL", "FORCE_COLOR", "NO_COLOR"):
        env.pop(name, None)
    with ScriptedResponsesServer(steps, strict=["openai_reasoning"]) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        done = subprocess.run(
            [sys.executable, "-m", "nonoka", "run", "--model", "openai-responses:gpt-5",
             "what is here?"], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=120, check=False)
        server.assert_done()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "There is a notes file.\n"
    assert server.rejections == []
    for body in server.requests:
        assert_valid_request(body)
    first, second = server.requests
    assert first["model"] == "gpt-5" and first["store"] is False
    assert first["reasoning"] == {"summary": "auto"}  # the catalog says gpt-5 reasons
    assert {t["name"] for t in first["tools"]} == {"read_file", "list_dir", "search_text"}
    assert [i["type"] for i in second["input"][-3:]] == ["reasoning", "function_call",
                                                         "function_call_output"]
    assert "50 in / 12 out tokens" in done.stderr  # both calls (10 + 40 in, 5 + 7 out)
