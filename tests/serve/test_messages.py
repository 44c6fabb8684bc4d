"""The Anthropic Messages API on ``nonoka serve``, through the official ``anthropic``
client, with the strict scripted Anthropic endpoint behind an ``anthropic:`` model:
answers whole and streamed, a tool loop with thinking whose signatures reach the
endpoint unchanged, images in tool results, PDFs, count_tokens, upstream errors as
Anthropic gives them, Claude Code's session ids, and the sessions it leaves."""

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

from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing.anthropic_replies import AnthropicReply, Thinking, error_body
from nonoka.testing.server import ScriptedAnthropicServer
from nonoka.testing.steps import HttpError
from tests.serve.harness import Served, served_with, sse

MODEL = "anthropic:claude-scripted"
UPSTREAM_KEY = "sk-ant-upstream-key-that-never-leaves-0123"
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
WEATHER: Any = {"name": "get_weather", "description": "The weather",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%scripted\n").decode()


@pytest.fixture
def anthropic_script() -> list[Any]:
    return []


@pytest.fixture
def upstream(anthropic_script: list[Any]) -> Iterator[ScriptedAnthropicServer]:
    def next_step(body: dict[str, Any]) -> Any:
        assert anthropic_script, "the endpoint was called more often than scripted"
        return anthropic_script.pop(0)

    with ScriptedAnthropicServer(next_step, strict=("anthropic_thinking",)) as running:
        yield running


@pytest.fixture
def served(project: Path, upstream: ScriptedAnthropicServer,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    env = {"ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": UPSTREAM_KEY,
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


def test_an_answer_whole_and_streamed(claude: Anthropic, anthropic_script: list[Any],
                                      upstream: ScriptedAnthropicServer) -> None:
    anthropic_script += [AnthropicReply(text="Hello, Ann."),
                         AnthropicReply(text="You are Ann, still.")]
    history: list[Any] = [{"role": "user", "content": "I am Ann."}]
    first = claude.messages.create(model="claude-sonnet-4-5", max_tokens=256,
                                   system="Be brief.", messages=history)
    assert first.type == "message" and first.role == "assistant"
    assert first.model == "claude-sonnet-4-5"
    assert [b.type for b in first.content] == ["text"]
    assert first.content[0].text == "Hello, Ann."  # type: ignore[union-attr]
    assert first.stop_reason == "end_turn" and first.usage.output_tokens > 0
    history += [{"role": "assistant", "content": "Hello, Ann."},
                {"role": "user", "content": "Who am I?"}]
    beta = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=256, extra_headers=beta,
                                system="Be brief.", messages=history) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == "You are Ann, still."  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    sent = upstream.requests[1]
    assert sent["model"] == "claude-sonnet-4-5"  # a model nonoka knows: as asked
    assert sent["system"][0]["text"] == "Be brief."
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert upstream.headers[1]["x-api-key"] == UPSTREAM_KEY
    assert upstream.headers[1]["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert "anthropic-beta" not in upstream.headers[0]
    marks = json.dumps(sent).count('"cache_control"')
    assert 1 <= marks <= 4  # the breakpoints, at most the API's four


def test_the_raw_event_order(served: Served, anthropic_script: list[Any]) -> None:
    anthropic_script.append(AnthropicReply(text="Sunny.",
                                           thinking=(Thinking("Look it up. " * 40),)))
    events = sse(served.port, "/v1/messages", {
        "model": "claude-x", "max_tokens": 2048, "stream": True, "thinking": THINKING,
        "messages": [{"role": "user", "content": "Weather?"}]},
        {"anthropic-version": "2023-06-01", "x-api-key": "client-key"})
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas[:2] == ["thinking_delta", "signature_delta"]
    first_block = kinds.index("content_block_start")
    assert kinds[:first_block].count("ping") > 1  # while the thinking was held
    thought = next(e for e in events if e["type"] == "content_block_delta")
    assert thought["delta"]["thinking"] == "Look it up. " * 40


def test_a_tool_loop_with_thinking(claude: Anthropic, anthropic_script: list[Any],
                                   upstream: ScriptedAnthropicServer, project: Path) -> None:
    from nonoka.testing import call

    anthropic_script += [
        AnthropicReply(thinking=(Thinking("Paris first."),),
                       tool_calls=call("get_weather", {"city": "Paris"}).tool_calls),
        AnthropicReply(thinking=(Thinking("", redacted_data="UkVEQUNURUQ="),),
                       tool_calls=call("get_weather", {"city": "Rome"}).tool_calls),
        AnthropicReply(text="Paris sunny, Rome rainy.", thinking=(Thinking("Both."),))]
    history: list[Any] = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    for step in range(3):
        with claude.messages.stream(model="claude-x", max_tokens=2048, thinking=THINKING,
                                    tools=[WEATHER], messages=history) as stream:
            answer = stream.get_final_message()
        if step < 2:
            assert answer.stop_reason == "tool_use"
            use = next(b for b in answer.content if b.type == "tool_use")
            history += [{"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in answer.content]},
                        {"role": "user", "content": [{"type": "tool_result",
                                                      "tool_use_id": use.id,
                                                      "content": f"weather {step}"}]}]
    assert answer.content[-1].text == "Paris sunny, Rome rainy."  # type: ignore[union-attr]
    assert upstream.rejections == [] and len(upstream.requests) == 3
    assert {r["model"] for r in upstream.requests} == {"claude-scripted"}  # the server's
    last = upstream.requests[2]["messages"]
    kinds = [[b["type"] for b in m["content"]] for m in last if m["role"] == "assistant"]
    assert kinds == [["thinking", "tool_use"], ["redacted_thinking", "tool_use"]]
    sent = [b for m in last if m["role"] == "assistant" for b in m["content"]]
    assert sent[0]["signature"] == history[1]["content"][0]["signature"]
    assert sent[2]["data"] == "UkVEQUNURUQ="
    assert len(records(project)) == 1


def test_an_image_in_a_tool_result_and_a_pdf(claude: Anthropic, anthropic_script: list[Any],
                                             upstream: ScriptedAnthropicServer) -> None:
    from nonoka.testing import call

    anthropic_script += [AnthropicReply(tool_calls=call("look", {}).tool_calls),
                         AnthropicReply(text="A square and a memo.")]
    look: Any = {"name": "look", "input_schema": {"type": "object"}}
    history: list[Any] = [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": PDF}},
        {"type": "text", "text": "Read this, then look."}]}]
    first = claude.messages.create(model="claude-x", max_tokens=256, tools=[look],
                                   messages=history)
    use = first.content[-1]
    assert use.type == "tool_use"
    history += [{"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": [
                                                  {"type": "text", "text": "a picture"},
                                                  {"type": "image", "source": {
                                                      "type": "base64",
                                                      "media_type": "image/png",
                                                      "data": PNG}}]}]}]
    final = claude.messages.create(model="claude-x", max_tokens=256, tools=[look],
                                   messages=history)
    assert final.content[0].text == "A square and a memo."  # type: ignore[union-attr]
    first_sent = upstream.requests[0]["messages"][0]["content"]
    assert first_sent[0]["type"] == "document"
    assert first_sent[0]["source"]["data"] == PDF
    result = upstream.requests[1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == use.id
    image = next(b for b in result["content"] if b["type"] == "image")
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": PNG}


def test_a_key_as_x_api_key(project: Path, upstream: ScriptedAnthropicServer,
                            anthropic_script: list[Any],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", UPSTREAM_KEY)
    monkeypatch.setenv("NONOKA_DATABASE_URL", "")
    anthropic_script.append(AnthropicReply(text="Keyed."))
    running = Served(project, MODEL, key="the-server-key")
    try:
        base = running.url.removesuffix("/v1")
        with Anthropic(base_url=base, api_key="wrong", max_retries=0) as wrong, \
                pytest.raises(anthropic.AuthenticationError) as refused:
            wrong.messages.create(model="claude-x", max_tokens=64,
                                  messages=[{"role": "user", "content": "Hi"}])
        assert refused.value.body == {"type": "error", "error": {
            "type": "authentication_error",
            "message": "invalid x-api-key: send a key of nonoka serve"}}
        with Anthropic(base_url=base, api_key="the-server-key", max_retries=0) as right:
            answer = right.messages.create(model="claude-x", max_tokens=64,
                                           messages=[{"role": "user", "content": "Hi"}])
        assert answer.content[0].text == "Keyed."  # type: ignore[union-attr]
    finally:
        running.stop()


def test_count_tokens_and_models(claude: Anthropic, served: Served) -> None:
    counted = claude.messages.count_tokens(
        model="claude-x", messages=[{"role": "user", "content": "Count these words please."}])
    assert counted.input_tokens > 0
    listed = claude.models.list()
    assert [m.id for m in listed.data] == [MODEL]
    assert listed.data[0].type == "model"
    status, _, raw = served.request("GET", "/v1/models", None,
                                    {"Authorization": "Bearer client-key"})
    assert status == 200 and json.loads(raw)["object"] == "list"  # OpenAI's shape


def test_an_overloaded_upstream_is_a_529(claude: Anthropic, anthropic_script: list[Any],
                                         upstream: ScriptedAnthropicServer) -> None:
    overloaded = error_body("overloaded_error", "Overloaded")
    anthropic_script.append(HttpError(529, overloaded, retry_after=3))
    with pytest.raises(anthropic.InternalServerError) as caught:
        claude.messages.create(model="claude-x", max_tokens=64,
                               messages=[{"role": "user", "content": "Hi"}])
    assert caught.value.status_code == 529
    assert caught.value.body == {"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "Overloaded"}}
    assert caught.value.response.headers["retry-after"] == "3"
    assert len(upstream.requests) == 1  # the client retries, not nonoka
    upstream.assert_done()


def test_rate_limit_and_context_overflow_pass_through(
        claude: Anthropic, anthropic_script: list[Any]) -> None:
    from nonoka.testing.anthropic_replies import anthropic_rate_limited

    too_long = "prompt is too long: 210000 tokens > 200000 maximum"
    anthropic_script += [anthropic_rate_limited(retry_after=2),
                         HttpError(400, error_body("invalid_request_error", too_long))]
    ask: list[Any] = [{"role": "user", "content": "Hi"}]
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="claude-x", max_tokens=64, messages=ask)
    assert limited.value.response.headers["retry-after"] == "2"
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as overflow:
        claude.messages.create(model="claude-x", max_tokens=64, messages=ask)
    assert overflow.value.body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": too_long}}


def test_an_error_mid_stream_is_anthropics_error_event(
        served: Served, anthropic_script: list[Any]) -> None:
    from nonoka.testing.anthropic_replies import StreamError

    anthropic_script.append(StreamError(partial_text="Half an answ"))
    events = sse(served.port, "/v1/messages?beta=true", {
        "model": "claude-x", "max_tokens": 64, "stream": True,
        "messages": [{"role": "user", "content": "Go."}]},
        {"anthropic-version": "2023-06-01", "x-api-key": "client-key"})
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-1] == "error"
    assert events[-1]["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert "message_stop" not in kinds


def test_an_invalid_request_is_anthropics_400(served: Served) -> None:
    status, _, raw = served.request("POST", "/v1/messages", {
        "model": "claude-x", "messages": [{"role": "user", "content": "Hi"}]},
        {"x-api-key": "client-key"})
    assert status == 400
    assert json.loads(raw)["error"]["type"] == "invalid_request_error"
    assert json.loads(raw)["type"] == "error"


def test_two_claude_code_sessions_stay_apart(claude: Anthropic, anthropic_script: list[Any],
                                             project: Path) -> None:
    from tests.support.processes import run_nonoka

    anthropic_script += [AnthropicReply(text=f"answer {n}") for n in range(4)]
    same: list[Any] = [{"role": "user", "content": "Fix the bug."}]
    ids = ["11111111-aaaa-4aaa-8aaa-111111111111", "22222222-bbbb-4bbb-8bbb-222222222222"]
    for n, session in enumerate(ids):
        claude.messages.create(model="claude-x", max_tokens=64, messages=same,
                               extra_headers={"x-claude-code-session-id": session})
        user_id = json.dumps({"device_id": "d", "session_id": session})
        claude.messages.create(
            model="claude-x", max_tokens=64, metadata={"user_id": user_id},
            messages=[*same, {"role": "assistant", "content": f"answer {2 * n}"},
                      {"role": "user", "content": "And now?"}])
    found = records(project)
    assert len(found) == 2
    env = {**os.environ, "NONOKA_DATABASE_URL": ""}
    listed = run_nonoka(project, "sessions", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert all(r.session_id in listed.stdout for r in found)


def test_one_claude_session_id_under_two_owners_is_two_lines(
        project: Path, upstream: ScriptedAnthropicServer, anthropic_script: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.serve.test_keys import make_key

    monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", UPSTREAM_KEY)
    monkeypatch.setenv("NONOKA_DATABASE_URL", "")
    keys = [make_key(project, "alice"), make_key(project, "bob")]
    anthropic_script += [AnthropicReply(text=f"answer {n}") for n in range(4)]
    running = Served(project, MODEL, keys=True)
    session = {"x-claude-code-session-id": "33333333-cccc-4ccc-8ccc-333333333333"}
    try:
        base = running.url.removesuffix("/v1")
        for n, key in enumerate(keys):
            with Anthropic(base_url=base, api_key=key, max_retries=0) as client:
                history: list[Any] = [{"role": "user", "content": "Same words."}]
                first = client.messages.create(model="claude-x", max_tokens=64,
                                               messages=history, extra_headers=session)
                assert first.content[0].text == f"answer {2 * n}"  # type: ignore[union-attr]
                history += [{"role": "assistant", "content": f"answer {2 * n}"},
                            {"role": "user", "content": "More."}]
                client.messages.create(model="claude-x", max_tokens=64, messages=history,
                                       extra_headers=session)
    finally:
        running.stop()
    assert len(records(project)) == 2
    sent = upstream.requests[3]["messages"]
    assert "answer 0" not in json.dumps(sent) and "answer 2" in json.dumps(sent)


def test_the_sdks_retry_after_a_529_stores_one_turn(
        served: Served, anthropic_script: list[Any], upstream: ScriptedAnthropicServer,
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Anthropic, "_calculate_retry_timeout", lambda *_a, **_k: 0.0)
    anthropic_script += [HttpError(529, error_body("overloaded_error", "Overloaded"),
                                   retry_after=0), AnthropicReply(text="Made it.")]
    with Anthropic(base_url=served.url.removesuffix("/v1"), api_key="k",
                   max_retries=1) as retrying:
        answer = retrying.messages.create(model="claude-x", max_tokens=64,
                                          messages=[{"role": "user", "content": "Try."}])
    assert answer.content[0].text == "Made it."  # type: ignore[union-attr]
    assert len(upstream.requests) == 2
    [record] = records(project)

    async def entries() -> list[Any]:
        async with open_project_stores(project) as stores:
            state = await stores.checkpoints.load_session(record.session_id)
            return list(state.memory_entries) if state else []
    kept = asyncio.run(entries())
    assert [e.role for e in kept] == ["user", "assistant"]


def test_a_failed_tool_call_reaches_anthropic_as_is_error(
        claude: Anthropic, anthropic_script: list[Any], upstream: ScriptedAnthropicServer,
        project: Path) -> None:
    from nonoka.testing import call

    anthropic_script += [
        AnthropicReply(tool_calls=call("get_weather", {"city": "Oslo"}).tool_calls),
        AnthropicReply(text="The weather service failed."),
        AnthropicReply(text="Still failed.")]
    history: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    answer = claude.messages.create(model="claude-x", max_tokens=256, tools=[WEATHER],
                                    messages=history)
    use = next(b for b in answer.content if b.type == "tool_use")
    history += [{"role": "assistant",
                 "content": [b.model_dump(exclude_none=True) for b in answer.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": "timeout", "is_error": True}]}]
    claude.messages.create(model="claude-x", max_tokens=256, tools=[WEATHER],
                           messages=history)  # the result of the session's pending call
    result = upstream.requests[1]["messages"][-1]["content"][0]
    assert result["is_error"] is True and result["content"] == "timeout"
    # the same history as a new conversation (another session id): seeded, not a result
    claude.messages.create(model="claude-x", max_tokens=256, tools=[WEATHER],
                           messages=[*history, {"role": "assistant", "content": "Failed."},
                                     {"role": "user", "content": "Try again?"}],
                           extra_headers={"x-claude-code-session-id": "other-session"})
    seeded = [b for m in upstream.requests[2]["messages"] if isinstance(m["content"], list)
              for b in m["content"] if b["type"] == "tool_result"]
    assert [b.get("is_error") for b in seeded] == [True]
    assert not upstream.rejections


def test_stop_sequence_and_pause_turn_are_carried(
        claude: Anthropic, anthropic_script: list[Any], served: Served) -> None:
    anthropic_script += [
        AnthropicReply(text="one, two", stop_reason="stop_sequence", stop_sequence="three"),
        AnthropicReply(text="one, two", stop_reason="stop_sequence", stop_sequence="three"),
        AnthropicReply(text="Searching...", stop_reason="pause_turn")]
    ask: Any = {"model": "claude-x", "max_tokens": 64, "stop_sequences": ["three"],
                "messages": [{"role": "user", "content": "Count."}]}
    whole = claude.messages.create(**ask)
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", "three")
    events = sse(served.port, "/v1/messages", {**ask, "stream": True},
                 {"anthropic-version": "2023-06-01", "x-api-key": "client-key",
                  "x-claude-code-session-id": "streamed"})
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "three"}
    paused = claude.messages.create(model="claude-x", max_tokens=64,
                                    messages=[{"role": "user", "content": "Search."}])
    assert (paused.stop_reason, paused.stop_sequence) == ("pause_turn", None)


def test_claude_codes_side_requests_are_not_sessions_of_its_line(
        served: Served, anthropic_script: list[Any], upstream: ScriptedAnthropicServer,
        project: Path) -> None:
    anthropic_script += [AnthropicReply(text="Noted."), AnthropicReply(text="Fruit talk"),
                         AnthropicReply(text="Noted again.")]
    session = "44444444-dddd-4ddd-8ddd-444444444444"
    headers = {"anthropic-version": "2023-06-01", "x-api-key": "client-key",
               "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
               "x-claude-code-session-id": session}
    history: list[Any] = [{"role": "user", "content": "Remember papaya."}]
    main = {"model": "claude-x", "max_tokens": 64, "tools": [WEATHER]}
    assert served.request("POST", "/v1/messages", {**main, "messages": history},
                          headers)[0] == 200
    status, _, raw = served.request("POST", "/v1/messages", {
        "model": "claude-haiku-4-5", "max_tokens": 64,
        "system": "Generate a title for this conversation.",
        "messages": [{"role": "user", "content": "Remember papaya."}]}, headers)
    assert status == 200 and json.loads(raw)["content"][0]["text"] == "Fruit talk"
    history += [{"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "And kiwi."}]
    assert served.request("POST", "/v1/messages", {**main, "messages": history},
                          headers)[0] == 200
    rows = records(project)
    assert [(r.purpose, r.host_session_id, r.turn_count) for r in rows] == [
        ("chat", f"claude-code:{session}", 2)]
    every = asyncio.run(_every_record(project))
    assert sorted(r.purpose for r in every) == ["chat", "title"]
    assert not upstream.rejections


async def _every_record(project: Path) -> list[SessionRecord]:
    async with open_project_stores(project) as stores:
        return await stores.index.list_sessions(limit=100, purpose=None)


def test_claude_codes_compaction_texts() -> None:
    from nonoka.serve.claude_code import continued_parts, shown_summary

    answer = "<analysis>\nthinking\n</analysis>\n\n<summary>\n1. Asked: papaya.\n\n\n" \
             "2. Left: none.\n</summary>"
    assert shown_summary(answer) == "Summary:\n1. Asked: papaya.\n\n2. Left: none."
    assert shown_summary("No tags, the whole answer. ") == "No tags, the whole answer."
    opened = ("This session is being continued from a previous conversation that ran out "
              "of context. The summary below covers the earlier portion of the "
              "conversation.\n\n<system-reminder>\n<tools-used-before-summary>Bash"
              "</tools-used-before-summary>\n</system-reminder>\n")
    note = "\n\nIf you need specific details from before compaction, read ...\n"
    text = opened + "Summary:\n1. Asked: papaya." + note
    assert continued_parts(text) == [opened, "Summary:\n1. Asked: papaya.", note]
    assert continued_parts("Remember papaya.") is None
    plain = opened.split("<system-reminder>")[0] + "Summary:\nx"
    assert continued_parts(plain) == [plain[:-len("Summary:\nx")], "Summary:\nx", ""]


def test_claude_codes_session_and_agent_ids_go_to_anthropic_only() -> None:
    from nonoka.llm.host_headers import forwarded

    sent = {"x-claude-code-session-id": "s-1", "x-claude-code-agent-id": "a-1",
            "x-api-key": "client-key", "x-stainless-os": "Linux",
            "user-agent": "claude-cli/2.1.332 (external, sdk-cli)"}
    to_anthropic = forwarded(sent, "anthropic")
    assert to_anthropic["x-claude-code-session-id"] == "s-1"
    assert to_anthropic["x-claude-code-agent-id"] == "a-1"
    assert "x-api-key" not in to_anthropic and "x-stainless-os" not in to_anthropic
    assert not {"x-claude-code-session-id", "x-claude-code-agent-id"} & set(
        forwarded(sent, "openai"))
