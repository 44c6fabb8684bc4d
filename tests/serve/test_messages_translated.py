"""The Anthropic Messages API on ``nonoka serve`` whose model is ``openai:``: the
official ``anthropic`` client against the strict scripted OpenAI endpoint. What
reaches the endpoint is held to the ``openai`` package's request types; what comes
back, streamed or whole, to the ``anthropic`` package's types. A tool loop whose
result carries an image, a PDF, a stop sequence, ``max_tokens``, tool choice,
thinking both ways, errors, and the session the exchange leaves."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from anthropic.types import Message as AnthropicMessage
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter

from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing import call, text
from nonoka.testing.replies import Reply
from nonoka.testing.server import ScriptedOpenAIServer
from nonoka.testing.steps import HttpError, context_length_exceeded
from tests.serve.harness import Served, served_with, sse
from tests.support.processes import run_nonoka

MODEL = "openai:scripted-model"
UPSTREAM_KEY = "sk-upstream-key-that-never-leaves-0123456789"
WEATHER: Any = {"name": "get_weather", "description": "The weather",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%scripted\n").decode()
_BODY: TypeAdapter[Any] = TypeAdapter(completion_create_params.CompletionCreateParamsStreaming)
_FIELDS = set(completion_create_params.CompletionCreateParamsStreaming.__annotations__)
_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def valid_request(body: dict[str, Any]) -> dict[str, Any]:
    """``body``, a Chat Completions request as the ``openai`` package types it: no field
    it does not know (an Anthropic field leaking through would be one)."""
    assert set(body) <= _FIELDS, set(body) - _FIELDS
    _BODY.validate_python(body, strict=False)
    return body


@pytest.fixture
def script() -> list[Any]:
    return []


@pytest.fixture
def upstream(script: list[Any]) -> Iterator[ScriptedOpenAIServer]:
    def next_step(body: dict[str, Any]) -> Any:
        assert script, "the endpoint was called more often than scripted"
        return script.pop(0)

    # reasoning_back: a tool-calling answer's reasoning must come back in its field
    with ScriptedOpenAIServer(next_step, strict=("reasoning_back",)) as running:
        yield running
    assert not running.failures, running.failures
    for body in running.requests:
        valid_request(body)


@pytest.fixture
def served(project: Path, upstream: ScriptedOpenAIServer,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    env = {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
           "NONOKA_DATABASE_URL": ""}
    with served_with(project, MODEL, env, monkeypatch) as running:
        yield running


@pytest.fixture
def claude(served: Served) -> Iterator[Anthropic]:
    with Anthropic(base_url=served.url.removesuffix("/v1"), api_key="client-key",
                   max_retries=0) as opened:
        yield opened


def records(project: Path) -> list[SessionRecord]:
    async def read() -> list[SessionRecord]:
        async with open_project_stores(project) as stores:
            return await stores.index.list_sessions(limit=100)
    return asyncio.run(read())


def blocks(message: AnthropicMessage) -> list[dict[str, Any]]:
    """A message's content as the client sends it back."""
    return [b.model_dump(exclude_none=True) for b in message.content]


