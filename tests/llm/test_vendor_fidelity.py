"""The vendor extensions of ScriptedOpenAIServer, read by the official ``openai`` SDK.

DeepSeek's and OpenRouter's reasoning deltas, Gemini's thought signatures on tool calls,
the usage details, and the errors OpenAI sends for a context overflow, a spent quota and a
rate limit: the SDK must read each of them as it reads the real service's. The strict
modes must refuse what DeepSeek and Gemini refuse, and accept what the SDK sends back when
a client keeps the vendor's fields (the SDK's own message objects, resent as they are).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from nonoka.state.messages import ToolCall
from nonoka.testing import call, calls
from nonoka.testing.server import (
    HttpError,
    Reply,
    ScriptedOpenAIServer,
    context_length_exceeded,
    insufficient_quota,
    load_script,
    rate_limited,
)

USER: list[Any] = [{"role": "user", "content": "Weather in Oslo and Rome?"}]
THINKING = "The user wants two cities, so two calls."
SIGNED = Reply.of(calls(("weather", {"city": "Oslo"}, "call_o"),
                        ("weather", {"city": "Rome"}, "call_r")),
                  reasoning=THINKING, thought_signatures={"call_o": "c2lnLW9zbG8="})
RESULTS: list[Any] = [{"role": "tool", "tool_call_id": "call_o", "content": "sunny"},
                      {"role": "tool", "tool_call_id": "call_r", "content": "rain"}]


def chat(*messages: Any) -> list[Any]:
    """Messages as sent: dicts and the SDK's own message objects alike."""
    return list(messages)


def sdk(server: ScriptedOpenAIServer, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-fidelity", max_retries=retries)


def stream(client: openai.OpenAI, **extra: Any) -> list[Any]:
    with client.chat.completions.create(model="m", messages=USER, stream=True,
                                        **extra) as chunks:
        return list(chunks)


# reasoning ---------------------------------------------------------------------------------


def test_sdk_reads_deepseek_reasoning_content_before_the_text() -> None:
    reply = Reply(text="Sunny.", reasoning=THINKING)
    with ScriptedOpenAIServer([reply, reply], chunk_size=6) as server, sdk(server) as client:
        chunks = stream(client)
        completion = client.chat.completions.create(model="m", messages=USER)
    deltas = [c.choices[0].delta for c in chunks]
    thought = [d.model_extra.get("reasoning_content") for d in deltas if d.model_extra]
    assert len(thought) > 2
    assert "".join(thought) == THINKING
    kinds = ["reasoning" if (d.model_extra or {}).get("reasoning_content") else
             "text" if d.content else "other" for d in deltas]
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "reasoning")
    assert "".join(d.content or "" for d in deltas) == "Sunny."
    message = completion.choices[0].message
    assert message.content == "Sunny."
    assert (message.model_extra or {})["reasoning_content"] == THINKING


def test_sdk_reads_openrouter_reasoning_deltas() -> None:
    reply = Reply(text="Sunny.", reasoning=THINKING, reasoning_field="reasoning")
    with ScriptedOpenAIServer([reply, reply]) as server, sdk(server) as client:
        chunks = stream(client)
        completion = client.chat.completions.create(model="m", messages=USER)
    extras = [c.choices[0].delta.model_extra or {} for c in chunks]
    assert "".join(e.get("reasoning", "") for e in extras) == THINKING
    assert all("reasoning_content" not in e for e in extras)
    assert (completion.choices[0].message.model_extra or {})["reasoning"] == THINKING


# thought signatures ----------------------------------------------------------------------


def test_sdk_reads_gemini_thought_signatures_on_tool_calls() -> None:
    with ScriptedOpenAIServer([SIGNED, SIGNED, SIGNED]) as server, sdk(server) as client:
        chunks = stream(client)
        with client.chat.completions.stream(model="m", messages=USER) as helper:
            final = helper.get_final_completion()
        completion = client.chat.completions.create(model="m", messages=USER)
    openings = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or []) if tc.id]
    assert [(tc.id, (tc.model_extra or {}).get("extra_content")) for tc in openings] == [
        ("call_o", {"google": {"thought_signature": "c2lnLW9zbG8="}}), ("call_r", None)]
    for message in (final.choices[0].message, completion.choices[0].message):
        first, second = message.tool_calls or []
        assert isinstance(first, ChatCompletionMessageFunctionToolCall)
        assert (first.model_extra or {})["extra_content"] == {
            "google": {"thought_signature": "c2lnLW9zbG8="}}
        assert "extra_content" not in (second.model_extra or {})
        assert (first.function.name, first.function.arguments) == ("weather", '{"city": "Oslo"}')


