"""``anthropic:`` sessions end to end: the ``Runner`` and the real adapter against a
ScriptedAnthropicServer in its strict mode — a multi-step tool loop with thinking, images
in tool results, PDFs in a prompt, the prompt cache step after step — and ``nonoka run
--model anthropic:...`` as a real process."""

from __future__ import annotations

import base64
import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonoka import Agent, Message, Runner, ToolResult, host_tool, tool
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.catalog import known_model
from nonoka.state.messages import FilePart, TextPart, ToolCall
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing.server import (
    AnthropicReply,
    ScriptedAnthropicServer,
    Thinking,
    anthropic_overloaded,
)
from tests.support.processes import run_nonoka

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(48))).decode()
PDF = base64.b64encode(b"%PDF-1.7 a small report").decode()
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    yield store
    await store.close()


def _model(server: ScriptedAnthropicServer, **kwargs: Any) -> AnthropicChatModel:
    return AnthropicChatModel("claude-test", base_url=server.base_url, api_key="sk-ant-test",
                              max_retries=1, backoff_base=0.01, **kwargs)


@tool(idempotent=True)
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


def _call(call_id: str, city: str) -> ToolCall:
    return ToolCall(id=call_id, name="lookup", arguments=json.dumps({"city": city}))


async def test_a_tool_loop_with_thinking_passes_the_strict_mode(
        store: SQLiteCheckpointStore) -> None:
    """Three steps, each thinking before its call (one redacted): every assistant turn
    goes back with its thinking, unmodified and first, and the session stores it."""
    script: list[Any] = [
        AnthropicReply(thinking=(Thinking("Lyon first."),), tool_calls=(_call("toolu_1", "Lyon"),)),
        AnthropicReply(text="Now Oslo.", thinking=(Thinking(redacted_data="UkVEQUNURUQ="),
                                                  Thinking("Then Oslo.")),
                       tool_calls=(_call("toolu_2", "Oslo"),)),
        anthropic_overloaded(),  # retried: nothing was streamed yet
        AnthropicReply(thinking=(Thinking("And Rome."),), tool_calls=(_call("toolu_3", "Rome"),)),
        AnthropicReply(text="Sunny everywhere.", thinking=(Thinking("All sunny."),)),
    ]
    with ScriptedAnthropicServer(script, strict=["anthropic_thinking"],
                                 min_cache_tokens=0) as server:
        agent = Agent(model=_model(server), tools=[lookup], system_prompt="Be brief.")
        result = await Runner(store).run_react(agent, "Weather in Lyon, Oslo and Rome?")
        server.assert_done()
    assert result.success, result.error
    assert result.output == "Sunny everywhere."
    assert server.rejections == []
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user",
                                         "assistant", "user"]
    assert [b["type"] for b in last[3]["content"]] == [
        "redacted_thinking", "thinking", "text", "tool_use"]
    assert last[3]["content"][1]["thinking"] == "Then Oslo."
    state = await store.load_session(result.session_id)
    assert state is not None
    stored = [e for e in state.memory_entries if e.role == "assistant"]
    assert [len(e.reasoning) for e in stored] == [1, 2, 1, 1]
    assert stored[1].reasoning[0].provider_metadata == {"anthropic": {"data": "UkVEQUNURUQ="}}
    assert result.usage.reasoning_tokens > 0


async def test_the_strict_mode_refuses_a_loop_that_lost_its_thinking(
        store: SQLiteCheckpointStore) -> None:
    """The check can fail: a model that drops thinking (here, a wrapper that strips it
    from the stored answer) is refused with Anthropic's 400."""

    class Forgetful(AnthropicChatModel):
        async def complete_with(self, *args: Any, **kwargs: Any) -> Any:
            response = await super().complete_with(*args, **kwargs)
            from dataclasses import replace

            return replace(response, reasoning=[])

    script = [AnthropicReply(thinking=(Thinking("look"),), tool_calls=(_call("toolu_1", "Lyon"),)),
              AnthropicReply(text="unused")]
    with ScriptedAnthropicServer(script, strict=["anthropic_thinking"]) as server:
        agent = Agent(model=Forgetful("claude-test", base_url=server.base_url,
                                      api_key="sk-ant-test",
                                      max_retries=0), tools=[lookup])
        result = await Runner(store).run_react(agent, "Weather?")
    assert not result.success and server.rejections == [1]
    assert result.failure is not None
    provider = result.failure.provider_error()
    assert provider is not None and provider["status"] == 400
    body = json.loads(provider["body"])
    assert body["error"]["type"] == "invalid_request_error"
    assert "must start with a thinking block" in body["error"]["message"]


async def test_an_image_from_a_host_tool_goes_back_inside_its_tool_result(
        store: SQLiteCheckpointStore) -> None:
    read = host_tool("read", "read a file", {"type": "object"})
    script = [AnthropicReply(tool_calls=(ToolCall(id="toolu_r", name="read",
                                                  arguments='{"path": "a.png"}'),)),
              AnthropicReply(text="A chart.")]
    with ScriptedAnthropicServer(script, strict=["anthropic_thinking"]) as server:
        agent = Agent(model=_model(server), tools=[read])
        runner = Runner(store)
        paused = await runner.run_react(agent, "Read a.png")
        assert paused.paused
        result = await runner.submit_tool_results(agent, paused.session_id, [ToolResult(
            tool_call_id="toolu_r", content="a.png", parts=[
                TextPart(text="a.png"), FilePart(media_type="image/png", data=PNG)])])
    assert result.success, result.error
    sent = server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[2]["content"] == [{
        "type": "tool_result", "tool_use_id": "toolu_r", "content": [
            {"type": "text", "text": "a.png"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}}],
        "cache_control": {"type": "ephemeral"}}]


