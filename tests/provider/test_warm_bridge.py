"""A warm bridge: one ``nonoka bridge`` process serving the steps of a conversation one after
another on its stdin, as the OpenCode provider keeps it between steps (``warm``).

Its caches (the decoded entries, the snapshot, the passes over the conversation) must
never stand in for the database: another process may write the same session between two
of its requests, or the database may be a different file by then. Each case runs the
real bridge against the scripted model and checks what the model received and what is
stored.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.support.bridge import Bridge, assistant, chat, one, read_events_until, user
from tests.support.stores import load_stored


@pytest.fixture
def warm(bridge: Bridge) -> Iterator[subprocess.Popen[bytes]]:
    proc = bridge.spawn()
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(60) == 0
    assert proc.stderr is not None
    proc.stderr.close()
    assert proc.stdout is not None
    proc.stdout.close()


def ask(proc: subprocess.Popen[bytes], project: Path, request: dict[str, Any]
        ) -> list[dict[str, Any]]:
    """One request to the warm bridge; its events up to ``finish``."""
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"cwd": str(project), **request}).encode() + b"\n")
    proc.stdin.flush()
    return read_events_until(proc, "finish")


def sent(server: ScriptedOpenAIServer, n: int = -1) -> list[tuple[str, str]]:
    """The roles and texts of the conversation the model received in request ``n``."""
    return [(m["role"], m["content"]) for m in server.requests[n]["messages"]
            if m["role"] != "system"]


def stored(bridge: Bridge, session_id: str) -> list[tuple[str, str]]:
    state = load_stored(bridge.db, session_id)
    assert state is not None
    return [(e.role, e.content) for e in state.memory_entries if e.role != "system"]


def test_a_warm_bridge_goes_on_from_what_another_process_stored_in_between(
        bridge: Bridge, project: Path, server: ScriptedOpenAIServer, scripted: list[Any],
        warm: subprocess.Popen[bytes]) -> None:
    scripted.extend([text("A1"), text("A2"), text("A3"), text("A4")])
    # 1) The warm bridge serves the first turn (and keeps what it decoded).
    first = ask(warm, project, chat([user("one")], new_session=True, request_id="r1"))
    session_id = one(first, "session_init")["session_id"]
    history = [user("one"), assistant("A1"), user("two")]
    # 2) Another process serves the next turn of the same session.
    other = bridge.run(chat(history, session_id=session_id, request_id="r2"))
    assert one(other, "finish")["finish_reason"] == "stop"
    assert one(other, "session_init")["session_id"] == session_id
    # 3) The warm bridge goes on: it sees the other process's turn, stores after it.
    history += [assistant("A2"), user("three")]
    third = ask(warm, project, chat(history, session_id=session_id, request_id="r3"))
    init = one(third, "session_init")
    assert (init["session_id"], init["recovered"]) == (session_id, False)
    assert [e for e in third if e["type"] in ("warning", "error")] == []
    assert sent(server) == [("user", "one"), ("assistant", "A1"), ("user", "two"),
                            ("assistant", "A2"), ("user", "three")]
    # 4) And once more, after its own turn: still exact.
    history += [assistant("A3"), user("four")]
    fourth = ask(warm, project, chat(history, session_id=session_id, request_id="r4"))
    assert one(fourth, "finish")["finish_reason"] == "stop"
    assert sent(server)[-3:] == [("user", "three"), ("assistant", "A3"), ("user", "four")]
    assert stored(bridge, session_id) == [
        ("user", "one"), ("assistant", "A1"), ("user", "two"), ("assistant", "A2"),
        ("user", "three"), ("assistant", "A3"), ("user", "four"), ("assistant", "A4")]


def test_a_warm_bridge_reads_the_database_that_is_there_now(
        bridge: Bridge, project: Path, server: ScriptedOpenAIServer, scripted: list[Any],
        warm: subprocess.Popen[bytes]) -> None:
    """The project's database is moved away between two requests: the warm bridge does
    what a new process would (the host's history seeds a session in the new database), and
    the old file is left as it was."""
    scripted.extend([text("A1"), text("A2")])
    first = ask(warm, project, chat([user("one")], new_session=True, request_id="r1"))
    session_id = one(first, "session_init")["session_id"]
    moved = project / "moved.db"
    for path in sorted(bridge.db.parent.glob("sessions.db*")):
        path.rename(moved.with_name(path.name.replace("sessions", "moved")))
    history = [user("one"), assistant("A1"), user("two")]
    again = ask(warm, project, chat(history, session_id=session_id, request_id="r2"))
    assert one(again, "finish")["finish_reason"] == "stop"
    assert sent(server) == [("user", "one"), ("assistant", "A1"), ("user", "two")]
    now = one(again, "session_init")["session_id"]
    assert stored(bridge, now) == [("user", "one"), ("assistant", "A1"), ("user", "two"),
                                   ("assistant", "A2")]
    before = load_stored(moved, session_id)
    assert before is not None
    assert [(e.role, e.content) for e in before.memory_entries
            if e.role != "system"] == [("user", "one"), ("assistant", "A1")]
