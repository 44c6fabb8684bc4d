"""What the campaign found, pinned down: a host's retry after a crash or a failure.

A host that lost a request (the bridge was killed, or the turn failed) sends the same
request again. The retry must neither add the prompt twice nor lose the answer the dead
process stored, and a failed turn must really be tried again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from typing import Any

from nonoka.faults import FAULT_ENV
from nonoka.state.session_state import SessionStatus
from nonoka.testing import call, text
from nonoka.testing.server import HttpError, ScriptedOpenAIServer
from tests.support.bridge import (
    BRIDGE,
    Bridge,
    assistant,
    chat,
    load_state,
    of_type,
    one,
    read_events_until,
    text_of,
    tool_message,
    user,
)

TOOLS = [{"name": "read", "parameters": {"type": "object", "properties": {}}}]


def killed_at(bridge: Bridge, point: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Run ``request`` in a bridge that SIGKILLs itself at ``point``; the events it sent."""
    line = json.dumps({"cwd": str(bridge.project), **request}).encode() + b"\n"
    done = subprocess.run(BRIDGE, input=line,
                          capture_output=True, cwd=bridge.project,
                          env={**bridge.env, FAULT_ENV: point}, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    return [json.loads(x) for x in done.stdout.splitlines() if x.strip()]


def start(bridge: Bridge, scripted: list[Any]) -> str:
    scripted.append(text("first answer"))
    return str(one(bridge.run(chat([user("hello")], new_session=True)),
                   "session_init")["session_id"])


def test_a_stored_answer_is_replayed_not_asked_again(
        bridge: Bridge, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    sid = start(bridge, scripted)
    history = [user("hello"), assistant("first answer"), user("second")]
    scripted.append(text("second answer"))
    lost = killed_at(bridge, "index.update.before:1", chat(history, session_id=sid))
    assert not of_type(lost, "finish"), "the host must not have seen the end of the turn"
    calls = len(server.requests)
    retry = bridge.run(chat(history, session_id=sid))
    assert text_of(retry) == "second answer" and retry[-1]["finish_reason"] == "stop"
    assert len(server.requests) == calls, "the model was asked again"
    state = load_state(bridge, sid)
    assert [e.content for e in state.memory_entries] == [
        "hello", "first answer", "second", "second answer"]


def test_stored_host_calls_are_replayed(bridge: Bridge, scripted: list[Any],
                                        server: ScriptedOpenAIServer) -> None:
    sid = start(bridge, scripted)
    history = [user("hello"), assistant("first answer"), user("read it")]
    scripted.append(call("read", {}, id="call_r"))
    killed_at(bridge, "checkpoint.save.after:2", chat(history, tools=TOOLS, session_id=sid))
    calls = len(server.requests)
    retry = bridge.run(chat(history, tools=TOOLS, session_id=sid))
    (replayed,) = of_type(retry, "tool_call")
    assert replayed["tool_call_id"] == "call_r" and replayed["executed_by"] == "host"
    assert retry[-1]["finish_reason"] == "tool_calls" and len(server.requests) == calls
    scripted.append(text("it says x"))
    answered = [*history, assistant("", [{"id": "call_r", "name": "read", "arguments": "{}"}]),
                tool_message("call_r", "x")]
    done = bridge.run(chat(answered, tools=TOOLS, session_id=sid))
    assert text_of(done) == "it says x"
    roles = [e.role for e in load_state(bridge, sid).memory_entries]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]


def test_the_same_words_again_are_a_new_turn(bridge: Bridge, scripted: list[Any]) -> None:
    sid = start(bridge, scripted)
    scripted += [text("noted"), text("noted again")]
    first = [user("hello"), assistant("first answer"), user("ok")]
    assert text_of(bridge.run(chat(first, session_id=sid))) == "noted"
    again = [*first, assistant("noted"), user("ok")]
    assert text_of(bridge.run(chat(again, session_id=sid))) == "noted again"
    users = [e.content for e in load_state(bridge, sid).memory_entries if e.role == "user"]
    assert users == ["hello", "ok", "ok"]


def test_a_failed_turn_is_tried_again(bridge: Bridge, scripted: list[Any]) -> None:
    sid = start(bridge, scripted)
    history = [user("hello"), assistant("first answer"), user("second")]
    scripted.append(HttpError(400, {"error": {"message": "bad day"}}))
    failed = bridge.run(chat(history, session_id=sid))
    assert one(failed, "error")["code"] == "model_error"
    assert load_state(bridge, sid).status == SessionStatus.FAILED
    scripted.append(text("better now"))
    retry = bridge.run(chat(history, session_id=sid))
    assert text_of(retry) == "better now" and retry[-1]["finish_reason"] == "stop"
    state = load_state(bridge, sid)
    assert [e.content for e in state.memory_entries] == [
        "hello", "first answer", "second", "better now"]


def test_a_bad_line_between_requests_does_not_end_the_bridge(
        bridge: Bridge, scripted: list[Any]) -> None:
    scripted += [text("one"), text("two")]
    proc = bridge.spawn()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    first = json.dumps({"cwd": str(bridge.project), **chat([user("a")])}).encode()
    proc.stdin.write(first + b"\n")
    proc.stdin.flush()
    assert text_of(read_events_until(proc, "finish")) == "one"
    time.sleep(0.5)  # the request is over, the server waits for the next line
    proc.stdin.write(b"not json\n")
    proc.stdin.flush()
    assert one(read_events_until(proc, "finish"), "error")["code"] == "invalid_json"
    second = json.dumps({"cwd": str(bridge.project), **chat([user("b")])}).encode()
    proc.stdin.write(second + b"\n")
    proc.stdin.flush()
    assert text_of(read_events_until(proc, "finish")) == "two"
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read() and not proc.stdout.read()
    proc.stdout.close()
    proc.stderr.close()


def test_sigterm_between_requests_ends_the_bridge_cleanly(bridge: Bridge,
                                                          scripted: list[Any]) -> None:
    scripted.append(text("one"))
    proc = bridge.spawn()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(json.dumps({"cwd": str(bridge.project), **chat([user("a")])}).encode()
                     + b"\n")
    proc.stdin.flush()
    read_events_until(proc, "finish")
    begun = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # input still open: the server waits for a line
    assert proc.wait(timeout=10) == 0 and time.monotonic() - begun < 5
    assert proc.stderr.read() == b""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()
