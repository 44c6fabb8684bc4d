"""ScriptedOpenAIServer is faithful to the OpenAI wire format: the official ``openai`` SDK
parses everything it sends. Also: the server as a separate process, and the import weight
of the adapter in a fresh interpreter."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from nonoka.llm.base import ModelResponse
from nonoka.llm.openai import OpenAIChatModel
from nonoka.state.messages import Message, ToolCall
from nonoka.testing import calls, text
from nonoka.testing.server import (
    Delay,
    DropConnection,
    HttpError,
    ScriptedOpenAIServer,
    load_script,
)

USER: list[Any] = [{"role": "user", "content": "hi"}]
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {"name": "weather", "description": "Weather for a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
TWO_CALLS = calls(("weather", {"city": "Paris, France"}, "call_p"),
                  ("weather", {"city": "Kyoto, Japan"}, "call_k"), content="Checking.")


def sdk(server: ScriptedOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-fidelity", max_retries=0)


def test_sdk_streams_text_and_a_final_usage_chunk() -> None:
    step = text("Hello from the scripted server", input_tokens=12, output_tokens=6)
    with ScriptedOpenAIServer([step]) as server, sdk(server) as client, \
            client.chat.completions.create(model="gpt-x", messages=USER, stream=True,
                                           stream_options={"include_usage": True}) as stream:
        chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" and c.model == "gpt-x" for c in chunks)
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in with_choices if c.choices[0].delta.content]
    assert len(pieces) > 2
    assert "".join(pieces) == "Hello from the scripted server"
    assert with_choices[-1].choices[0].finish_reason == "stop"
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) \
        == (12, 6, 18)
    assert all(c.usage is None for c in chunks[:-1])


def test_sdk_stream_without_include_usage_has_no_usage_chunk() -> None:
    with ScriptedOpenAIServer(["plain"]) as server, sdk(server) as client, \
            client.chat.completions.create(model="m", messages=USER, stream=True) as stream:
        chunks = list(stream)
    assert all(c.choices and c.usage is None for c in chunks)


def test_sdk_reads_a_non_streamed_text_answer() -> None:
    step = text("Not streamed", input_tokens=3, output_tokens=2, cost_usd=0.001)
    with ScriptedOpenAIServer([step]) as server, sdk(server) as client:
        completion = client.chat.completions.create(model="gpt-x", messages=USER)
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Not streamed"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens == 5
    assert (completion.usage.model_extra or {}).get("cost") == 0.001  # OpenRouter style


def test_sdk_assembles_streamed_tool_calls_split_over_several_chunks() -> None:
    with ScriptedOpenAIServer([TWO_CALLS, TWO_CALLS]) as server, sdk(server) as client:
        with client.chat.completions.create(model="m", messages=USER, tools=[WEATHER_TOOL],
                                            stream=True) as stream:
            raw = list(stream)
        with client.chat.completions.stream(model="m", messages=USER,
                                            tools=[WEATHER_TOOL]) as helper:
            final = helper.get_final_completion()
    fragments = [tc for c in raw for tc in (c.choices[0].delta.tool_calls or [])]
    assert len([f for f in fragments if f.index == 0]) >= 3  # opening + argument pieces
    assert [f.id for f in fragments if f.id] == ["call_p", "call_k"]
    message = final.choices[0].message
    assert message.content == "Checking."
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] \
        == [(c.id, c.name, c.arguments) for c in TWO_CALLS.tool_calls]
    assert final.choices[0].finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == [WEATHER_TOOL]


def test_sdk_reads_non_streamed_tool_calls() -> None:
    with ScriptedOpenAIServer([calls(("weather", {"city": "Oslo"}, "c9"))]) as server, \
            sdk(server) as client:
        completion = client.chat.completions.create(model="m", messages=USER,
                                                    tools=[WEATHER_TOOL])
    choice = completion.choices[0]
    assert choice.message.content is None
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls or []
    assert tool_call.type == "function"
    assert (tool_call.id, tool_call.function.name, tool_call.function.arguments) \
        == ("c9", "weather", '{"city": "Oslo"}')


def test_sdk_raises_its_own_error_types_for_scripted_errors() -> None:
    bad = HttpError(400, {"error": {"message": "bad things", "type": "invalid_request_error",
                                    "param": "model", "code": "model_not_found"}})
    with ScriptedOpenAIServer([HttpError(429, retry_after=0), bad]) as server, \
            sdk(server) as client:
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.BadRequestError, match="bad things") as rejected:
            client.chat.completions.create(model="m", messages=USER)
    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "0"
    assert rejected.value.code == "model_not_found"


def test_sdk_lists_models_and_sends_its_key() -> None:
    with ScriptedOpenAIServer(["x"], model="local-llama") as server, sdk(server) as client:
        assert [m.id for m in client.models.list()] == ["local-llama"]
        client.chat.completions.create(model="m", messages=USER)
    assert server.headers[0]["authorization"] == "Bearer sk-fidelity"


def test_a_function_script_sees_each_request() -> None:
    def echo(body: dict[str, Any]) -> str:
        return f"echo: {body['messages'][-1]['content']}"

    with ScriptedOpenAIServer(echo) as server, sdk(server) as client:
        for word in ("one", "two"):
            completion = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": word}])
            assert completion.choices[0].message.content == f"echo: {word}"
        server.assert_done()


def test_a_failing_function_script_answers_500_and_fails_assert_done() -> None:
    def broken(body: dict[str, Any]) -> str:
        raise KeyError("no such scenario")

    with ScriptedOpenAIServer(broken) as server, sdk(server) as client:
        with pytest.raises(openai.InternalServerError, match="no such scenario"):
            client.chat.completions.create(model="m", messages=USER)
        with pytest.raises(AssertionError, match="raised KeyError"):
            server.assert_done()


def test_assert_done_reports_unused_steps() -> None:
    with ScriptedOpenAIServer(["used", "unused"]) as server, sdk(server) as client:
        client.chat.completions.create(model="m", messages=USER)
        with pytest.raises(AssertionError, match="1 unused step"):
            server.assert_done()


def test_json_script_forms(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        "plain",
        {"text": "counted", "input_tokens": 4, "output_tokens": 2, "cost_usd": 0.5},
        {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}], "text": ""},
        {"error": 429, "retry_after": 0},
        {"delay": 0.5, "text": "late"},
        {"drop": True, "text": "part"},
    ]))
    steps = load_script(script)
    assert steps[0] == "plain"
    assert isinstance(steps[1], ModelResponse)
    assert (steps[1].usage.input_tokens, steps[1].usage.cost_usd) == (4, 0.5)
    assert isinstance(steps[2], ModelResponse)
    assert steps[2].tool_calls == [ToolCall(id="c1", name="add", arguments='{"a": 1}')]
    assert steps[3] == HttpError(429, retry_after=0)
    assert isinstance(steps[4], Delay)
    assert steps[4].seconds == 0.5
    assert isinstance(steps[4].then, ModelResponse)
    assert steps[4].then.text == "late"
    assert steps[5] == DropConnection("part")


async def test_the_server_runs_as_a_separate_process(tmp_path: Path) -> None:
    script, port_file, log = tmp_path / "s.json", tmp_path / "port", tmp_path / "log.jsonl"
    script.write_text(json.dumps([
        {"error": 503, "retry_after": 0},
        {"text": "from another process", "input_tokens": 9, "output_tokens": 3},
    ]))
    command = [sys.executable, "-m", "nonoka.testing.server", "--script", str(script),
               "--port", "0", "--port-file", str(port_file), "--log", str(log)]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not port_file.exists():
            assert process.returncode is None, "the server process died"
            assert time.monotonic() < deadline, "the server never wrote its port file"
            await asyncio.sleep(0.02)
        port = int(port_file.read_text())
        model = OpenAIChatModel("proc-model", base_url=f"http://127.0.0.1:{port}/v1",
                                api_key="sk-proc-secret", backoff_base=0.01)
        response = await model.complete([Message(role="user", content="hello?")])
    finally:
        if process.returncode is None:
            process.terminate()  # SIGTERM: the server shuts down cleanly, exit status 0
        stdout, stderr = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode().strip() == f"http://127.0.0.1:{port}/v1"
    assert response.text == "from another process"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 3)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == ["error 503", "text"]
    assert all(r["path"] == "/v1/chat/completions" for r in records)
    assert records[1]["body"]["messages"] == [{"role": "user", "content": "hello?"}]
    assert records[1]["headers"]["authorization"] == "<redacted>"
    assert "sk-proc-secret" not in log.read_text()


IMPORT_PROBE = """
import json, sys
import nonoka.llm.base
before = set(sys.modules)
import nonoka.llm.openai
print(json.dumps({"loaded": sorted(sys.modules), "added": sorted(set(sys.modules) - before)}))
"""


def test_importing_the_adapter_stays_light() -> None:
    probe = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True,
                           text=True, check=True)
    modules = json.loads(probe.stdout)
    # (``ssl`` is not listed: asyncio itself imports it.)
    heavy = {"httpx", "httpcore", "h11", "anyio", "openai", "rich", "http.client"}
    assert heavy.isdisjoint(modules["loaded"])
    foreign = [m for m in modules["added"]
               if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "nonoka"]
    assert foreign == []  # nothing beyond what nonoka.state.messages already needs (pydantic)
