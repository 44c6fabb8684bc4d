"""Bad input, missing configuration, cancellation and killed processes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import pytest

from nonoka.state.entries import dangling_tool_calls
from nonoka.state.session_state import SessionStatus
from nonoka.testing import call, text
from nonoka.testing.server import Delay, Step
from tests.support.bridge import (
    Bridge,
    assistant,
    chat,
    load_state,
    of_type,
    one,
    read_events_until,
    text_of,
    user,
)

BAD_LINES: list[tuple[bytes, str]] = [
    (b'{"type": "chat", "protocol": {"version": "1"}, "messages": [', "invalid_json"),
    (b"\xff\xfe not utf-8\n", "invalid_utf8"),
    (b'["a", "list"]\n', "not_an_object"),
    (b'{"type": "telepathy"}\n', "unknown_request_type"),
    (b'{"type": "chat", "protocol": {"version": "1"}, "messages": "hi"}\n', "invalid_request"),
    (b'{"type": "chat", "protocol": {"version": "1"}, '
     b'"messages": [{"role": "robot", "content": "x"}]}\n', "invalid_request"),
    (b'{"type": "chat", "protocol": {"version": "2"}, '
     b'"messages": [{"role": "user", "content": "x"}]}\n', "unsupported_protocol_version"),
    (b'{"type": "chat", "protocol": {"version": "1", "required_capabilities": ["telepathy"]}, '
     b'"messages": [{"role": "user", "content": "x"}]}\n', "missing_capability"),
]


@pytest.mark.parametrize(("line", "code"), BAD_LINES, ids=[c for _, c in BAD_LINES])
def test_bad_input_gets_an_error_and_leaves_the_database_alone(
        bridge: Bridge, seeded: str, line: bytes, code: str) -> None:
    before = bridge.db_digest()
    events, stderr = bridge.run_lines(line, timeout=20)
    error = one(events, "error")
    assert error["code"] == code and error["message"], events
    assert events[-1]["type"] == "finish" and events[-1]["finish_reason"] == "error"
    assert "Traceback" not in stderr
    assert bridge.db_digest() == before
    assert load_state(bridge, seeded).memory_entries[-1].content == "stored answer"


def test_an_oversized_frame_is_refused_without_buffering_it(bridge: Bridge, seeded: str) -> None:
    bridge.env["NONOKA_MAX_FRAME_BYTES"] = "1000"
    before = bridge.db_digest()
    big = json.dumps(chat([user("x" * 5000)])).encode() + b"\n"
    events, _ = bridge.run_lines(big, timeout=20)
    assert one(events, "error")["code"] == "frame_too_large"
    assert bridge.db_digest() == before


def test_a_bad_line_does_not_stop_the_next_request(bridge: Bridge, scripted: list[Step]) -> None:
    scripted.append(text("fine"))
    good = json.dumps({"cwd": str(bridge.project), **chat([user("hi")])}).encode()
    events, _ = bridge.run_lines(b"garbage\n" + good + b"\n")
    assert of_type(events, "error")[0]["code"] == "invalid_json"
    assert text_of(events) == "fine" and events[-1]["finish_reason"] == "stop"


def test_no_model_configured_says_what_to_set_and_creates_nothing(bridge: Bridge) -> None:
    del bridge.env["NONOKA_MODEL"]
    events = bridge.run(chat([user("hi")]))
    error = one(events, "error")
    assert error["code"] == "model_not_configured"
    assert "NONOKA_MODEL" in error["message"] and "config.toml" in error["message"]
    assert not bridge.db.exists(), "a database was created for a request that could not run"


def test_a_missing_api_key_is_a_clear_error(bridge: Bridge) -> None:
    bridge.env["NONOKA_MODEL"] = "openai:gpt-4o-mini"
    del bridge.env["OPENAI_API_KEY"]
    del bridge.env["OPENAI_BASE_URL"]
    error = one(bridge.run(chat([user("hi")])), "error")
    assert error["code"] == "model_not_configured" and "OPENAI_API_KEY" in error["message"]


def test_an_unreachable_model_fails_the_turn_but_keeps_the_session(
        bridge: Bridge, seeded: str) -> None:
    bridge.env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    events = bridge.run(chat([user("keep me"), assistant("stored answer"), user("more")],
                             session_id=seeded))
    error = one(events, "error")
    assert error["code"] == "model_error" and "127.0.0.1:9" in error["message"]
    state = load_state(bridge, seeded)
    assert [e.content for e in state.memory_entries] == ["keep me", "stored answer", "more"]


def test_end_of_input_after_a_request_does_not_cancel_it(bridge: Bridge,
                                                         scripted: list[Step]) -> None:
    scripted.append(Delay(0.5, text("slow but sure")))
    proc = bridge.spawn()
    out, err = proc.communicate(json.dumps(chat([user("hi")])).encode() + b"\n", timeout=30)
    assert proc.returncode == 0, err.decode()
    events = [json.loads(line) for line in out.splitlines()]
    assert text_of(events) == "slow but sure" and events[-1]["finish_reason"] == "stop"


@pytest.mark.parametrize("how", ["cancel", "sigterm", "sigint"])
def test_cancellation_persists_the_session(bridge: Bridge, scripted: list[Step],
                                           how: str) -> None:
    scripted.append(Delay(30, text("never sent")))
    proc = bridge.spawn()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(chat([user("long task")], request_id="r9")).encode() + b"\n")
    proc.stdin.flush()
    events = read_events_until(proc, "session_init")
    sid = events[-1]["session_id"]
    time.sleep(0.3)  # let the model request start
    if how == "cancel":
        proc.stdin.write(b'{"type": "cancel", "request_id": "r9"}\n')
        proc.stdin.flush()
    else:
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    events += read_events_until(proc, "finish")
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    assert events[-1]["finish_reason"] == "cancelled" and events[-1]["request_id"] == "r9"
    state = load_state(bridge, sid)
    assert state.status == SessionStatus.CANCELLED
    assert [e.content for e in state.memory_entries] == ["long task"]


def test_sigkill_mid_turn_then_a_clean_continuation(bridge: Bridge, scripted: list[Step],
                                                    server: Any) -> None:
    tools = [{"name": "read", "parameters": {"type": "object", "properties": {}}}]
    scripted.append(call("read", {}, id="call_r"))
    first = bridge.run(chat([user("read it")], tools=tools, new_session=True))
    sid = one(first, "session_init")["session_id"]
    history = [user("read it"), assistant("", [{"id": "call_r", "name": "read",
                                                 "arguments": "{}"}]),
               {"role": "tool", "content": "file body", "tool_call_id": "call_r"}]
    scripted.append(Delay(30, text("never")))
    proc = bridge.spawn()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(chat(history, tools=tools, session_id=sid)).encode() + b"\n")
    proc.stdin.flush()
    read_events_until(proc, "session_init")
    deadline = time.monotonic() + 10
    # The model call of the second turn is in flight (it may leave before the runtime
    # loads: nonoka.bridge.early) and the turn has stored the tool result.
    while len(server.requests) < 2 or len(load_state(bridge, sid).memory_entries) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    crashed = load_state(bridge, sid)
    assert [e.role for e in crashed.memory_entries] == ["user", "assistant", "tool"]
    assert dangling_tool_calls(crashed.memory_entries)[1] == []

    scripted.append(text("the file says: file body"))
    events = bridge.run(chat(history, tools=tools, session_id=sid))
    assert one(events, "session_init")["session_id"] == sid
    assert text_of(events) == "the file says: file body"
    final = load_state(bridge, sid)
    assert [e.role for e in final.memory_entries] == ["user", "assistant", "tool", "assistant"]
    assert final.runtime_state.usage.model_turns == 2


def test_a_session_runs_in_one_process_at_a_time(bridge: Bridge, scripted: list[Step],
                                                 server: Any) -> None:
    scripted.append(text("first"))
    sid = one(bridge.run(chat([user("hello")], new_session=True)), "session_init")["session_id"]
    history = [user("hello"), assistant("first"), user("slow one")]
    release = threading.Event()  # the first process's model call ends when the test says
    scripted.append(Delay(120, text("slow answer"), until=release))
    busy_holder = bridge.spawn()
    assert busy_holder.stdin is not None
    busy_holder.stdin.write(json.dumps(chat(history, session_id=sid)).encode() + b"\n")
    busy_holder.stdin.close()
    deadline = time.monotonic() + 10
    while len(server.requests) < 2:  # the first process holds the lease, mid model call
        assert time.monotonic() < deadline
        time.sleep(0.02)

    refused = bridge.run(chat(history, session_id=sid))  # the host retries impatiently
    error = one(refused, "error")
    assert error["code"] == "session_busy" and error["retryable"] is True
    assert sid in error["message"]
    assert refused[-1]["finish_reason"] == "error"
    release.set()

    bridge.env["NONOKA_LEASE_WAIT"] = "20"
    scripted.append(text("after the wait"))
    waited = bridge.run(chat([*history, assistant("slow answer"), user("now?")],
                             session_id=sid))
    assert text_of(waited) == "after the wait"
    assert busy_holder.stdout is not None and busy_holder.stderr is not None
    out = busy_holder.stdout.read()
    assert busy_holder.wait(timeout=30) == 0
    busy_holder.stdout.close()
    busy_holder.stderr.close()
    assert b'"finish_reason":"stop"' in out
    state = load_state(bridge, sid)
    assert [e.content for e in state.memory_entries if e.role == "user"] == [
        "hello", "slow one", "now?"], "the refused request changed the session"
