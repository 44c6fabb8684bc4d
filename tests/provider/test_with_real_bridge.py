"""Smoke tests: ``NonokaProvider`` driving the real ``nonoka bridge`` end to end.

Each call spawns ``python -m nonoka bridge``; the model is a local scripted
OpenAI-compatible server, so everything but the model is the real thing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from nonoka.cli.render import describe_event
from nonoka.cli.sessions_cmd import show_session
from nonoka.protocol.models import RequestLimits
from nonoka.provider import MessageLike, NonokaProvider, id_file_path
from nonoka.state.messages import Message
from nonoka.testing import call, text
from nonoka.testing.server import Delay, ScriptedOpenAIServer, Step
from tests.support.processes import model_env

READ_TOOL = {"name": "read", "description": "Read a file",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                            "required": ["path"]}}


Serve = Callable[[Sequence[Step]], ScriptedOpenAIServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start a scripted model server; at teardown it is closed and must have used its script."""
    servers: list[ScriptedOpenAIServer] = []

    def start(script: Sequence[Step]) -> ScriptedOpenAIServer:
        servers.append(ScriptedOpenAIServer(script).start())
        return servers[-1]

    yield start
    for server in servers:
        server.close()
    for server in servers:
        server.assert_done()


@pytest.fixture
def workspace(project: Path) -> Path:
    """The shared empty ``project`` directory, under the name the provider uses for it."""
    return project


def make_provider(workspace: Path, server: ScriptedOpenAIServer, *,
                  cancel_grace: float = 5.0) -> NonokaProvider:
    return NonokaProvider(workspace, env=model_env(server.base_url, api_key="test"), timeout=60,
                          cancel_grace=cancel_grace)


async def test_a_conversation_continues_across_processes_and_providers(
        workspace: Path, serve: Serve) -> None:
    server = serve([text("Hello there!"), text("Still me.")])
    first = make_provider(workspace, server)
    history: list[MessageLike] = [Message(role="user", content="Say hi")]
    result = await first.chat(history)
    assert result.finish_reason == "stop", result.errors
    assert result.text == "Hello there!"
    assert result.session_id is not None and not result.recovered
    assert first.session_id == result.session_id
    assert id_file_path(workspace).read_text().strip() == result.session_id

    history += [result.assistant_message(), Message(role="user", content="Again?")]
    second = make_provider(workspace, server)  # the host restarted: only the file remains
    again = await second.chat(history)
    assert again.finish_reason == "stop", again.errors
    assert again.text == "Still me."
    assert again.session_id == result.session_id
    sent = [m["content"] for m in server.requests[1]["messages"] if m["role"] != "system"]
    assert sent == ["Say hi", "Hello there!", "Again?"]


async def test_a_host_tool_round_trip(
        workspace: Path, serve: Serve) -> None:
    server = serve([call("read", {"path": "README.md"}, id="call_1"),
                    text("README.md introduces nonoka.")])
    provider = make_provider(workspace, server)
    history: list[MessageLike] = [Message(role="user", content="What is in README.md?")]
    paused = await provider.chat(history, tools=[READ_TOOL])
    assert paused.finish_reason == "tool_calls", paused.errors
    assert [(c.tool_name, c.executed_by) for c in paused.host_tool_calls] == [("read", "host")]

    history += [paused.assistant_message(),
                Message(role="tool", content="# nonoka\nAn agent runtime.",
                        tool_call_id=paused.host_tool_calls[0].tool_call_id)]
    done = await provider.chat(history, tools=[READ_TOOL])
    assert done.finish_reason == "stop", done.errors
    assert done.text == "README.md introduces nonoka."
    assert done.session_id == paused.session_id
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["# nonoka\nAn agent runtime."]