# usage -------------------------------------------------------------------------------------


def test_sdk_reads_cached_and_reasoning_token_details() -> None:
    reply = Reply(text="ok", input_tokens=1200, output_tokens=300, cached_tokens=1024,
                  reasoning_tokens=256)
    with ScriptedOpenAIServer([reply, reply]) as server, sdk(server) as client:
        chunks = stream(client, stream_options={"include_usage": True})
        completion = client.chat.completions.create(model="m", messages=USER)
    for usage in (chunks[-1].usage, completion.usage):
        assert usage is not None
        assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) \
            == (1200, 300, 1500)
        assert usage.prompt_tokens_details is not None
        assert usage.prompt_tokens_details.cached_tokens == 1024
        assert usage.completion_tokens_details is not None
        assert usage.completion_tokens_details.reasoning_tokens == 256


def test_plain_usage_has_no_details() -> None:
    with ScriptedOpenAIServer(["ok"]) as server, sdk(server) as client:
        usage = client.chat.completions.create(model="m", messages=USER).usage
    assert usage is not None
    assert (usage.prompt_tokens_details, usage.completion_tokens_details) == (None, None)


# errors ------------------------------------------------------------------------------------


def test_sdk_raises_a_context_overflow_as_openai_does() -> None:
    with ScriptedOpenAIServer([context_length_exceeded(128000, 131072)]) as server, \
            sdk(server) as client, pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="m", messages=USER)
    error = raised.value
    assert (error.status_code, error.code, error.param, error.type) \
        == (400, "context_length_exceeded", "messages", "invalid_request_error")
    assert "maximum context length is 128000 tokens" in error.message
    assert "resulted in 131072 tokens" in error.message


def test_sdk_raises_a_spent_quota_and_does_not_wait_for_it() -> None:
    with ScriptedOpenAIServer([insufficient_quota()]) as server, sdk(server) as client, \
            pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert (raised.value.status_code, raised.value.code, raised.value.type) \
        == (429, "insufficient_quota", "insufficient_quota")
    assert "retry-after" not in raised.value.response.headers


def test_sdk_raises_a_rate_limit_and_honours_its_retry_after() -> None:
    with ScriptedOpenAIServer([rate_limited(2)]) as server, sdk(server) as client, \
            pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert (raised.value.code, raised.value.type) == ("rate_limit_exceeded", "tokens")
    assert raised.value.response.headers["retry-after"] == "2"
    assert "Please try again in 2s" in raised.value.message

    with ScriptedOpenAIServer([rate_limited(0.4), "after the wait"]) as server, \
            sdk(server, retries=1) as client:
        started = time.monotonic()
        completion = client.chat.completions.create(model="m", messages=USER)
        waited = time.monotonic() - started
        server.assert_done()
    assert completion.choices[0].message.content == "after the wait"
    assert waited >= 0.4  # the SDK slept as the header said before trying again


# strict: DeepSeek thinking mode ----------------------------------------------------------


def test_deepseek_strict_accepts_the_sdks_own_message_sent_back() -> None:
    with ScriptedOpenAIServer([SIGNED, "Sunny in Oslo, rain in Rome."],
                              strict=["deepseek_thinking"]) as server, sdk(server) as client:
        first = client.chat.completions.create(model="deepseek-reasoner", messages=USER)
        history = [*USER, first.choices[0].message, *RESULTS]
        second = client.chat.completions.create(model="deepseek-reasoner", messages=history)
        server.assert_done()
    assert second.choices[0].message.content == "Sunny in Oslo, rain in Rome."
    assert server.rejections == []
    assert server.requests[1]["messages"][1]["reasoning_content"] == THINKING


def test_deepseek_strict_refuses_a_tool_call_without_its_reasoning() -> None:
    with ScriptedOpenAIServer([SIGNED, "Sunny."], strict=["deepseek_thinking"]) as server, \
            sdk(server) as client:
        first = client.chat.completions.create(model="m", messages=USER).choices[0].message
        dropped = first.model_dump(exclude={"reasoning_content"}, exclude_none=True)
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="m", messages=chat(*USER, dropped, *RESULTS))
        assert server.remaining == 1
        kept = client.chat.completions.create(model="m", messages=chat(*USER, first, *RESULTS))
        server.assert_done()  # the refused request used no step
    error = raised.value
    assert error.status_code == 400
    assert error.body == {"message": "The `reasoning_content` in the thinking mode must be "
                                     "passed back to the API.",
                          "type": "invalid_request_error", "param": None,
                          "code": "invalid_request_error"}
    assert kept.choices[0].message.content == "Sunny."
    assert server.rejections == [1]
    assert len(server.requests) == 3


