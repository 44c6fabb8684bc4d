"""Another process holding the SQLite write lock past the busy timeout while a turn
saves: the turn fails ``retryable`` (nothing was written), and the retry succeeds."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from nonoka.testing import text
from nonoka.testing.server import Step
from tests.conftest import ScriptItem
from tests.support.bridge import (
    Bridge,
    assistant,
    chat,
    first_turn,
    load_state,
    of_type,
    one,
    text_of,
    user,
)


def test_a_lock_held_past_the_busy_timeout_is_retryable(bridge: Bridge,
                                                        scripted: list[ScriptItem]) -> None:
    bridge.env["NONOKA_SQLITE_BUSY_TIMEOUT"] = "0.5"
    sid, _ = first_turn(bridge, scripted)
    locked, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        con = sqlite3.connect(bridge.db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(60)
        con.execute("ROLLBACK")
        con.close()

    def answer(body: dict[str, Any]) -> Step:
        threading.Thread(target=hold_the_lock, daemon=True).start()
        locked.wait(10)
        return text("second answer")

    history = [user("keep me"), assistant("stored answer"), user("and now?")]
    scripted.append(answer)
    try:
        events = bridge.run(chat(history, session_id=sid))
    finally:
        release.set()
    error = one(events, "error")
    assert error["code"] == "store_error" and error["retryable"] is True, error
    assert "send the request again" in error["message"]
    assert events[-1]["finish_reason"] == "error"

    scripted.append(text("second answer"))
    events = bridge.run(chat(history, session_id=sid))
    assert not of_type(events, "error") and events[-1]["finish_reason"] == "stop"
    assert text_of(events) == "second answer"
    state = load_state(bridge, sid)
    assert [e.content for e in state.memory_entries] == [
        "keep me", "stored answer", "and now?", "second answer"]
