"""A ``request_id`` is repeated on every event, so its length is bounded: a huge one is
refused in one short error, never echoed."""

from __future__ import annotations

import json

from nonoka.testing import text
from nonoka.testing.server import Step
from tests.support.bridge import Bridge, chat, user


def test_a_huge_request_id_is_refused_without_being_echoed(bridge: Bridge) -> None:
    huge = "r" * 100_000
    events, _ = bridge.run_lines(
        json.dumps({"cwd": str(bridge.project), **chat([user("hi")], request_id=huge)}
                   ).encode() + b"\n")
    assert sum(len(json.dumps(e)) for e in events) < 5_000
    error = next(e for e in events if e["type"] == "error")
    assert error["code"] == "invalid_request" and "request_id" in error["message"]
    assert all("request_id" not in e for e in events)
    assert events[-1]["type"] == "finish"


def test_a_request_id_within_the_bound_is_echoed(bridge: Bridge,
                                                 scripted: list[Step]) -> None:
    scripted.append(text("hello"))
    rid = "r" * 256
    events, _ = bridge.run_lines(
        json.dumps({"type": "cancel", "request_id": rid}).encode() + b"\n"
        + json.dumps({"cwd": str(bridge.project), **chat([user("hi")], request_id=rid)}
                     ).encode() + b"\n")
    assert events[0]["type"] == "protocol_ack" and events[0]["request_id"] == rid
    assert all(e["request_id"] == rid for e in events)