def test_deepseek_strict_leaves_answers_without_reasoning_alone() -> None:
    plain = call("weather", {"city": "Oslo"}, id="call_o")
    with ScriptedOpenAIServer([plain, "Sunny."], strict=["deepseek_thinking"]) as server, \
            sdk(server) as client:
        first = client.chat.completions.create(model="m", messages=USER).choices[0].message
        client.chat.completions.create(model="m", messages=chat(*USER, first, RESULTS[0]))
        server.assert_done()
    assert server.rejections == []


# strict: Gemini thought signatures -------------------------------------------------------


def gemini_error(error: openai.APIStatusError) -> dict[str, Any]:
    body = error.response.json()
    assert isinstance(body, list)
    (only,) = body
    assert isinstance(only, dict)
    return only


def test_gemini_strict_accepts_the_sdks_own_message_sent_back() -> None:
    with ScriptedOpenAIServer([SIGNED, SIGNED, "Both done."],
                              strict=["gemini_signatures"]) as server, sdk(server) as client:
        first = client.chat.completions.create(model="gemini-3-pro", messages=USER)
        with client.chat.completions.stream(model="gemini-3-pro", messages=USER) as helper:
            streamed = helper.get_final_completion()
        history = [*USER, first.choices[0].message, *RESULTS,
                   {"role": "user", "content": "And again?"}, streamed.choices[0].message,
                   *RESULTS]
        client.chat.completions.create(model="gemini-3-pro", messages=history)
        server.assert_done()
    assert server.rejections == []
    sent = server.requests[2]["messages"][1]["tool_calls"][0]
    assert sent["extra_content"] == {"google": {"thought_signature": "c2lnLW9zbG8="}}


def test_gemini_strict_refuses_a_missing_signature_in_the_current_turn() -> None:
    with ScriptedOpenAIServer([SIGNED], strict=["gemini_signatures"]) as server, \
            sdk(server) as client:
        first = client.chat.completions.create(model="m", messages=USER).choices[0].message
        dropped = first.model_dump(exclude_none=True)
        for tool_call in dropped["tool_calls"]:
            tool_call.pop("extra_content", None)
        system: Any = {"role": "system", "content": "Be brief."}
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="m",
                                           messages=chat(system, *USER, dropped, *RESULTS))
    error = gemini_error(raised.value)["error"]
    assert raised.value.status_code == 400
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"].startswith(
        "Function call is missing a thought_signature in functionCall parts.")
    assert "function call `default_api:weather` , position 2." in error["message"]
    assert server.rejections == [1]


def test_gemini_strict_refuses_an_altered_signature_anywhere() -> None:
    with ScriptedOpenAIServer([SIGNED], strict=["gemini_signatures"]) as server, \
            sdk(server) as client:
        first = client.chat.completions.create(model="m", messages=USER).choices[0].message
        altered = first.model_dump(exclude_none=True)
        altered["tool_calls"][0]["extra_content"]["google"]["thought_signature"] = "Zm9yZ2Vk"
        later: Any = {"role": "user", "content": "Thanks. Anything else?"}
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="m",
                                           messages=chat(*USER, altered, *RESULTS, later))
    assert gemini_error(raised.value)["error"]["message"] == "Corrupted thought signature."


def test_gemini_strict_checks_missing_signatures_in_the_current_turn_only() -> None:
    with ScriptedOpenAIServer([SIGNED, "Fine."], strict=["gemini_signatures"]) as server, \
            sdk(server) as client:
        first = client.chat.completions.create(model="m", messages=USER).choices[0].message
        dropped = first.model_dump(exclude_none=True)
        del dropped["tool_calls"][0]["extra_content"]
        later: Any = {"role": "user", "content": "Thanks. Anything else?"}
        answer = client.chat.completions.create(model="m",
                                                messages=chat(*USER, dropped, *RESULTS, later))
        server.assert_done()
    assert answer.choices[0].message.content == "Fine."