async def test_titles_stay_apart_and_a_lost_id_file_is_recovered(
        workspace: Path, serve: Serve) -> None:
    server = serve([text("Hi!"), text("A greeting"), text("Recovered.")])
    provider = make_provider(workspace, server)
    chat = await provider.chat([Message(role="user", content="hi there")])
    title = await provider.chat([Message(role="user", content="hi there")], purpose="title")
    assert title.finish_reason == "stop", title.errors
    assert title.session_id not in (None, chat.session_id)
    assert provider.session_id == chat.session_id
    assert id_file_path(workspace).read_text().strip() == chat.session_id

    id_file_path(workspace).unlink()
    restarted = make_provider(workspace, server)
    assert restarted.session_id is None
    history: list[MessageLike] = [Message(role="user", content="hi there"),
                                  chat.assistant_message(),
                                  Message(role="user", content="and now?")]
    recovered = await restarted.chat(history)
    assert recovered.finish_reason == "stop", recovered.errors
    assert recovered.recovered and recovered.recovery_reason == "session_id_missing"
    assert recovered.session_id == chat.session_id
    assert restarted.session_id == chat.session_id


async def test_cancel_stops_the_real_bridge(
        workspace: Path, serve: Serve) -> None:
    server = serve([Delay(30, "too late")])
    provider = make_provider(workspace, server, cancel_grace=10)
    task = asyncio.create_task(provider.chat([Message(role="user", content="take your time")]))
    for _ in range(1000):
        if server.requests:  # the bridge is waiting for the model
            break
        await asyncio.sleep(0.01)
    await provider.cancel()
    result = await task
    assert result.finish_reason == "cancelled"
    assert not result.killed
    assert result.exit_code == 0
    assert provider.session_id == result.session_id is not None


async def test_a_limit_names_itself_and_a_raised_limit_continues_the_session(
        workspace: Path, serve: Serve) -> None:

    server = serve([text("one"), text("two")])
    provider = make_provider(workspace, server)
    history: list[MessageLike] = [Message(role="user", content="first")]
    first = await provider.chat(history)
    assert first.finish_reason == "stop", first.errors
    assert first.session_id is not None

    # The session has spent one model turn; a limit of one stops the next turn before it
    # calls the model: limits count across the session, not per message.
    provider.limits = RequestLimits(max_model_turns=1)
    history += [first.assistant_message(), Message(role="user", content="second")]
    stopped = await provider.chat(history)
    assert stopped.finish_reason == "limit"
    assert stopped.session_id == first.session_id
    assert stopped.termination is not None and stopped.termination.limit == "max_model_turns"
    assert len(server.requests) == 1

    detail = await show_session(workspace, first.session_id)
    finishes = [describe_event(e)[1] for e in detail.events if e.kind == "finish"]
    assert "stopped by max_model_turns: max_model_turns reached: 1 of 1" in finishes[-1]

    # Raised: the same session goes on, with what it has spent so far.
    provider.limits = RequestLimits(max_model_turns=5)
    again = await provider.chat(history)
    assert again.finish_reason == "stop", again.errors
    assert again.text == "two"
    assert again.session_id == first.session_id


async def test_a_database_that_went_back_in_time_is_reported(
        workspace: Path, serve: Serve) -> None:
    import shutil

    server = serve([text("one"), text("two"), text("three")])
    provider = make_provider(workspace, server)
    history: list[MessageLike] = [Message(role="user", content="first")]
    first = await provider.chat(history)
    db = workspace / ".nonoka" / "sessions.db"
    backup = workspace / "backup.db"
    shutil.copy(db, backup)  # what a host's snapshot of the project held after turn one
    history += [first.assistant_message(), Message(role="user", content="second")]
    second = await provider.chat(history)
    assert second.warnings == [], second.warnings
    for suffix in ("-wal", "-shm"):
        (workspace / ".nonoka" / f"sessions.db{suffix}").unlink(missing_ok=True)
    shutil.copy(backup, db)  # ...restored by the host's undo
    history += [second.assistant_message(), Message(role="user", content="third")]
    third = await provider.chat(history)
    assert third.finish_reason == "stop", third.errors
    codes = [w.code for w in third.warnings]
    assert "store_regressed" in codes, third.warnings
    detail = await show_session(workspace, first.session_id or "")
    warned = [e.data for e in detail.events if e.kind == "warning"]
    assert any(w["code"] == "store_regressed" for w in warned), warned