def test_a_tool_loop_in_three_steps(claude: Anthropic, script: list[Any],
                                    upstream: ScriptedOpenAIServer, project: Path) -> None:
    script += [Reply.of(call("get_weather", {"city": "Paris"}, id="call_1"),
                        reasoning="The user wants weather. "),
               Reply.of(call("get_weather", {"city": "Oslo"}, id="call_2")),
               Reply(text="Paris is sunny; Oslo is unknown.", input_tokens=40,
                     output_tokens=9, cached_tokens=16)]
    history: list[Any] = [{"role": "user", "content": "Weather in Paris, then Oslo?"}]
    ask: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 512,
                           "system": "Use the tools.", "tools": [WEATHER],
                           "tool_choice": {"type": "auto"}}
    with claude.messages.stream(messages=history, **ask) as stream:
        seen = [event.type for event in stream]
        first = stream.get_final_message()
    assert seen[0] == "message_start" and seen[-1] == "message_stop"
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    thought = first.content[0]
    assert thought.type == "thinking" and thought.thinking == "The user wants weather. "
    assert thought.signature == ""  # not Anthropic's: nothing to verify it by
    used = first.content[1]
    assert used.type == "tool_use" and used.id == "call_1" and used.input == {"city": "Paris"}
    assert first.stop_reason == "tool_use"

    # the result carries an image: it follows the tool message as a user message
    history += [{"role": "assistant", "content": blocks(first)},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                              "content": [
                    {"type": "text", "text": "Sunny, 24 C"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": PNG}}]}]}]
    with claude.messages.stream(messages=history, **ask) as stream:
        second = stream.get_final_message()
    assert [b.type for b in second.content] == ["tool_use"]
    sent = upstream.requests[1]
    assert sent["tool_choice"] == "auto"
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool",
                                                     "user"]
    said = sent["messages"][2]
    assert said["tool_calls"][0]["id"] == "call_1"
    assert said["reasoning_content"] == "The user wants weather. "  # from the store
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_1",
                                   "content": "Sunny, 24 C"}
    image = sent["messages"][4]["content"][1]
    assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}

    # a failed tool: is_error has no place in Chat Completions; the text goes
    history += [{"role": "assistant", "content": blocks(second)},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_2",
                                              "is_error": True,
                                              "content": "Error: no station in Oslo"}]}]
    final = claude.messages.create(messages=history, **ask)
    AnthropicMessage.model_validate(final.model_dump())
    assert final.content[0].type == "text"
    assert final.content[0].text == "Paris is sunny; Oslo is unknown."
    assert final.stop_reason == "end_turn" and final.stop_sequence is None
    assert final.usage.input_tokens == 24 and final.usage.cache_read_input_tokens == 16
    assert final.usage.output_tokens == 9
    last = upstream.requests[2]["messages"]
    assert last[-1] == {"role": "tool", "tool_call_id": "call_2",
                        "content": "Error: no station in Oslo"}
    assert len(upstream.requests) == 3 and not upstream.rejections

    # one session line holds the loop, shown by the CLI
    env = {**os.environ, "NONOKA_DATABASE_URL": ""}
    listed = run_nonoka(project, "sessions", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    sessions = json.loads(listed.stdout)
    chats = [s for s in sessions if s.get("purpose", "chat") == "chat"]
    assert len(chats) == 1, sessions
    shown = run_nonoka(project, "sessions", "show", chats[0]["session_id"], "--json",
                       "--entries", env=env)
    assert shown.returncode == 0, shown.stderr
    entries = json.loads(shown.stdout)["entries"]
    assert [e["role"] for e in entries] == ["system", "user", "assistant", "tool",
                                            "assistant", "tool", "assistant"]
    assert entries[-1]["text"] == "Paris is sunny; Oslo is unknown."
    assert chats[0]["model"] == MODEL


def test_a_pdf_a_stop_sequence_and_max_tokens(claude: Anthropic, script: list[Any],
                                              upstream: ScriptedOpenAIServer) -> None:
    script += [text("The PDF says scripted"),
               Reply(text="A long", finish_reason="length", output_tokens=2)]
    history: list[Any] = [{"role": "user", "content": [
        {"type": "document", "title": "report.pdf",
         "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
        {"type": "text", "text": "What does it say? Stop at END."}]}]
    stopped = claude.messages.create(model="claude-x", max_tokens=64, messages=history,
                                     stop_sequences=["END"], metadata={"user_id": "someone"},
                                     thinking={"type": "enabled", "budget_tokens": 1024},
                                     extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 5})
    # Chat Completions does not say which stop ended an answer: end_turn
    assert stopped.stop_reason == "end_turn" and stopped.stop_sequence is None
    sent = upstream.requests[0]
    assert sent["stop"] == ["END"] and sent["max_tokens"] == 64
    assert sent["temperature"] == 0.2 and sent["top_p"] == 0.9
    for anthropic_only in ("top_k", "metadata", "thinking", "stop_sequences"):
        assert anthropic_only not in sent
    document = sent["messages"][0]["content"][0]
    assert document == {"type": "file", "file": {
        "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}}

    history += [{"role": "assistant", "content": blocks(stopped)},
                {"role": "user", "content": "Go on, at length."}]
    with claude.messages.stream(model="claude-x", max_tokens=2, messages=history) as stream:
        cut = stream.get_final_message()
    # the answer's usage tells it: its output reached max_tokens
    assert cut.stop_reason == "max_tokens" and cut.content[0].type == "text"
    assert cut.usage.output_tokens == 2
    assert upstream.requests[1]["max_tokens"] == 2


def test_tool_choice_and_anthropic_thinking(claude: Anthropic, script: list[Any],
                                            upstream: ScriptedOpenAIServer) -> None:
    script += [Reply.of(call("get_weather", {"city": "Rome"}, id="call_9")),
               text("Done.")]
    history: list[Any] = [
        {"role": "user", "content": "Earlier question"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Claude thought this.", "signature": "sig-abc"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Earlier answer"}]},
        {"role": "user", "content": "Weather in Rome?"}]
    forced = claude.messages.create(
        model="claude-x", max_tokens=128, messages=history, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    assert forced.stop_reason == "tool_use"
    sent = upstream.requests[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False
    earlier = sent["messages"][1]
    assert earlier == {"role": "assistant", "content": "Earlier answer"}  # thinking left out
    history += [{"role": "assistant", "content": blocks(forced)},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_9",
                                              "content": "Warm"}]}]
    claude.messages.create(model="claude-x", max_tokens=128, messages=history,
                           tools=[WEATHER], tool_choice={"type": "any"})
    assert upstream.requests[1]["tool_choice"] == "required"
    assert "parallel_tool_calls" not in upstream.requests[1]


