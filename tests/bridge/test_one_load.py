"""A bridge turn reads its session from the store once: the decision chain's read is the
one the turn runs on, checked (by its stored revision) once the turn holds the lease.

The requests run in this process through ``BridgeHandler``, as a long-lived bridge runs
them (one ``BridgeReuse`` for all), against a real SQLite project and a scripted
OpenAI-compatible server; every ``load_session`` of the real store is counted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nonoka.bridge.handler import BridgeHandler
from nonoka.bridge.reuse import BridgeReuse
from nonoka.protocol.models import BaseEvent, ChatRequest, validate_request
from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore
from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.support.bridge import assistant, chat, tool_message, user
from tests.support.processes import model_env

Loads = list[str]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Loads:
    """The session ids every SQLite store of this process is asked to load."""
    seen: Loads = []
    real = SQLiteCheckpointStore.load_session

    async def counted(self: SQLiteCheckpointStore, session_id: str) -> Any:
        seen.append(session_id)
        return await real(self, session_id)

    monkeypatch.setattr(SQLiteCheckpointStore, "load_session", counted)
    return seen


def _turn(project: Path, reuse: BridgeReuse | None,
          request: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def send(event: BaseEvent) -> None:
        events.append(event.model_dump(mode="json"))

    raw = {"cwd": str(project), **request}
    validated = validate_request(raw)
    assert isinstance(validated, ChatRequest)
    asyncio.run(BridgeHandler(validated, send, raw, None, reuse).handle())
    assert events[-1]["type"] == "finish", events[-1]
    return events


def _session_id(events: list[dict[str, Any]]) -> str:
    return str(next(e for e in events if e["type"] == "session_init")["session_id"])


@pytest.mark.parametrize("kept", [True, False], ids=["long-lived", "fresh"])
def test_each_turn_reads_its_session_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted: list[Step],
        server: ScriptedOpenAIServer, loads: Loads, kept: bool) -> None:
    for name, value in model_env(server.base_url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NONOKA_EARLY_DISPATCH", "0")
    reuse = BridgeReuse() if kept else None

    def turn(request: dict[str, Any]) -> list[dict[str, Any]]:
        return _turn(tmp_path, reuse, request)

    scripted.append(text("hi there"))
    first = turn(chat([user("hello")]))
    sid = _session_id(first)
    assert loads == []  # a new session is made, never read

    scripted.append(text("fine"))
    history = [user("hello"), assistant("hi there"), user("how are you?")]
    turn(chat(history, session_id=sid))
    assert loads == [sid]

    scripted.append(call("run", {"cmd": "ls"}, id="c1"))
    history = [*history, assistant("fine"), user("list the files")]
    paused = turn(chat(history, session_id=sid, tools=[
        {"name": "run", "description": "run a command", "parameters": {"type": "object"}}]))
    assert any(e["type"] == "tool_call" for e in paused)
    assert loads == [sid, sid]

    scripted.append(text("two files"))
    calls = [{"id": "c1", "name": "run", "arguments": '{"cmd": "ls"}'}]
    history = [*history, assistant("", calls), tool_message("c1", "a b")]
    turn(chat(history, session_id=sid, tools=[
        {"name": "run", "description": "run a command", "parameters": {"type": "object"}}]))
    assert loads == [sid, sid, sid]
