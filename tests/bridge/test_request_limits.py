"""A history over the bridge's message limit is refused before it is decoded into models."""

from __future__ import annotations

from typing import Any

from nonoka.testing import text
from tests.support.bridge import Bridge, chat, one, user


def test_a_history_over_the_limit_gets_a_clear_error_and_changes_nothing(
        bridge: Bridge, scripted: list[Any]) -> None:
    bridge.env["NONOKA_MAX_MESSAGES"] = "100"
    events = bridge.run(chat([user(f"m {i}") for i in range(101)], request_id="big"))
    error = one(events, "error")
    assert error["code"] == "frame_too_large"
    assert error["request_id"] == "big"
    assert error["details"] == {"messages": 101, "max_messages": 100}
    assert "101 messages" in error["message"] and "limit of 100" in error["message"]
    assert not (bridge.project / ".nonoka").exists(), "a refused request touched the project"

    scripted.append(text("fits"))
    events = bridge.run(chat([user(f"m {i}") for i in range(100)]))
    assert one(events, "finish")["finish_reason"] == "stop"
