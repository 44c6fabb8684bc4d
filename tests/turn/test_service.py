"""The turn service against a real SQLite project database and in-process models."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nonoka.events import RunWarning, TextDelta
from nonoka.llm.base import ModelResponse, Usage
from nonoka.runtime.agent import Agent
from nonoka.runtime.session import Session
from nonoka.state.messages import Message
from nonoka.state.session_state import SessionStatus
from nonoka.store.lease_terms import new_lease_owner
from nonoka.testing import FunctionModel, ScriptedModel, text
from nonoka.turn.outcome import TurnOutcome
from nonoka.turn.service import (
    Chooser,
    Opening,
    SessionOpened,
    TurnEvent,
    TurnInput,
    TurnService,
)


def agent(*answers: str) -> Agent:
    return Agent(model=ScriptedModel([text(a, input_tokens=3, output_tokens=2)
                                      for a in answers]))


async def kinds(project: Path, session_id: str) -> list[str]:
    turn = TurnService.open(project)
    try:
        return [e.kind for e in await turn.stores.events.list_events(session_id, limit=100)]
    finally:
        await turn.close()


async def one_turn(project: Path, opening: Opening | Chooser, model_agent: Agent,
                   events: list[TurnEvent] | None = None) -> TurnOutcome:
    turn = TurnService.open(project, title="greeting", metadata={"source": "test"})
    try:
        outcome = await turn.run(model_agent, opening, request={"source": "test"},
                                 on_event=None if events is None else events.append)
        await turn.finish(outcome.finish_reason)
        return outcome
    finally:
        await turn.close()


async def test_a_new_session_is_announced_first_then_run_and_recorded(tmp_path: Path) -> None:
    events: list[TurnEvent] = []
    warning = RunWarning("heads_up", "something to know", {"n": 1})
    outcome = await one_turn(tmp_path, Opening(None, TurnInput("prompt", "hi"),
                                               seed=[Message(role="user", content="earlier"),
                                                     Message(role="assistant", content="ok")],
                                               warnings=[warning]),
                             agent("hello"), events)
    assert outcome.finish_reason == "stop" and outcome.new and outcome.failure is None
    assert outcome.result is not None and outcome.result.output == "hello"
    sid = outcome.session_id
    assert sid is not None
    assert events[0] == SessionOpened(sid, True, None)
    assert events[1] == warning
    assert TextDelta("hello") in events
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (3, 2)
    assert await kinds(tmp_path, sid) == ["request", "session", "warning", "model_call",
                                          "finish"]
    turn = TurnService.open(tmp_path)
    try:
        record = await turn.stores.index.get_session(sid)
        session = await turn.runner.load_session(sid)
    finally:
        await turn.close()
    assert record is not None and record.title == "greeting"
    assert record.metadata == {"source": "test"} and record.status == "completed"
    assert session is not None
    assert [e.content for e in session.memory.entries] == ["earlier", "ok", "hi", "hello"]


async def test_a_planner_sees_the_session_as_stored_once_the_lease_is_held(
        tmp_path: Path) -> None:
    first = await one_turn(tmp_path, Opening(None, TurnInput("prompt", "one")), agent("1"))
    assert first.session_id is not None
    seen: list[list[str]] = []

    def plan(session: Session) -> TurnInput:
        seen.append([e.content for e in session.memory.entries])  # as stored, under the lease
        return TurnInput("prompt", "two")

    # The id alone: the service loads the session under the lease for the planner.
    second = await one_turn(tmp_path, Opening(first.session_id, plan), agent("2"))
    assert second.finish_reason == "stop" and not second.new
    assert seen == [["one", "1"]]
    assert await kinds(tmp_path, first.session_id) == [
        "request", "session", "model_call", "finish",
        "request", "session", "model_call", "finish"]


async def test_a_busy_session_is_a_failure_in_the_outcome(tmp_path: Path) -> None:
    first = await one_turn(tmp_path, Opening(None, TurnInput("prompt", "one")), agent("1"))
    sid = first.session_id
    assert sid is not None
    holder = TurnService.open(tmp_path)
    try:
        assert await holder.stores.leases.acquire_lease(sid, new_lease_owner(), 600)
        outcome = await one_turn(tmp_path, Opening(sid, TurnInput("prompt", "two")),
                                 agent())
    finally:
        await holder.close()
    assert outcome.finish_reason == "error" and outcome.result is None
    assert outcome.failure is not None
    assert (outcome.failure.code, outcome.failure.retryable) == ("session_busy", True)
    assert (await kinds(tmp_path, sid))[-3:] == ["session", "error", "finish"]


async def test_a_failed_model_call_is_a_model_error(tmp_path: Path) -> None:
    from nonoka.errors import ModelError

    def fail(_messages: list[Message], _tools: object) -> str:
        raise ModelError("rate limited", status=429, retryable=True)

    outcome = await one_turn(tmp_path, Opening(None, TurnInput("prompt", "hi")),
                             Agent(model=FunctionModel(fail)))
    assert outcome.finish_reason == "error" and outcome.result is not None
    assert outcome.failure is not None
    assert (outcome.failure.code, outcome.failure.retryable) == ("model_error", True)
    assert "rate limited" in outcome.failure.message


async def test_a_bug_before_the_session_is_known_is_an_internal_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def choose() -> Opening:
        raise RuntimeError("the chooser broke")

    outcome = await one_turn(tmp_path, choose, agent())
    assert outcome.finish_reason == "error" and outcome.session_id is None
    assert outcome.failure is not None and outcome.failure.code == "internal_error"
    assert "the chooser broke" in outcome.failure.message
    assert "Traceback" in capsys.readouterr().err


async def test_a_cancelled_turn_is_saved_and_ends_cancelled(tmp_path: Path) -> None:
    called = asyncio.Event()

    async def never(_messages: list[Message], _tools: object) -> str:
        called.set()
        await asyncio.Event().wait()
        return "unreachable"

    task = asyncio.ensure_future(one_turn(tmp_path, Opening(None, TurnInput("prompt", "hi")),
                                          Agent(model=FunctionModel(never))))
    await called.wait()
    task.cancel()
    outcome = await task
    assert outcome.finish_reason == "cancelled" and outcome.session_id is not None
    turn = TurnService.open(tmp_path)
    try:
        session = await turn.runner.load_session(outcome.session_id)
        finish = (await turn.stores.events.list_events(outcome.session_id))[-1]
    finally:
        await turn.close()
    assert session is not None and session.status == SessionStatus.CANCELLED
    assert finish.kind == "finish" and finish.data["finish_reason"] == "cancelled"


def test_the_turn_service_knows_no_front_end() -> None:
    """``turn/`` serves the bridge and the CLI; it imports neither (nor the provider)."""
    front_ends = ("nonoka.bridge", "nonoka.cli", "nonoka.provider")
    package = Path(__file__).parents[2] / "src" / "nonoka" / "turn"
    for source in package.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.startswith(front_ends)]
            assert not bad, f"{source.name} imports {bad}"
    code = ("import sys, nonoka.turn.service; print(sorted(m for m in sys.modules "
            f"if m.startswith({front_ends!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.replace("'", '"')) == []


async def test_the_models_own_finish_reason_is_in_the_outcome_and_the_timeline(
        tmp_path: Path) -> None:
    cut = ModelResponse(text="Once upon a", finish_reason="length",
                        usage=Usage(input_tokens=3, output_tokens=2))
    outcome = await one_turn(tmp_path, Opening(None, TurnInput("prompt", "a story")),
                             Agent(model=ScriptedModel([cut])))
    # the turn itself ended well; the model says it cut the answer at its limit
    assert outcome.finish_reason == "stop" and outcome.model_finish == "length"
    assert outcome.session_id is not None
    turn = TurnService.open(tmp_path)
    try:
        logged = await turn.stores.events.list_events(outcome.session_id, limit=100)
    finally:
        await turn.close()
    assert [e.data.get("finish") for e in logged if e.kind == "model_call"] == ["length"]
    answered = await one_turn(tmp_path, Opening(outcome.session_id, TurnInput("prompt", "hi")),
                              agent("hello"))
    assert answered.model_finish == "stop"
