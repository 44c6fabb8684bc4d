"""Chat Completions through the official ``openai`` client: a stateless client's
resent history lands on one session line (continued, branched where it parts), its own
conversation name decides first, tools loop, streams end with ``[DONE]``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from openai import OpenAI, Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing import call, text
from nonoka.testing.replies import Reply
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.harness import Served, sse

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def records(project: Path) -> list[SessionRecord]:
    async def read() -> list[SessionRecord]:
        async with open_project_stores(project) as stores:
            return await stores.index.list_sessions(limit=100)
    return asyncio.run(read())


def complete(client: OpenAI, messages: list[Any], **options: Any) -> ChatCompletion:
    return cast(ChatCompletion, client.chat.completions.create(
        model="m", messages=messages, **options))


def streamed(client: OpenAI, messages: list[Any], **options: Any) -> list[ChatCompletionChunk]:
    return list(cast(Stream[ChatCompletionChunk], client.chat.completions.create(
        model="m", messages=messages, stream=True, **options)))


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def test_a_resent_history_continues_one_session(client: OpenAI, scripted: list[Any],
                                                server: ScriptedOpenAIServer,
                                                project: Path) -> None:
    scripted += [text("Hi Ann."), text("You are Ann.")]
    history: list[Any] = [{"role": "system", "content": "Be brief."}, user("I am Ann.")]
    first = complete(client, history)
    assert first.choices[0].message.content == "Hi Ann."
    assert first.choices[0].finish_reason == "stop"
    history += [assistant("Hi Ann."), user("Who am I?")]
    second = complete(client, history)
    assert second.choices[0].message.content == "You are Ann."
    assert server.requests[1]["messages"] == history
    [record] = records(project)
    assert record.message_count == 5 and record.turn_count == 2


def test_an_edited_history_branches(client: OpenAI, scripted: list[Any],
                                    project: Path) -> None:
    scripted += [text("Hello."), text("Paris."), text("Lyon.")]
    history = [user("Hello"), assistant("Hello.")]
    complete(client, history[:1])
    complete(client, [*history, user("Capital of France?")])
    complete(client, [*history, user("Largest city of the Rhone?")])  # an edited question
    rows = records(project)
    assert len(rows) == 2
    [branch] = [r for r in rows if r.metadata.get("forked_from")]
    assert branch.metadata["fork_point"] == 2


def test_the_client_names_its_conversations(client: OpenAI, scripted: list[Any],
                                            server: ScriptedOpenAIServer,
                                            project: Path) -> None:
    scripted += [text("one"), text("two"), text("three")]
    for name in ("chat-a", "chat-b"):  # the same first message, two conversations
        complete(client, [user("hi")], extra_headers={"x-nonoka-session": name})
    complete(client, [user("hi"), assistant("two"), user("more")],
             extra_headers={"x-nonoka-session": "chat-b"})
    rows = {r.host_session_id: r for r in records(project)}
    assert set(rows) == {"x-nonoka-session:chat-a", "x-nonoka-session:chat-b"}
    assert rows["x-nonoka-session:chat-a"].message_count == 2
    assert rows["x-nonoka-session:chat-b"].message_count == 4
    assert server.requests[2]["messages"] == [user("hi"), assistant("two"), user("more")]


def test_prompt_cache_key_names_a_conversation(client: OpenAI, scripted: list[Any],
                                               project: Path) -> None:
    scripted += [text("one"), text("two")]
    for key in ("k1", "k2"):
        complete(client, [user("same")], prompt_cache_key=key)
    assert {r.host_session_id for r in records(project)} == {"prompt_cache_key:k1",
                                                              "prompt_cache_key:k2"}


def test_a_three_step_tool_loop(client: OpenAI, scripted: list[Any],
                                server: ScriptedOpenAIServer, project: Path) -> None:
    scripted += [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Lyon"}),
                 text("Paris 20, Lyon 22.")]
    messages: list[Any] = [user("Weather in Paris and Lyon?")]
    for temperature in ("20", "22"):
        answer = complete(client, messages, tools=[WEATHER])
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        [tool_call] = choice.message.tool_calls or []
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tool_call.id, "content": temperature}]
    final = complete(client, messages, tools=[WEATHER])
    assert final.choices[0].message.content == "Paris 20, Lyon 22."
    assert [m["role"] for m in server.requests[-1]["messages"]] == [
        "user", "assistant", "tool", "assistant", "tool"]
    [record] = records(project)
    assert record.message_count == 6


def test_streamed(client: OpenAI, scripted: list[Any], served: Served) -> None:
    scripted += [text("streamed words"), text("with usage"), text("raw")]
    chunks = streamed(client, [user("go")])
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "streamed words"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    with_usage = streamed(client, [user("go on")], stream_options={"include_usage": True})
    assert with_usage[-1].choices == [] and with_usage[-1].usage is not None
    assert with_usage[-1].usage.completion_tokens > 0
    events = sse(served.port, "/v1/chat/completions",
                 {"model": "m", "messages": [user("raw")], "stream": True})
    assert events[-1] == {"type": "[DONE]"}
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_streamed_tool_calls(client: OpenAI, scripted: list[Any]) -> None:
    scripted.append(call("get_weather", {"city": "Paris"}))
    chunks = streamed(client, [user("Weather?")], tools=[WEATHER])
    calls = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert [(t.index, t.function.name if t.function else None) for t in calls] == [
        (0, "get_weather")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_the_session_is_named_in_a_header(served: Served, scripted: list[Any],
                                          project: Path) -> None:
    scripted.append(text("hello"))
    status, headers, _ = served.request("POST", "/v1/chat/completions",
                                        {"model": "m", "messages": [user("hi")]})
    assert status == 200
    [record] = records(project)
    assert headers["x-nonoka-session-id"] == record.session_id


def test_a_retried_request_is_answered_from_the_store(client: OpenAI, scripted: list[Any],
                                                      server: ScriptedOpenAIServer,
                                                      project: Path) -> None:
    scripted += [text("Sure."), text("Only once.")]
    history = [user("Answer once"), assistant("Sure."), user("Now?")]
    complete(client, history[:1])
    answers = [complete(client, history).choices[0].message.content for _ in range(2)]
    assert answers == ["Only once.", "Only once."]
    assert len(server.requests) == 2  # the retry was not sent to the model
    [record] = records(project)
    assert record.message_count == 4


def test_an_answer_the_model_cut_says_so(client: OpenAI, scripted: list[Any]) -> None:
    scripted += [Reply(text="Once upon a", finish_reason="length"),
                 Reply(text="Once upon", finish_reason="length"),
                 Reply(text="", finish_reason="content_filter")]
    cut = complete(client, [user("a story")], max_tokens=3)
    assert cut.choices[0].message.content == "Once upon a"
    assert cut.choices[0].finish_reason == "length"
    chunks = streamed(client, [user("another story")], max_tokens=2)
    assert chunks[-1].choices[0].finish_reason == "length"
    filtered = complete(client, [user("something else")])
    assert filtered.choices[0].finish_reason == "content_filter"
