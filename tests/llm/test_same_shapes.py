"""Same shapes as the host's own providers (issue 34, item 6), through the ``Runner`` and
the real adapters against the scripted servers over real HTTP:

- an image a tool returned goes to Anthropic *inside* its ``tool_result``, where the
  Messages API takes it and where OpenCode's own Anthropic provider puts it, although
  OpenCode hands it to nonoka in a user message after the results ("Attached media from
  tool result:"), as it does for any provider it does not know;
- a model behind the generic ``openai:`` prefix that streams its reasoning
  (``reasoning_content``, ``reasoning``, or OpenRouter's ``reasoning_details``) gets it
  back in a tool loop, in the field it came in; an endpoint known to refuse it does not.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonoka import Agent, Message, Runner, host_tool, tool
from nonoka.llm import resolve_model, wire
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.wire import refuses_reasoning
from nonoka.state.messages import FilePart, TextPart, ToolCall
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing import call, text
from nonoka.testing.replies import reasoning_details
from nonoka.testing.server import (
    AnthropicReply,
    Reply,
    ScriptedAnthropicServer,
    ScriptedOpenAIServer,
    Step,
)
from tests.llm.test_anthropic_fidelity import assert_valid_request

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(40))).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(range(24))).decode()
NOTE = "Attached media from tool result:"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    yield store
    await store.close()


@tool(idempotent=True)
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


READ = host_tool("read", "read a file", {"type": "object",
                                         "properties": {"path": {"type": "string"}}})


def _image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": data}}


def _opencode_history(*calls: tuple[str, str]) -> list[Message]:
    """What OpenCode sends after its ``read`` tool read images: the call(s), each tool
    result's text, then the images in a user message of their own."""
    tool_calls = [ToolCall(id=i, name="read", arguments=f'{{"path": "{p}"}}') for i, p in calls]
    return [Message(role="user", content="What is in the picture?"),
            Message(role="assistant", content="", tool_calls=tool_calls),
            *(Message(role="tool", tool_call_id=i, content="Image read successfully")
              for i, _ in calls)]


def _media_message(*images: tuple[str, str]) -> Message:
    return Message(role="user", content=NOTE, parts=[
        TextPart(text=NOTE), *(FilePart(media_type=m, data=d) for d, m in images)])


async def test_a_tool_image_the_host_moved_out_goes_back_inside_its_tool_result(
        store: SQLiteCheckpointStore) -> None:
    with ScriptedAnthropicServer([AnthropicReply(text="A chart.")]) as server:
        model = AnthropicChatModel("claude-test", base_url=server.base_url, api_key="sk-test",
                                   max_retries=0)
        result = await Runner(store).run_react(
            Agent(model=model, tools=[READ]), _media_message((PNG, "image/png")),
            history=_opencode_history(("toolu_r", "chart.png")))
        body = assert_valid_request(server.bodies[0])
    assert result.success, result.error
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [{
        "type": "tool_result", "tool_use_id": "toolu_r",
        "content": [{"type": "text", "text": "Image read successfully"}, _image(PNG)],
        "cache_control": {"type": "ephemeral"}}]


async def test_with_several_results_the_media_message_stays_as_the_host_sent_it(
        store: SQLiteCheckpointStore) -> None:
    """Two results, two images: which image came from which result is lost on the way
    to nonoka, so none is guessed; the message stays after the results."""
    with ScriptedAnthropicServer([AnthropicReply(text="Two charts.")]) as server:
        model = AnthropicChatModel("claude-test", base_url=server.base_url, api_key="sk-test",
                                   max_retries=0)
        result = await Runner(store).run_react(
            Agent(model=model, tools=[READ]),
            _media_message((PNG, "image/png"), (JPEG, "image/jpeg")),
            history=_opencode_history(("toolu_a", "a.png"), ("toolu_b", "b.jpg")))
        body = assert_valid_request(server.bodies[0])
    assert result.success, result.error
    content = body["messages"][2]["content"]
    assert [b["type"] for b in content] == ["tool_result", "tool_result", "text", "image",
                                            "image"]
    assert content[2]["text"] == NOTE