async def test_a_pdf_in_the_prompt_is_a_document(store: SQLiteCheckpointStore) -> None:
    prompt = Message(role="user", content="Summarise.", parts=[
        FilePart(media_type="application/pdf", data=PDF, filename="report.pdf"),
        TextPart(text="Summarise.")])
    with ScriptedAnthropicServer(["A short report."]) as server:
        result = await Runner(store).run_react(Agent(model=_model(server)), prompt)
    assert result.success, result.error
    assert server.requests[0]["messages"][0]["content"] == [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": PDF}, "title": "report.pdf"},
        {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}}]


async def test_each_step_reads_the_prefix_from_the_cache(store: SQLiteCheckpointStore) -> None:
    """A long system prompt and a tool loop: from the second step on, everything the
    step before sent is read from the cache, and the ledger pays the read rate."""
    known = known_model("anthropic:claude-sonnet-4-5")
    assert known is not None
    steps = 6
    script: list[Any] = [AnthropicReply(tool_calls=(_call(f"toolu_{i}", f"city {i}"),))
                         for i in range(steps - 1)]
    script.append(AnthropicReply(text="Done."))
    system = "You answer weather questions. " * 400  # ~3,000 tokens
    with ScriptedAnthropicServer(script) as server:
        agent = Agent(model=_model(server, known=known), tools=[lookup], system_prompt=system)
        result = await Runner(store).run_react(agent, "Weather everywhere?")
    assert result.success, result.error
    usages = server.usages
    assert usages[0]["cache_read_input_tokens"] == 0
    assert usages[0]["cache_creation_input_tokens"] > 3000
    for before, now in itertools.pairwise(usages):
        previous_prompt = (before["input_tokens"] + before["cache_read_input_tokens"]
                           + before["cache_creation_input_tokens"])
        assert now["cache_read_input_tokens"] == previous_prompt
        assert now["input_tokens"] == 0  # everything new is written for the next step
    usage = result.usage
    assert usage.cache_read_tokens == sum(u["cache_read_input_tokens"] for u in usages)
    assert usage.cache_write_tokens == sum(u["cache_creation_input_tokens"] for u in usages)
    uncached = sum((u["input_tokens"] + u["cache_read_input_tokens"]
                    + u["cache_creation_input_tokens"]) * known.prices.input
                   + u["output_tokens"] * known.prices.output for u in usages) / 1e6
    assert usage.cost_usd is not None and usage.cost_usd < 0.5 * uncached


def test_nonoka_run_with_an_anthropic_model(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "NONOKA_"))}
    env["PYTHONPATH"] = SRC
    script = [AnthropicReply(thinking=(Thinking("List the files."),), tool_calls=(
        ToolCall(id="toolu_l", name="list_dir", arguments='{"path": "."}'),)),
        AnthropicReply(text="There is notes.txt.")]
    with ScriptedAnthropicServer(script, strict=["anthropic_thinking"]) as server:
        done = run_nonoka(tmp_path, "run", "--model", "anthropic:claude-haiku-4-5",
                          "what is here?", env={**env, "ANTHROPIC_BASE_URL": server.base_url,
                                                "ANTHROPIC_API_KEY": "sk-ant-run"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "There is notes.txt."
    assert server.rejections == [] and len(server.requests) == 2
    assert server.requests[0]["model"] == "claude-haiku-4-5"
    assert server.requests[0]["max_tokens"] == 64_000
    assert server.headers[0]["x-api-key"] == "sk-ant-run"
    tools = {t["name"] for t in server.requests[0]["tools"]}
    assert tools == {"read_file", "list_dir", "search_text"}
    missing = run_nonoka(tmp_path, "run", "--model", "anthropic:claude-haiku-4-5", "hi",
                         env=env)
    assert missing.returncode != 0
    assert "ANTHROPIC_API_KEY" in missing.stderr and "ANTHROPIC_BASE_URL" in missing.stderr


async def test_bridge_turns_keep_the_thinking_the_host_never_saw(tmp_path: Path) -> None:
    """A host (the Python provider, as OpenCode does) runs each step in a new ``nonoka
    bridge`` and resends a history without the thinking: the stored session still sends
    it back before the tool call, so the strict mode accepts the loop."""
    from nonoka.provider import NonokaProvider

    script = [AnthropicReply(thinking=(Thinking("I will write it."),), tool_calls=(
        ToolCall(id="toolu_w", name="write", arguments='{"path": "n.txt"}'),)),
        AnthropicReply(text="Saved.", thinking=(Thinking("Done."),))]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "NONOKA_"))}
    tools: list[Any] = [{"name": "write", "description": "Write a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}]
    with ScriptedAnthropicServer(script, strict=["anthropic_thinking"]) as server:
        provider = NonokaProvider(tmp_path, timeout=60, env={
            **env, "PYTHONPATH": SRC, "NONOKA_MODEL": "anthropic:claude-haiku-4-5",
            "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-bridge"})
        history: list[Any] = [{"role": "user", "content": "Save a note."}]
        paused = await provider.chat(history, tools)
        assert paused.finish_reason == "tool_calls", paused.errors
        history += [paused.assistant_message().model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": "toolu_w", "content": "written"}]
        done = await provider.chat(history, tools)
    assert done.finish_reason == "stop" and done.text == "Saved.", done.errors
    assert server.rejections == []
    assistant = server.requests[1]["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "tool_use"]
    assert assistant[0]["thinking"] == "I will write it."
