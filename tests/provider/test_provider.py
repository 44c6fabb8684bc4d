"""``NonokaProvider`` against a recording test peer (``recording_peer.py``), not a bridge.

The peer records every line the provider sends, so these tests check the request that is
actually sent over the pipe, and it can die, hang or write garbage on demand to exercise
the provider's spawning and error paths. The real bridge is exercised in
``test_with_real_bridge.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nonoka.errors import ConfigurationError
from nonoka.protocol.models import Event, Finish, SessionInit, TextDelta
from nonoka.provider import (
    BridgeError,
    BridgeTimeoutError,
    MessageLike,
    NonokaProvider,
    ProviderResult,
    default_command,
    id_file_path,
    write_session_id,
)
from nonoka.state.messages import Message, ToolCall

PEER = Path(__file__).with_name("recording_peer.py")
USER: list[MessageLike] = [{"role": "user", "content": "What is in README.md?"}]
KEY = hashlib.sha256(b"What is in README.md?").hexdigest()


class Peer:
    """Builds commands for the recording peer and reads back what it received."""

    def __init__(self, tmp_path: Path) -> None:
        self.record = tmp_path / "received.jsonl"
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(PEER), "--record", str(self.record), *args]

    def provider(self, *args: str, **options: Any) -> NonokaProvider:
        return NonokaProvider(self.workspace, command=self.command(*args), **options)

    def received(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def last(self) -> dict[str, Any]:
        return self.received()[-1]

    def id_file(self) -> str | None:
        path = id_file_path(self.workspace)
        return path.read_text() if path.exists() else None


@pytest.fixture
def peer(tmp_path: Path) -> Peer:
    return Peer(tmp_path)


def continuation(first: str = "What is in README.md?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": first}, {"role": "assistant", "content": "Hi"},
            {"role": "user", "content": "more"}]


# -- what a request looks like (docs/protocol.md §7) -----------------------------------


async def test_a_new_conversation_sends_new_session_and_no_id(peer: Peer) -> None:
    provider = peer.provider("--session-id", "s-1", model="openai:test-model",
                             limits={"max_model_turns": 3})
    result = await provider.chat(USER)
    sent = peer.last()
    assert sent["type"] == "chat"
    assert sent["protocol"] == {"version": "1", "required_capabilities": []}
    assert sent["new_session"] is True
    assert "session_id" not in sent
    assert sent["conversation_key"] == KEY
    assert sent["purpose"] == "chat"
    assert sent["cwd"] == str(peer.workspace)
    assert sent["model"] == "openai:test-model"
    assert sent["limits"] == {"max_model_turns": 3}
    assert sent["messages"] == USER
    assert sent["request_id"] == result.request_id
    assert result.session_id == provider.session_id == "s-1"
    assert peer.id_file() == "s-1\n"


async def test_a_continuation_sends_the_held_id(peer: Peer) -> None:
    provider = peer.provider("--session-id", "s-1")
    await provider.chat(USER)
    history = [Message(role="user", content="What is in README.md?"),
               Message(role="assistant", content="It is short."),
               Message(role="user", content="Thanks")]
    await provider.chat(history)
    sent = peer.last()
    assert sent["session_id"] == "s-1"
    assert sent["new_session"] is False
    assert sent["conversation_key"] == KEY


async def test_a_tool_message_makes_a_continuation(peer: Peer) -> None:
    write_session_id(id_file_path(peer.workspace), "from-file")
    provider = peer.provider()
    history: list[MessageLike] = [
        *USER,
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call_1", "name": "read", "arguments": "{}"}]},
        {"role": "tool", "content": "# nonoka", "tool_call_id": "call_1"},
    ]
    await provider.chat(history)
    assert peer.last()["session_id"] == "from-file"
    assert peer.last()["new_session"] is False


async def test_a_new_provider_continues_with_the_id_from_the_file(peer: Peer) -> None:
    await peer.provider("--session-id", "s-1").chat(USER)
    fresh_process = peer.provider()  # as if the host restarted
    assert fresh_process.session_id == "s-1"
    await fresh_process.chat(continuation())
    assert peer.last()["session_id"] == "s-1"


async def test_a_new_conversation_forgets_the_held_id_and_its_file(peer: Peer) -> None:
    write_session_id(id_file_path(peer.workspace), "old-conversation")
    provider = peer.provider("--mode", "exit", "--exit-code", "1")
    with pytest.raises(BridgeError):
        await provider.chat([{"role": "user", "content": "something else"}])
    sent = peer.last()
    assert "session_id" not in sent and sent["new_session"] is True
    # The failed request reported no session; the stale id must not resurface anywhere.
    assert provider.session_id is None
    assert peer.id_file() is None
    assert peer.provider().session_id is None


async def test_a_continuation_without_any_id_sends_none(peer: Peer) -> None:
    await peer.provider().chat(continuation())
    sent = peer.last()
    assert "session_id" not in sent
    assert sent["new_session"] is False
    assert sent["conversation_key"] == KEY


async def test_an_implausible_id_file_is_never_sent(
        peer: Peer, caplog: pytest.LogCaptureFixture) -> None:
    id_file_path(peer.workspace).parent.mkdir()
    id_file_path(peer.workspace).write_text("../../../etc/passwd\n")
    await peer.provider().chat(continuation())
    assert "session_id" not in peer.last()
    assert "not a plausible session id" in caplog.text


async def test_new_session_overrides_the_history(peer: Peer) -> None:
    provider = peer.provider("--session-id", "s-1")
    await provider.chat(USER)
    await provider.chat(USER, new_session=False)
    assert peer.last()["session_id"] == "s-1"
    assert peer.last()["new_session"] is False
    await provider.chat(continuation(), new_session=True)
    assert "session_id" not in peer.last()
    assert peer.last()["new_session"] is True


async def test_no_conversation_key_without_user_text(peer: Peer) -> None:
    await peer.provider().chat([{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "   "}])
    assert "conversation_key" not in peer.last()


async def test_alternating_conversations_keep_their_own_sessions(peer: Peer) -> None:
    provider = peer.provider()
    a = await provider.chat(continuation("conversation A")[:1])
    b = await provider.chat(continuation("conversation B")[:1])
    assert a.session_id != b.session_id
    await provider.chat(continuation("conversation A"))
    assert peer.last()["session_id"] == a.session_id
    await provider.chat(continuation("conversation B"))
    assert peer.last()["session_id"] == b.session_id


async def test_an_unknown_other_conversation_gets_no_foreign_id(peer: Peer) -> None:
    """The held id belongs to A; a continuation of C lets the bridge recover by key."""
    provider = peer.provider()
    await provider.chat(continuation("conversation A")[:1])
    await provider.chat(continuation("conversation C"))
    assert "session_id" not in peer.last()
    assert peer.last()["conversation_key"] == hashlib.sha256(b"conversation C").hexdigest()


# -- title requests --------------------------------------------------------------------


async def test_title_requests_never_touch_the_chat_session(peer: Peer) -> None:
    provider = peer.provider("--session-id", "chat-1")
    await provider.chat(USER)
    provider.command = peer.command("--session-id", "title-1")
    title = await provider.chat(
        [{"role": "system", "content": "Write a title"}, *USER], purpose="title")
    sent = peer.last()
    assert sent["purpose"] == "title"
    assert "session_id" not in sent and sent["new_session"] is True
    assert "conversation_key" not in sent
    assert title.session_id == provider.title_session_id == "title-1"
    assert provider.session_id == "chat-1"
    assert peer.id_file() == "chat-1\n"

    provider.command = peer.command()
    await provider.chat(continuation())
    assert peer.last()["session_id"] == "chat-1"


async def test_a_title_continuation_sends_the_title_id_only(peer: Peer) -> None:
    provider = peer.provider("--session-id", "title-1")
    await provider.chat(USER, purpose="title")
    assert provider.session_id is None
    await provider.chat(continuation(), purpose="title")
    assert peer.last()["session_id"] == "title-1"
    assert not id_file_path(peer.workspace).exists()


async def test_a_new_title_does_not_forget_the_chat_id(peer: Peer) -> None:
    write_session_id(id_file_path(peer.workspace), "chat-1")
    provider = peer.provider()
    await provider.chat(USER, purpose="title")
    assert provider.session_id == "chat-1"
    assert peer.id_file() == "chat-1\n"


# -- compaction requests and branches --------------------------------------------------

COMPACTION: list[MessageLike] = [
    {"role": "system", "content": "You are a context summarization agent. ..."},
    {"role": "user", "content": "Here is the conversation so far:\n<conversation>\n...\n"
                                "</conversation>"}]


async def test_a_compaction_names_the_chat_and_never_takes_over_its_id(peer: Peer) -> None:
    provider = peer.provider("--session-id", "chat-1")
    await provider.chat(USER)
    provider.command = peer.command("--session-id", "summary-1")
    await provider.chat(COMPACTION, purpose="compaction")
    sent = peer.last()
    assert sent["purpose"] == "compaction"
    assert sent["new_session"] is False  # a lone user message, yet no new conversation
    assert sent["session_id"] == "chat-1"
    assert sent["conversation_key"] == KEY  # the chat's key, not the summary prompt's
    assert provider.session_id == "chat-1"
    assert peer.id_file() == "chat-1\n"
    # The history now starts from the summary: a new first user message, same chat id.
    provider.command = peer.command()
    await provider.chat(continuation("What did we do so far?"))
    assert peer.last()["session_id"] == "chat-1"


async def test_a_compaction_with_no_chat_held_sends_no_id(peer: Peer) -> None:
    provider = peer.provider("--session-id", "summary-1")
    await provider.chat(COMPACTION, purpose="compaction")
    assert "session_id" not in peer.last() and peer.last()["new_session"] is False
    assert provider.session_id is None and peer.id_file() is None


async def test_a_branch_becomes_the_chat_session(
        peer: Peer, caplog: pytest.LogCaptureFixture) -> None:
    write_session_id(id_file_path(peer.workspace), "chat-1")
    provider = peer.provider("--session-id", "branch-1", "--forked-from", "chat-1")
    with caplog.at_level(logging.WARNING, logger="nonoka.provider"):
        result = await provider.chat(continuation())
    assert peer.last()["session_id"] == "chat-1"
    assert result.session_id == provider.session_id == "branch-1"
    assert peer.id_file() == "branch-1\n"
    assert "branch branch-1 of session chat-1" in caplog.text


async def test_the_entries_a_turn_ended_with_go_back_with_the_next_request(
        peer: Peer) -> None:
    provider = peer.provider("--session-id", "chat-1", "--revision", "6")
    await provider.chat(continuation())
    assert "revision" not in peer.last()
    provider.command = peer.command("--session-id", "chat-1", "--revision", "4")
    await provider.chat(continuation())
    assert peer.last()["revision"] == 6
    await provider.chat(continuation())
    assert peer.last()["revision"] == 6  # a lower report never lowers what was seen
    await provider.chat(USER)  # a new conversation names no session, so no revision
    assert "revision" not in peer.last()


# -- what comes back -------------------------------------------------------------------


async def test_the_result_collects_the_events(peer: Peer) -> None:
    provider = peer.provider("--session-id", "s-1", "--text", "Let me ", "--text", "look.",
                             "--tool-call", 'read={"path": "README.md"}', "--warning", "w1")
    result = await provider.chat(USER)
    assert result.text == "Let me look."
    assert result.finish_reason == "tool_calls"
    assert result.ok
    assert [(c.tool_call_id, c.tool_name, c.arguments, c.executed_by)
            for c in result.tool_calls] == [("call_1", "read", '{"path": "README.md"}', "host")]
    assert [(u.input_tokens, u.output_tokens, u.cost_usd) for u in result.call_usage] == [
        (7, 3, 0.5), (1, 2, None)]
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (8, 5)
    assert [w.code for w in result.warnings] == ["w1"]
    assert result.errors == []
    assert result.ack is not None and result.ack.server_version == "peer"
    assert result.exit_code == 0
    assert [e.type for e in result.events] == [
        "protocol_ack", "session_init", "warning", "text_delta", "text_delta", "tool_call",
        "usage", "usage", "finish"]


async def test_assistant_message_builds_the_next_history(peer: Peer) -> None:
    provider = peer.provider("--session-id", "s-1", "--text", "Reading.",
                             "--tool-call", 'read={"path": "README.md"}')
    result = await provider.chat(USER)
    assistant = result.assistant_message()
    assert assistant == Message(role="assistant", content="Reading.", tool_calls=[
        ToolCall(id="call_1", name="read", arguments='{"path": "README.md"}')])
    history: list[MessageLike] = [*USER, assistant,
               Message(role="tool", content="# nonoka", tool_call_id="call_1")]
    provider.command = peer.command("--text", "Done.")
    final = await provider.chat(history)
    sent = peer.last()
    assert sent["session_id"] == "s-1"
    assert sent["messages"][1]["tool_calls"] == [
        {"id": "call_1", "name": "read", "arguments": '{"path": "README.md"}'}]
    assert final.assistant_message() == Message(role="assistant", content="Done.")


async def test_recovered_sessions_are_reported_and_logged(
        peer: Peer, caplog: pytest.LogCaptureFixture) -> None:
    provider = peer.provider("--session-id", "found-1", "--recovered", "session_id_missing")
    with caplog.at_level(logging.WARNING, logger="nonoka.provider"):
        result = await provider.chat(continuation())
    assert result.recovered and result.recovery_reason == "session_id_missing"
    assert provider.session_id == "found-1"
    assert "recovered session found-1" in caplog.text
    assert "session_id_missing" in caplog.text


async def test_an_implausible_id_from_the_bridge_is_not_kept(
        peer: Peer, caplog: pytest.LogCaptureFixture) -> None:
    provider = peer.provider("--session-id", "../escape")
    result = await provider.chat(USER)
    assert result.session_id == "../escape"
    assert provider.session_id is None
    assert peer.id_file() is None
    assert "not a plausible session id" in caplog.text


async def test_on_event_sees_every_event_sync_or_async(peer: Peer) -> None:
    provider = peer.provider("--text", "hi")
    seen: list[str] = []
    result = await provider.chat(USER, on_event=lambda e: seen.append(e.type))
    assert seen == [e.type for e in result.events]

    async def slow(event: Event) -> None:
        await asyncio.sleep(0)
        seen.append(event.type)

    seen.clear()
    await provider.chat(USER, on_event=slow)
    assert seen == [e.type for e in result.events]


async def test_stream_yields_typed_events_and_fills_the_result(peer: Peer) -> None:
    provider = peer.provider("--session-id", "s-1", "--text", "hi")
    stream = provider.stream(USER, request_id="req-7")
    events = [event async for event in stream]
    assert isinstance(events[1], SessionInit)
    assert isinstance(events[2], TextDelta)
    assert isinstance(events[-1], Finish)
    assert all(e.request_id == "req-7" for e in events)
    assert stream.result.text == "hi"
    assert provider.session_id == "s-1"


async def test_events_of_an_unknown_type_are_skipped(peer: Peer) -> None:
    result = await peer.provider("--unknown-event", "--text", "ok").chat(USER)
    assert result.text == "ok"
    assert "from_the_future" not in {e.type for e in result.events}


async def test_invalid_input_is_a_configuration_error_and_spawns_nothing(peer: Peer) -> None:
    provider = peer.provider()
    with pytest.raises(ConfigurationError, match=r"messages\[0\]"):
        await provider.chat([{"role": "robot", "content": "beep"}])
    with pytest.raises(ConfigurationError, match="invalid chat request"):
        await provider.chat([])
    with pytest.raises(ConfigurationError, match=r"tools\[0\]"):
        await provider.chat(USER, tools=[{"description": "no name"}])
    assert peer.received() == []


def test_the_default_command_runs_the_bridge_with_this_interpreter(tmp_path: Path) -> None:
    assert default_command() == [sys.executable, "-m", "nonoka", "bridge"]
    assert NonokaProvider(tmp_path).command == default_command()


# -- a broken bridge -------------------------------------------------------------------


async def test_a_bridge_that_cannot_start(tmp_path: Path) -> None:
    provider = NonokaProvider(tmp_path, command=[str(tmp_path / "no-such-bridge"), "bridge"])
    with pytest.raises(BridgeError) as caught:
        await provider.chat(USER)
    message = str(caught.value)
    assert "could not start the bridge" in message
    assert f"{tmp_path / 'no-such-bridge'} bridge" in message
    assert caught.value.returncode is None


async def test_a_bridge_that_exits_before_finish(peer: Peer) -> None:
    provider = peer.provider("--mode", "exit", "--exit-code", "3",
                             "--stderr", "boom: the database is on fire\n")
    with pytest.raises(BridgeError) as caught:
        await provider.chat(USER)
    error = caught.value
    message = str(error)
    assert "closed its output before finishing the request" in message
    assert "exit code 3" in message
    assert "boom: the database is on fire" in message
    assert str(PEER) in message
    assert error.returncode == 3
    assert error.command == peer.command("--mode", "exit", "--exit-code", "3", "--stderr",
                                         "boom: the database is on fire\n")
    assert "database is on fire" in error.stderr_tail


async def test_a_bridge_that_stops_after_the_ack(peer: Peer) -> None:
    with pytest.raises(BridgeError, match=r"before finishing.*exit code 0.*stderr: \(empty\)"):
        await peer.provider("--mode", "ack-then-exit").chat(USER)


async def test_a_bridge_that_writes_garbage(peer: Peer) -> None:
    with pytest.raises(BridgeError) as caught:
        await peer.provider("--mode", "garbage").chat(USER)
    message = str(caught.value)
    assert "not a protocol event (invalid_json" in message
    assert "'this is not a protocol line'" in message
    assert str(PEER) in message


async def test_an_exit_code_after_finish_is_recorded_not_raised(
        peer: Peer, caplog: pytest.LogCaptureFixture) -> None:
    result = await peer.provider("--text", "ok", "--exit-code", "4").chat(USER)
    assert result.finish_reason == "stop" and result.text == "ok"
    assert result.exit_code == 4
    assert "exit code 4" in caplog.text


async def test_a_chatty_stderr_is_drained_and_only_its_tail_kept(peer: Peer) -> None:
    result = await peer.provider("--stderr-flood", str(1024 * 1024), "--text", "ok").chat(USER)
    assert result.text == "ok"
    assert result.stderr_tail.endswith("flood tail marker\n")
    assert len(result.stderr_tail) <= 8192 + 3


async def test_a_timeout_stops_the_bridge_and_raises(peer: Peer) -> None:
    provider = peer.provider("--mode", "hang", timeout=0.5, cancel_grace=2)
    started = time.monotonic()
    with pytest.raises(BridgeTimeoutError) as caught:
        await provider.chat(USER)
    assert time.monotonic() - started < 10
    assert isinstance(caught.value, TimeoutError)
    assert "within 0.5 s" in str(caught.value)
    assert str(PEER) in str(caught.value)
    # Reaped: SIGTERM first (a peer inside the request finishes cleanly on it, exit code
    # 0; one still starting dies of it), SIGKILL only if a loaded machine is very slow.
    assert caught.value.returncode is not None


async def test_the_timeout_also_bounds_sending_to_a_bridge_that_never_reads(
        peer: Peer) -> None:
    provider = peer.provider("--mode", "deaf", timeout=0.5, cancel_grace=1)
    big = [{"role": "user", "content": "x" * (4 * 1024 * 1024)}]  # far over a pipe buffer
    started = time.monotonic()
    with pytest.raises(BridgeTimeoutError):
        await provider.chat(big)
    assert time.monotonic() - started < 10


# -- cancellation ----------------------------------------------------------------------


async def wait_for_session(provider: NonokaProvider) -> None:
    """Until the hanging peer has reported its session (so it is inside the request)."""
    for _ in range(500):
        if provider.session_id is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the peer never reported a session")


async def test_provider_cancel_sends_a_cancel_line(peer: Peer) -> None:
    provider = peer.provider("--mode", "hang", "--session-id", "s-1")
    task = asyncio.create_task(provider.chat(USER, request_id="req-c"))
    await wait_for_session(provider)
    await provider.cancel()
    result = await task
    assert result.finish_reason == "cancelled"
    assert not result.killed
    assert peer.received()[-1] == {"type": "cancel", "request_id": "req-c"}
    assert provider.session_id == "s-1"


async def test_cancelling_the_task_cancels_the_request(peer: Peer) -> None:
    provider = peer.provider("--mode", "hang", "--session-id", "s-1")
    task = asyncio.create_task(provider.chat(USER, request_id="req-t"))
    await wait_for_session(provider)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert peer.received()[-1] == {"type": "cancel", "request_id": "req-t"}


async def test_a_stubborn_bridge_is_killed(peer: Peer) -> None:
    provider = peer.provider("--mode", "stubborn", "--session-id", "s-1", cancel_grace=0.3)
    task = asyncio.create_task(provider.chat(USER))
    await wait_for_session(provider)
    started = time.monotonic()
    await provider.cancel()
    result = await task
    assert time.monotonic() - started < 10
    assert result.finish_reason == "cancelled"
    assert result.killed
    assert result.exit_code == -9


async def test_leaving_a_stream_early_cancels_the_request(peer: Peer) -> None:
    provider = peer.provider("--mode", "hang", "--session-id", "s-1")
    async with provider.stream(USER, request_id="req-s") as stream:
        async for event in stream:
            if isinstance(event, SessionInit):
                break
    assert peer.received()[-1] == {"type": "cancel", "request_id": "req-s"}
    assert stream.result.finish_reason == "cancelled"
    assert provider.session_id == "s-1"


async def test_cancelling_while_the_request_is_still_being_written(peer: Peer) -> None:
    provider = peer.provider("--mode", "deaf", cancel_grace=0.3)
    task = asyncio.create_task(provider.chat([{"role": "user", "content": "x" * 4_000_000}]))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


async def test_an_on_event_error_stops_the_bridge_and_propagates(peer: Peer) -> None:
    provider = peer.provider("--mode", "hang", "--session-id", "s-1")

    def explode(event: Event) -> None:
        if isinstance(event, SessionInit):
            raise ValueError("host bug")

    with pytest.raises(ValueError, match="host bug"):
        await asyncio.wait_for(provider.chat(USER, on_event=explode), 10)
    assert peer.received()[-1]["type"] == "cancel"
    assert provider.session_id == "s-1"


async def test_cancel_with_nothing_running_is_a_no_op(peer: Peer) -> None:
    await peer.provider().cancel()


def test_results_are_plain_data() -> None:
    from nonoka.protocol.models import ChatRequest

    result = ProviderResult(request=ChatRequest(messages=[Message(role="user", content="x")]))
    assert result.text == "" and not result.ok
    assert result.assistant_message() == Message(role="assistant", content="")