def test_strict_modes_read_odd_shapes_without_failing() -> None:
    odd: list[Any] = [
        "not a message", {"role": "assistant", "tool_calls": "not a list"},
        {"role": "assistant", "tool_calls": [7, {"id": "call_o", "function": "weather",
                                                 "extra_content": {"google": 3}}]},
    ]
    with ScriptedOpenAIServer([SIGNED, "fine", "fine"],
                              strict=["deepseek_thinking", "gemini_signatures"]) as server:
        first = _post(server.port, {"model": "m", "messages": USER})
        refused = _post(server.port, {"model": "m", "messages": [*USER, *odd]})
        fine = _post(server.port, {"model": "m", "messages": "not a list"})
    assert first[0] == 200
    assert refused[0] == 400  # call_o came back without its reasoning
    assert fine[0] == 200
    assert server.rejections == [1]
    with ScriptedOpenAIServer([SIGNED, "fine"], strict=["gemini_signatures"]) as server:
        _post(server.port, {"model": "m", "messages": USER})
        status, body = _post(server.port, {"model": "m", "messages": [*USER, *odd]})
    assert status == 400
    assert "`default_api:None` , position 3" in body[0]["error"]["message"]


def test_strict_modes_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match="unknown strict mode 'claude'"):
        ScriptedOpenAIServer([], strict=["claude"])


# the script as JSON, and as a process ----------------------------------------------------


def test_json_script_forms_for_vendor_replies_and_errors(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"text": "hi", "reasoning_content": "think", "cached_tokens": 4,
         "reasoning_tokens": 2},
        {"text": "", "reasoning": "hmm", "tool_calls": [
            {"id": "c1", "name": "f", "arguments": {"a": 1}, "thought_signature": "s1"},
            {"id": "c2", "name": "g", "arguments": "{}"}]},
        {"tool_calls": [{"id": "c3", "name": "f", "thought_signature": "s3"}]},
        {"error": "context_length_exceeded", "limit": 8192, "requested": 9000},
        {"error": "insufficient_quota"},
        {"error": "rate_limit_exceeded", "retry_after": 3},
    ]))
    first, second, third, overflow, quota, limited = load_script(script)
    assert first == Reply(text="hi", reasoning="think", cached_tokens=4, reasoning_tokens=2)
    assert second == Reply(
        reasoning="hmm", reasoning_field="reasoning",
        tool_calls=(ToolCall(id="c1", name="f", arguments='{"a": 1}'),
                    ToolCall(id="c2", name="g", arguments="{}")),
        thought_signatures={"c1": "s1"})
    assert second.finish == "tool_calls"
    assert isinstance(third, Reply)
    assert third.thought_signatures == {"c3": "s3"}
    assert overflow == context_length_exceeded(8192, 9000)
    assert quota == insufficient_quota()
    assert limited == rate_limited(3)
    assert isinstance(limited, HttpError)
    assert limited.retry_after == 3
    with pytest.raises(ValueError, match="unknown scripted error 'teapot'"):
        load_script(_write(tmp_path / "bad.json", [{"error": "teapot"}]))


def _write(path: Path, steps: list[Any]) -> Path:
    path.write_text(json.dumps(steps))
    return path


def _post(port: int, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_the_server_process_enforces_strict_modes(tmp_path: Path) -> None:
    script = _write(tmp_path / "s.json", [
        {"text": "", "reasoning_content": "think",
         "tool_calls": [{"id": "c1", "name": "f", "thought_signature": "s1"}]},
        "done"])
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "nonoka.testing.server", "--script", str(script),
         "--port-file", str(port_file), "--strict", "deepseek_thinking",
         "--strict", "gemini_signatures"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not port_file.exists():
            assert process.poll() is None, "the server process died"
            assert time.monotonic() < deadline, "the server never wrote its port file"
            time.sleep(0.02)
        port = int(port_file.read_text())
        status, first = _post(port, {"model": "m", "messages": USER})
        message = first["choices"][0]["message"]
        bare = {k: v for k, v in message.items() if k != "reasoning_content"}
        refused = _post(port, {"model": "m", "messages": [*USER, bare, RESULTS[0]]})
        accepted = _post(port, {"model": "m", "messages": [*USER, message, RESULTS[0]]})
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr.decode()
    assert status == 200
    assert refused == (400, {"error": {
        "message": "The `reasoning_content` in the thinking mode must be passed back to the "
                   "API.", "type": "invalid_request_error", "param": None,
        "code": "invalid_request_error"}})
    assert accepted[0] == 200
    assert accepted[1]["choices"][0]["message"]["content"] == "done"