def test_the_raw_event_order(served: Served, script: list[Any]) -> None:
    script.append(Reply(text="Sunny and warm.", reasoning="Look it up. " * 40))
    events = sse(served.port, "/v1/messages", {
        "model": "claude-x", "max_tokens": 256, "stream": True,
        "messages": [{"role": "user", "content": "Weather?"}]},
        {"anthropic-version": "2023-06-01", "x-api-key": "client-key"})
    for event in events:  # ping is the API's, not among the SDK's event types
        if event["type"] != "ping":
            _EVENT.validate_python(event)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    for index in (0, 1):  # each block opens, changes, and closes before the next opens
        mine = [n for n, e in enumerate(events) if e.get("index") == index]
        assert events[mine[0]]["type"] == "content_block_start"
        assert events[mine[-1]]["type"] == "content_block_stop"
    # the reasoning streams as it comes (no signature to wait for), in many deltas
    thinking = [e["delta"] for e in events if e.get("index") == 0
                and e["type"] == "content_block_delta"]
    assert len(thinking) > 10 and thinking[-1] == {"type": "signature_delta", "signature": ""}
    assert "".join(d.get("thinking", "") for d in thinking) == "Look it up. " * 40
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    texts = "".join(e["delta"].get("text", "") for e in events
                    if e["type"] == "content_block_delta")
    assert texts == "Sunny and warm."


