"""A full disk (or a lock held too long) at the very end of a turn, after the answer was
stored.

The answer is saved the moment it arrives; the writes after it (the timeline's
``model_call`` entry, the snapshot that marks the turn completed) may still meet a full
disk. The error must then say that the answer was stored, not the store's usual "send
the request again": a resent prompt would be answered, and stored, a second time.
``NONOKA_FAULT=<point>:<n>:full`` fails exactly that write as a full disk does,
``:busy`` as another process holding the write lock too long does.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from nonoka.faults import FAULT_ENV
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.faults.test_retries import start
from tests.support.bridge import BRIDGE, Bridge, assistant, chat, load_state, one, text_of, user
from tests.support.processes import run_nonoka

LATE = ["event.append.before:3:full",     # the timeline's model_call entry, after the save
        "checkpoint.save.before:3:full",  # the snapshot that marks the turn completed
        "event.append.before:3:busy",     # the same writes meeting a lock held too long:
        "checkpoint.save.before:3:busy"]  # a failure that would pass, yet no resend either
"""The writes of a continued session's turn that come after its answer was stored."""


def _contents(bridge: Bridge, sid: str) -> list[str]:
    return [e.content for e in load_state(bridge, sid).memory_entries]


@pytest.mark.parametrize("point", LATE)
def test_a_full_disk_after_the_answer_says_it_was_stored(
        bridge: Bridge, scripted: list[Any], server: ScriptedOpenAIServer, point: str) -> None:
    sid = start(bridge, scripted)
    history = [user("hello"), assistant("first answer"), user("second")]
    scripted.append(text("second answer"))
    line = json.dumps({"cwd": str(bridge.project), **chat(history, session_id=sid)})
    done = subprocess.run(BRIDGE, input=line.encode() + b"\n", capture_output=True,
                          cwd=bridge.project, env={**bridge.env, FAULT_ENV: point},
                          timeout=60, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 0 and "Traceback" not in stderr, stderr
    events = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
    assert text_of(events) == "second answer"
    error = one(events, "error")
    assert error["code"] == "store_error" and error["retryable"] is False, error
    message = error["message"]
    assert "the answer was stored" in message, message
    if point.endswith(":full"):
        assert "disk is full" in message and "free some space" in message, message
    else:
        assert "database is locked" in message and "free some space" not in message
    assert "send the request again" not in message, message
    assert events[-1]["type"] == "finish", events
    stored = ["hello", "first answer", "second", "second answer"]
    assert _contents(bridge, sid) == stored

    calls = len(server.requests)
    again = bridge.run(chat(history, session_id=sid))  # a host that resends anyway
    assert text_of(again) == "second answer" and again[-1]["finish_reason"] == "stop"
    assert len(server.requests) == calls, "the model was asked again"
    assert _contents(bridge, sid) == stored, "the turn was stored twice"


@pytest.mark.parametrize("point", LATE)
def test_nonoka_run_says_the_answer_was_stored(
        bridge: Bridge, scripted: list[Any], point: str) -> None:
    sid = start(bridge, scripted)
    scripted.append(text("second answer"))
    done = run_nonoka(bridge.project, "run", "--session", sid[:8], "second",
                      env={**bridge.env, FAULT_ENV: point})
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "the answer was stored" in done.stderr, done.stderr
    assert "send the request again" not in done.stderr, done.stderr
    assert _contents(bridge, sid) == ["hello", "first answer", "second", "second answer"]


def test_a_full_disk_before_the_answer_still_says_to_send_again(
        bridge: Bridge, scripted: list[Any]) -> None:
    """The same failure before the model answered: nothing of the turn is stored, so
    sending the request again is the right advice."""
    sid = start(bridge, scripted)
    history = [user("hello"), assistant("first answer"), user("second")]
    scripted.append(text("second answer"))
    line = json.dumps({"cwd": str(bridge.project), **chat(history, session_id=sid)})
    done = subprocess.run(BRIDGE, input=line.encode() + b"\n", capture_output=True,
                          cwd=bridge.project,
                          env={**bridge.env, FAULT_ENV: "checkpoint.save.before:1:full"},
                          timeout=60, check=False)
    events = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
    message = one(events, "error")["message"]
    assert "send the request again" in message and "answer was stored" not in message
    assert _contents(bridge, sid) == ["hello", "first answer"]
