"""The protocol server's own promises: a cancel stops only the request it names, and an
error about a huge line stays small."""

from __future__ import annotations

import json
import subprocess
import time

from nonoka.testing import text
from nonoka.testing.server import Delay, Step
from tests.support.bridge import BRIDGE, Bridge, chat, read_events_until, text_of, user


def test_a_cancel_naming_another_request_leaves_the_running_one(
        bridge: Bridge, scripted: list[Step]) -> None:
    scripted.append(Delay(1.0, text("B finished")))
    proc = bridge.spawn()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(json.dumps(chat([user("long task")], request_id="B")).encode() + b"\n")
    proc.stdin.flush()
    events = read_events_until(proc, "session_init")
    time.sleep(0.2)  # the model request is in flight
    proc.stdin.write(b'{"type": "cancel", "request_id": "A"}\n')
    proc.stdin.flush()
    events += read_events_until(proc, "finish")
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    proc.stdout.close()
    proc.stderr.close()
    assert events[-1]["request_id"] == "B" and events[-1]["finish_reason"] == "stop"
    assert text_of(events) == "B finished"


def _answer_size(bridge: Bridge, request: dict[str, object]) -> tuple[int, list[dict[str, object]]]:
    line = json.dumps({"cwd": str(bridge.project), **request}).encode() + b"\n"
    done = subprocess.run(BRIDGE, input=line, capture_output=True, cwd=bridge.project,
                          env=bridge.env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.splitlines()
    return max(map(len, lines)), [json.loads(x) for x in lines]


def test_an_error_never_echoes_a_huge_input(bridge: Bridge) -> None:
    huge = "t" * 4_000_000
    size, events = _answer_size(bridge, {"type": huge, "protocol": {"version": "1"}})
    assert [e["type"] for e in events] == ["error", "finish"]
    assert events[0]["code"] == "unknown_request_type"
    assert size < 4096, f"an error line of {size} bytes"

    wanted = ["a" * 3_000_000, "b" * 3_000_000]
    size, events = _answer_size(bridge, chat([user("hi")], protocol={
        "version": "1", "required_capabilities": wanted}))
    assert events[0]["code"] == "missing_capability"
    assert size < 4096, f"an error line of {size} bytes"

    fields = {f"x{i}" * 1000: 1 for i in range(200)}
    size, events = _answer_size(bridge, chat([{"role": "user", "content": 5, **fields}]))
    assert events[0]["type"] in ("error", "protocol_ack")
    assert size < 16384, f"an error line of {size} bytes"