def test_errors_in_anthropic_shape(claude: Anthropic, script: list[Any]) -> None:
    script += [context_length_exceeded(),
               HttpError(429, retry_after=7),
               HttpError(503)]
    ask: dict[str, Any] = {"model": "claude-x", "max_tokens": 64,
                           "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(**ask)
    body: Any = bad.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    # in Anthropic's words, which Claude Code compacts on
    assert body["error"]["message"] == "prompt is too long: 130000 tokens > 128000 maximum"
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(**ask)
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as failed:
        claude.messages.create(**ask)
    assert failed.value.status_code == 502
    assert failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert UPSTREAM_KEY not in json.dumps(failed.value.body)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(**ask, tools=[WEATHER],
                               extra_body={"tool_choice": {"type": "sometimes"}})
    assert "tool_choice.type" in refused.value.body["error"]["message"]  # type: ignore[index]


class ReadingOpenAIModel:
    """The scripted OpenAI model Claude Code talks to through nonoka: it reasons and
    calls Read on a prompt's first request, and answers with what the tool returned once
    its result comes back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text(f"The tool said: {last['content'].strip()}")
        return Reply.of(call("Read", {"file_path": str(self.path)}, id="call_read_1"),
                        reasoning="I should read the file.")


def test_claude_code_through_an_openai_model(tmp_path: Path) -> None:
    from tests.serve.claude_code import ClaudeCode
    from tests.serve.harness import ServeProcess

    note = "papaya and kiwi"
    code = ClaudeCode(tmp_path / "claude")
    project = tmp_path / "project"
    project.mkdir()
    (code.work / "notes.txt").write_text(note + "\n")
    model = ReadingOpenAIModel(code.work / "notes.txt")
    try:
        with ScriptedOpenAIServer(model, strict=("reasoning_back",)) as upstream:
            served = ServeProcess(project, MODEL, {
                "OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
                "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})
            try:
                result = code.run(served.url.removesuffix("/v1"), "What does notes.txt say?",
                                  "--allowedTools", "Read")
            finally:
                errors = served.stop()
    finally:
        code.close()
    assert "Traceback" not in errors, errors
    assert result["subtype"] == "success" and not result["is_error"], result
    assert note in result["result"] and result["num_turns"] == 2
    assert not upstream.failures and not upstream.rejections, upstream.failures
    assert len(upstream.requests) == 2  # the call, then the answer
    for body in upstream.requests:
        valid_request(body)
    said = upstream.requests[1]["messages"]
    assert said[-2]["tool_calls"][0]["function"]["name"] == "Read"
    assert said[-2]["reasoning_content"] == "I should read the file."
    assert said[-1]["role"] == "tool" and note in said[-1]["content"]
    # Claude Code kept the reasoning as a thinking block and sent it back
    transcript = code.transcript(result["session_id"])
    thought = [b for r in transcript if r.get("type") == "assistant"
               for b in r["message"]["content"] if b.get("type") == "thinking"]
    assert [b["thinking"] for b in thought] == ["I should read the file."]
    env = {**os.environ, "NONOKA_DATABASE_URL": ""}
    listed = run_nonoka(project, "sessions", "list", "--json", env=env)
    chats = json.loads(listed.stdout)
    assert len(chats) == 1, chats  # one line, named by Claude Code's session id
    shown = run_nonoka(project, "sessions", "show", chats[0]["session_id"], "--json",
                       "--entries", env=env)
    entries = json.loads(shown.stdout)["entries"]
    assert [e["role"] for e in entries][-3:] == ["assistant", "tool", "assistant"]
    assert note in entries[-1]["text"]


def test_an_openai_responses_model(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openai.types.responses import response_create_params

    from nonoka.state.messages import ToolCall
    from nonoka.testing.server import ReasoningItem, ResponsesReply, ScriptedResponsesServer

    fields = set(response_create_params.ResponseCreateParamsStreaming.__annotations__)
    weather = ToolCall(id="call_w", name="get_weather", arguments='{"city": "Lima"}')
    steps = [ResponsesReply(output=[ReasoningItem(summary=("Check the weather.",)), weather]),
             ResponsesReply(output=[ReasoningItem(), "Lima is foggy."]),
             ResponsesReply(output=[ReasoningItem(summary=("One.",)),
                                    ReasoningItem(summary=("Two.",)), "Bring a coat."])]
    # openai_reasoning: the encrypted reasoning must come back unaltered
    with ScriptedResponsesServer(steps, strict=["openai_reasoning"]) as upstream:
        env = {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
               "NONOKA_DATABASE_URL": ""}
        with served_with(project, "openai-responses:scripted-model", env,
                         monkeypatch) as running, \
                Anthropic(base_url=running.url.removesuffix("/v1"), api_key="k",
                          max_retries=0) as client:
            ask: dict[str, Any] = {"model": "claude-x", "max_tokens": 300, "tools": [WEATHER],
                                   "stop_sequences": ["END"]}
            history: list[Any] = [{"role": "user", "content": "Weather in Lima?"}]
            first = client.messages.create(messages=history, **ask)
            assert [b.type for b in first.content] == ["thinking", "tool_use"]
            assert first.content[0].type == "thinking"
            assert first.content[0].thinking == "Check the weather."
            assert first.content[0].signature == ""
            history += [{"role": "assistant", "content": blocks(first)},
                        {"role": "user", "content": [{
                            "type": "tool_result", "tool_use_id": "call_w", "content": [
                                {"type": "text", "text": "Fog"},
                                {"type": "image", "source": {
                                    "type": "base64", "media_type": "image/png",
                                    "data": PNG}}]}]}]
            with client.messages.stream(messages=history, **ask) as stream:
                second = stream.get_final_message()
            history += [{"role": "assistant", "content": blocks(second)},
                        {"role": "user", "content": "A coat?"}]
            third = client.messages.create(messages=history, **ask)
    # a reasoning item without a summary gives no thinking block
    assert [b.type for b in second.content] == ["text"] and second.stop_reason == "end_turn"
    # two summaries stream into one thinking block, as they came
    assert [b.type for b in third.content] == ["thinking", "text"]
    assert third.content[0].type == "thinking"
    assert third.content[0].thinking == "One.\n\nTwo."
    assert not upstream.rejections and len(upstream.requests) == 3
    for body in upstream.requests:
        assert set(body) <= fields, set(body) - fields
        assert "stop" not in body and body["max_output_tokens"] == 300
    items = upstream.requests[1]["input"]
    assert [i["type"] for i in items] == ["message", "reasoning", "function_call",
                                          "function_call_output"]
    output = items[-1]["output"]
    assert [p["type"] for p in output] == ["input_text", "input_image"]
    # the history Claude Code resends (without the summary-less reasoning) continues the
    # line: no branch, and both reasoning items go back to OpenAI
    last = [i["type"] for i in upstream.requests[2]["input"]]
    assert last.count("reasoning") == 2 and last[-1] == "message"
    chats = records(project)
    assert len(chats) == 1 and not chats[0].metadata.get("forked_from"), chats


def test_max_tokens_held_to_the_models_limit(project: Path, script: list[Any],
                                             upstream: ScriptedOpenAIServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (project / ".nonoka").mkdir()
    (project / ".nonoka" / "config.toml").write_text(
        '[models."openai:scripted-model"]\ncontext_tokens = 32768\n'
        'max_output_tokens = 100\ninput = 0.5\noutput = 1.5\n')
    script.append(Reply(text="Cut", finish_reason="length", output_tokens=100))
    env = {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
           "NONOKA_DATABASE_URL": ""}
    # Claude Code asks for Claude's 32,000; the model takes 100 at most
    with served_with(project, MODEL, env, monkeypatch) as running, \
            Anthropic(base_url=running.url.removesuffix("/v1"), api_key="k",
                      max_retries=0) as client, \
            client.messages.stream(model="claude-x", max_tokens=32000,
                                   messages=[{"role": "user", "content": "Go"}]) as stream:
        answer = stream.get_final_message()
    assert upstream.requests[0]["max_tokens"] == 100
    assert answer.stop_reason == "max_tokens"


def test_a_stream_cut_upstream_ends_in_an_error_event(served: Served,
                                                      script: list[Any]) -> None:
    from nonoka.testing.steps import DropConnection

    script.append(DropConnection(partial_text="Half an ans"))
    events = sse(served.port, "/v1/messages", {
        "model": "claude-x", "max_tokens": 64, "stream": True,
        "messages": [{"role": "user", "content": "Tell me"}]},
        {"anthropic-version": "2023-06-01", "x-api-key": "client-key"})
    kinds = [e["type"] for e in events]
    # the text already sent stands, its block is closed, and the stream ends in
    # Anthropic's error event (no message_stop: the SDK raises on it)
    assert kinds[0] == "message_start" and kinds[-1] == "error"
    assert "message_stop" not in kinds and "content_block_stop" in kinds
    assert events[-1]["error"]["type"] == "api_error"
    said = "".join(e["delta"].get("text", "") for e in events
                   if e["type"] == "content_block_delta")
    assert said == "Half an ans"


def said_last(body: dict[str, Any]) -> str:
    """The text of a Chat Completions request's last message."""
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else "\n".join(
        str(p.get("text", "")) for p in content)


class OverflowingOpenAIModel:
    """Notes what it is told; its context overflows once, at ``Overflow now.``, with
    OpenAI's ``context_length_exceeded``; answers Claude Code's compaction with a summary."""

    def __init__(self) -> None:
        self.overflowed = False

    def __call__(self, body: dict[str, Any]) -> Any:
        from nonoka.serve.claude_code import is_compaction

        said = said_last(body)
        if is_compaction(body):
            return text("<analysis>\nFruit.\n</analysis>\n\n<summary>\nWe talked about "
                        "papaya.\n</summary>")
        if "Overflow now." in said and not self.overflowed:
            self.overflowed = True
            return context_length_exceeded(limit=128000, requested=131000)
        return text(f"Noted: {said.splitlines()[-1]}")


def test_claude_code_compacts_on_an_openai_overflow(tmp_path: Path) -> None:
    from nonoka.serve.claude_code import is_compaction
    from tests.serve.claude_code import ClaudeCode
    from tests.serve.harness import ServeProcess

    code = ClaudeCode(tmp_path / "claude")
    project = tmp_path / "project"
    project.mkdir()
    try:
        with ScriptedOpenAIServer(OverflowingOpenAIModel()) as upstream:
            served = ServeProcess(project, MODEL, {
                "OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
                "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})
            base = served.url.removesuffix("/v1")
            try:
                first = code.run(base, "Remember papaya.")
                second = code.run(base, "Overflow now.", "--continue")
            finally:
                errors = served.stop()
    finally:
        code.close()
    assert "Traceback" not in errors, errors
    assert not upstream.failures, upstream.failures
    # Claude Code took OpenAI's overflow for its own, compacted, then asked again (this
    # version does so on OpenAI's own wording too: test_errors_in_anthropic_shape holds
    # the message to Anthropic's)
    assert len([b for b in upstream.requests if is_compaction(b)]) == 1
    assert first["session_id"] == second["session_id"]
    assert second["result"] == "Noted: Overflow now."
    for body in upstream.requests:
        valid_request(body)


def test_the_models_own_reason_names_the_stop(claude: Anthropic, script: list[Any]) -> None:
    # the output stayed under max_tokens (no usage to tell it): the model's reason does
    script += [Reply(text="A long", finish_reason="length", output_tokens=2),
               Reply(text="", finish_reason="content_filter", output_tokens=1)]
    cut = claude.messages.create(model="claude-x", max_tokens=64,
                                 messages=[{"role": "user", "content": "At length."}])
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2
    with claude.messages.stream(model="claude-x", max_tokens=64, messages=[
            {"role": "user", "content": "Something else."}]) as stream:
        refused = stream.get_final_message()
    assert refused.stop_reason == "refusal"