async def test_a_user_message_that_only_says_the_note_is_left_alone(
        store: SQLiteCheckpointStore) -> None:
    """The note without files is a user's words, not the host's media message."""
    with ScriptedAnthropicServer([AnthropicReply(text="ok")]) as server:
        model = AnthropicChatModel("claude-test", base_url=server.base_url, api_key="sk-test",
                                   max_retries=0)
        result = await Runner(store).run_react(
            Agent(model=model, tools=[READ]), NOTE,
            history=_opencode_history(("toolu_r", "chart.png")))
    assert result.success, result.error
    content = server.requests[0]["messages"][2]["content"]
    assert [b["type"] for b in content] == ["tool_result", "text"]


# reasoning back, in the field it came in ------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "reasoning_details"])
async def test_a_generic_openai_endpoint_gets_its_reasoning_back_in_a_tool_loop(
        store: SQLiteCheckpointStore, field: Any) -> None:
    """vLLM, SGLang, Kimi, GLM (``reasoning_content``), newer vLLM (``reasoning``),
    OpenRouter (``reasoning`` and ``reasoning_details``, signed) behind ``openai:``:
    the strict mode refuses a tool loop that loses the reasoning."""
    script: list[Step] = [
        Reply.of(call("lookup", {"city": "Lyon"}, id="c1"), reasoning="I should look it up.",
                 reasoning_field=field),
        text("Sunny.")]
    with ScriptedOpenAIServer(script, strict=["reasoning_back"]) as server:
        model = OpenAIChatModel("glm-thinking", base_url=server.base_url, api_key="sk-test",
                                max_retries=0)
        result = await Runner(store).run_react(Agent(model=model, tools=[lookup]), "Lyon?")
    assert result.success, result.error
    assert server.rejections == []
    sent = server.requests[1]["messages"][1]
    assert sent["role"] == "assistant" and sent["tool_calls"][0]["id"] == "c1"
    fields = {"reasoning_content", "reasoning", "reasoning_details"} & set(sent)
    if field == "reasoning_details":  # OpenRouter streamed both: both go back
        assert fields == {"reasoning", "reasoning_details"}
        assert sent["reasoning"] == "I should look it up."
        assert sent["reasoning_details"] == reasoning_details("I should look it up.")
    else:
        assert fields == {field}
        assert sent[field] == "I should look it up."


async def test_resolve_model_sends_reasoning_back_for_the_generic_prefix(
        store: SQLiteCheckpointStore, monkeypatch: pytest.MonkeyPatch) -> None:
    script: list[Step] = [
        Reply.of(call("lookup", {"city": "Oslo"}, id="c2"), reasoning="Look it up."),
        text("Cold.")]
    with ScriptedOpenAIServer(script, strict=["reasoning_back"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        model = resolve_model("openai:kimi-k2-thinking")
        result = await Runner(store).run_react(Agent(model=model, tools=[lookup]), "Oslo?")
    assert result.success, result.error
    assert server.requests[1]["messages"][1]["reasoning_content"] == "Look it up."


async def test_an_endpoint_known_to_refuse_reasoning_is_not_sent_it(
        store: SQLiteCheckpointStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cerebras answers 400 to ``reasoning_content`` on an assistant message: the
    documented exception (here the scripted server's address stands in for its host)."""
    assert refuses_reasoning("api.cerebras.ai") and refuses_reasoning("API.Cerebras.ai.")
    assert not refuses_reasoning("127.0.0.1")
    monkeypatch.setattr(wire, "REFUSES_REASONING", frozenset({"127.0.0.1"}))
    script: list[Step] = [
        Reply.of(call("lookup", {"city": "Oslo"}, id="c3"), reasoning="Look it up."),
        text("Cold.")]
    with ScriptedOpenAIServer(script) as server:
        model = OpenAIChatModel("gpt-oss-120b", base_url=server.base_url, api_key="sk-test",
                                max_retries=0)
        result = await Runner(store).run_react(Agent(model=model, tools=[lookup]), "Oslo?")
    assert result.success, result.error
    sent = server.requests[1]["messages"][1]
    assert "reasoning_content" not in sent and sent["tool_calls"][0]["id"] == "c3"
    state = await store.load_session(result.session_id)
    assert state is not None
    assert [r.text for r in state.memory_entries[1].reasoning] == ["Look it up."]  # kept
