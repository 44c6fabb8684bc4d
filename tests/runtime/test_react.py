"""The ReAct loop through the public API, on every storage engine."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from nonoka import Agent, Runner, RunResult, tool
from nonoka.errors import ConfigurationError, ToolResultMismatchError
from nonoka.events import RunEvent, RunWarning, TextDelta, ToolCallFinished, ToolCallRequested
from nonoka.llm.base import ModelResponse, Usage
from nonoka.runtime.session import Session
from nonoka.runtime.tools import RunContext, host_tool
from nonoka.runtime.window import MemoryBackend
from nonoka.state.entries import MemoryEntry, dangling_tool_calls
from nonoka.state.ledger import RuntimeLimits
from nonoka.state.messages import Message, ToolCall, ToolResult
from nonoka.state.session_state import CompletionContract, SessionStatus
from nonoka.store.base import CheckpointStore
from nonoka.testing import ScriptedModel, call, calls, text


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


def assert_no_dangling(entries: Sequence[MemoryEntry]) -> None:
    _, dangling = dangling_tool_calls(entries)
    assert dangling == [], f"dangling calls in stored history: {dangling}"


async def test_plain_answer_completes_and_records_usage(runner: Runner) -> None:
    model = ScriptedModel([text("hello there", input_tokens=7, output_tokens=3, cost_usd=0.01)])
    result = await runner.run_react(Agent(model=model, system_prompt="be nice"), "hi")
    assert result.success and result.output == "hello there"
    assert result.status == SessionStatus.COMPLETED
    assert result.termination is not None and result.termination.reason == "completed"
    assert (result.usage.model_turns, result.usage.input_tokens, result.usage.output_tokens) == (
        1, 7, 3)
    assert result.usage.cost_usd == pytest.approx(0.01)
    assert [m.role for m in model.requests[0].messages] == ["system", "user"]
    model.assert_done()


async def test_tool_results_flow_back_to_the_model(runner: Runner) -> None:
    model = ScriptedModel([call("add", {"a": 2, "b": 3}, id="c1"), text("5")])
    events: list[RunEvent] = []
    result = await runner.run_react(Agent(model=model, tools=[add]), "2+3?", on_event=events.append)
    assert result.output == "5"
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool"]
    assert second[1].tool_calls == [ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}')]
    assert second[2].tool_call_id == "c1" and second[2].content == "5"
    assert [t.name for t in model.requests[0].tools] == ["add"]
    assert any(isinstance(e, ToolCallRequested) and e.executed_by == "nonoka" for e in events)
    assert any(isinstance(e, ToolCallFinished) and e.content == "5" for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "5"
    assert result.usage.tool_calls == 1


async def test_continuing_a_session_restores_its_memory(store: CheckpointStore) -> None:
    first = await Runner(store).run_react(Agent(model=ScriptedModel([text("I am Bob")])), "who?")
    model = ScriptedModel([text("You asked who I am")])
    second = await Runner(store).run_react(Agent(model=model), "what did I ask?",
                                           session_id=first.session_id)
    assert second.session_id == first.session_id
    assert [m.content for m in model.requests[0].messages] == ["who?", "I am Bob",
                                                                "what did I ask?"]
    history = await MemoryBackend(store).get_history(first.session_id)
    assert [e.content for e in history] == ["who?", "I am Bob", "what did I ask?",
                                            "You asked who I am"]
    session = await Runner(store).load_session(first.session_id)
    assert session is not None and session.turn_count == 2


async def test_a_caller_chosen_id_names_the_new_session(runner: Runner) -> None:
    result = await runner.run_react(Agent(model=ScriptedModel(["ok"])), "hi", session_id="my-id-1")
    assert result.session_id == "my-id-1"
    assert await runner.load_session("my-id-1") is not None


async def test_invalid_session_ids_are_refused(runner: Runner) -> None:
    for bad in ["../etc/passwd", "a b", "", "x" * 200, "id'; DROP TABLE checkpoints;--"]:
        with pytest.raises(ConfigurationError, match="invalid session id"):
            await runner.run_react(Agent(model=ScriptedModel([])), "hi", session_id=bad)


async def test_tool_failures_and_unknown_tools_reach_the_model(runner: Runner) -> None:
    model = ScriptedModel([
        calls(("explode", {"reason": "x"}, "e1"), ("nope", {}, "n1"), ("add", {"a": "z"}, "a1")),
        text("sorry"),
    ])
    result = await runner.run_react(Agent(model=model, tools=[add, explode]), "go")
    assert result.success
    tool_msgs = {m.tool_call_id: m.content for m in model.requests[1].messages if m.role == "tool"}
    assert tool_msgs["e1"] == "RuntimeError: boom: x"
    assert "unknown tool 'nope'" in tool_msgs["n1"] and "add" in tool_msgs["n1"]
    assert "invalid arguments for 'add'" in tool_msgs["a1"]


async def test_model_turn_limit_survives_a_new_runner(store: CheckpointStore) -> None:
    limits = RuntimeLimits(max_model_turns=2)
    agent = Agent(model=ScriptedModel([call("add", {"a": 1, "b": 1}), text("2")]), tools=[add],
                  limits=limits)
    first = await Runner(store).run_react(agent, "1+1")
    assert first.success and first.usage.model_turns == 2
    again = Agent(model=ScriptedModel([]), tools=[add], limits=limits)
    second = await Runner(store).run_react(again, "more", session_id=first.session_id)
    assert not second.success
    assert second.termination is not None and second.termination.limit == "max_model_turns"
    assert second.usage.model_turns == 2, "the ledger was reset instead of restored"
    raised = await Runner(store).run_react(Agent(model=ScriptedModel(["ok"])), "more",
                                           session_id=first.session_id,
                                           limits=RuntimeLimits(max_model_turns=3))
    assert raised.success and raised.usage.model_turns == 3


async def test_tool_call_limit_gives_every_call_a_result(runner: Runner) -> None:
    model = ScriptedModel([calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4}))])
    agent = Agent(model=model, tools=[add], limits=RuntimeLimits(max_tool_calls=1))
    result = await runner.run_react(agent, "go")
    assert not result.success and result.termination is not None
    assert result.termination.limit == "max_tool_calls"
    session = await runner.load_session(result.session_id)
    assert session is not None
    assert_no_dangling(session.memory.entries)
    assert session.memory.entries[-1].content.startswith("not run: max_tool_calls reached")


async def test_token_and_cost_limits(runner: Runner) -> None:
    add_call = ToolCall(id="t1", name="add", arguments='{"a": 1, "b": 2}')
    expensive = ModelResponse(tool_calls=[add_call], usage=Usage(500, 600, 0.5))
    model = ScriptedModel([expensive])
    agent = Agent(model=model, tools=[add], limits=RuntimeLimits(max_total_tokens=1000))
    result = await runner.run_react(agent, "go")
    assert result.termination is not None and result.termination.limit == "max_total_tokens"
    assert "1100" in (result.error or "")


async def test_host_tools_pause_and_resume_with_results(store: CheckpointStore) -> None:
    write = host_tool("write", "Write a file", {"type": "object",
                                                 "properties": {"path": {"type": "string"}}})
    model = ScriptedModel([call("write", {"path": "a.txt"}, id="w1")])
    first = await Runner(store).run_react(Agent(model=model, tools=[write]), "make a file")
    assert first.paused and first.status == SessionStatus.PAUSED
    assert [c.id for c in first.pending_tool_calls] == ["w1"]

    model2 = ScriptedModel([text("file written")])
    agent2 = Agent(model=model2, tools=[write])
    with pytest.raises(ToolResultMismatchError, match="answers no pending call"):
        await Runner(store).submit_tool_results(agent2, first.session_id,
                                                [ToolResult(tool_call_id="zzz", content="?")])
    untouched = await Runner(store).load_session(first.session_id)
    assert untouched is not None and len(untouched.memory) == 2

    done = await Runner(store).submit_tool_results(
        agent2, first.session_id, [ToolResult(tool_call_id="w1", content="ok")])
    assert done.success and done.output == "file written"
    assert [m.role for m in model2.requests[0].messages] == ["user", "assistant", "tool"]


async def test_a_new_prompt_closes_calls_the_host_never_answered(runner: Runner) -> None:
    write = host_tool("write")
    first = await runner.run_react(Agent(model=ScriptedModel([call("write", id="w")]),
                                         tools=[write]), "go")
    assert first.paused
    model = ScriptedModel(["fine"])
    second = await runner.run_react(Agent(model=model, tools=[write]), "never mind",
                                    session_id=first.session_id)
    assert second.success
    roles = [m.role for m in model.requests[0].messages]
    assert roles == ["user", "assistant", "tool", "user"]


async def test_cancel_session_is_persisted_and_leaves_no_dangling_call(runner: Runner) -> None:
    write = host_tool("write")
    first = await runner.run_react(Agent(model=ScriptedModel([call("write")]), tools=[write]), "x")
    assert await runner.cancel_session(first.session_id)
    session = await runner.load_session(first.session_id)
    assert session is not None and session.status == SessionStatus.CANCELLED
    assert session.runtime.cancelled_at is not None
    assert_no_dangling(session.memory.entries)
    assert not await runner.cancel_session(first.session_id)
    assert not await runner.cancel_session("unknown-session")
    resumed = await runner.resume(Agent(model=ScriptedModel([])), first.session_id)
    assert resumed.status == SessionStatus.CANCELLED


async def test_task_cancellation_mid_tool_persists_a_valid_history(runner: Runner) -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Takes forever."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    agent = Agent(model=ScriptedModel([call("slow", id="s1")]), tools=[slow])
    task = asyncio.create_task(runner.run_react(agent, "go", session_id="cancel-me"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    session = await runner.load_session("cancel-me")
    assert session is not None and session.status == SessionStatus.CANCELLED
    assert_no_dangling(session.memory.entries)


async def test_model_failure_marks_the_session_failed(runner: Runner) -> None:
    from nonoka.errors import ModelError

    failing = ScriptedModel([call("add", {"a": 1, "b": 1}),
                             ModelError("endpoint down", endpoint="http://x", status=503)])
    result = await runner.run_react(Agent(model=failing, tools=[add]), "go")
    assert not result.success and result.status == SessionStatus.FAILED
    assert result.error is not None and "endpoint down" in result.error
    session = await runner.load_session(result.session_id)
    assert session is not None
    assert_no_dangling(session.memory.entries)
    again = await runner.run_react(Agent(model=ScriptedModel(["back"]), tools=[add]), "retry",
                                   session_id=result.session_id)
    assert again.success


async def test_missing_model_configuration_stores_nothing(runner: Runner) -> None:
    with pytest.raises(ConfigurationError, match="provider:model"):
        await runner.run_react(Agent(model="gpt-4o"), "hi", session_id="never-stored")
    assert await runner.load_session("never-stored") is None


async def test_completion_contract_sends_the_model_back(runner: Runner) -> None:
    model = ScriptedModel([text("done!"), call("add", {"a": 1, "b": 1}), text("done: 2")])
    agent = Agent(model=model, tools=[add],
                  completion_contract=CompletionContract(required_tools=["add"]))
    result = await runner.run_react(agent, "add things")
    assert result.success and result.output == "done: 2"
    nudge = model.requests[1].messages[-1]
    assert nudge.role == "user" and "call the tool 'add'" in nudge.content
    model.assert_done()


async def test_tools_receive_deps_through_the_context(runner: Runner) -> None:
    @tool
    def whoami(ctx: RunContext[dict[str, str]]) -> str:
        """Say who the user is."""
        return f"{ctx.deps['user']} in {ctx.session_id}"

    model = ScriptedModel([call("whoami"), "ok"])
    await runner.run_react(Agent(model=model, tools=[whoami]), "?", deps={"user": "ana"},
                           session_id="deps-1")
    assert model.requests[1].messages[-1].content == "ana in deps-1"
    assert "ctx" not in model.requests[0].tools[0].parameters.get("properties", {})


async def test_compaction_trims_without_splitting_tool_pairs(runner: Runner) -> None:
    long = "x" * 400  # ~100 tokens each
    model = ScriptedModel([text(long), call("add", {"a": 1, "b": 2}), text(long), text("end")])
    agent = Agent(model=model, tools=[add], system_prompt="sys",
                  limits=RuntimeLimits(max_context_tokens=260))
    sid = (await runner.run_react(agent, long)).session_id
    await runner.run_react(agent, "add", session_id=sid)
    result = await runner.run_react(agent, long, session_id=sid)
    assert result.success
    for request in model.requests:
        messages = request.messages
        assert messages[0].role == "system"
        _assert_pairs_intact(messages)
    session = await runner.load_session(sid)
    assert session is not None and session.memory.generation >= 1
    assert session.memory.entries[-1].content == "end"


async def test_compaction_can_summarise_through_the_model(runner: Runner) -> None:
    long = "y" * 400
    model = ScriptedModel([text(long), text("summary: user sent y's"), text("ok")])
    agent = Agent(model=model, limits=RuntimeLimits(max_context_tokens=150,
                                                    summarize_on_compaction=True))
    sid = (await runner.run_react(agent, "first " + long)).session_id
    result = await runner.run_react(agent, "second", session_id=sid)
    assert result.success
    final = model.requests[2].messages
    assert final[0].content.endswith("summary: user sent y's")
    assert final[-1].content == "second"


def _assert_pairs_intact(messages: list[Message]) -> None:
    open_ids: set[str] = set()
    for message in messages:
        if message.role == "tool":
            assert message.tool_call_id in open_ids, "tool result without its call"
        if message.role == "assistant":
            open_ids = {c.id for c in message.tool_calls or []}


async def test_session_round_trips_through_its_snapshot(runner: Runner) -> None:
    result = await runner.run_react(Agent(model=ScriptedModel([call("add", {"a": 1, "b": 2}),
                                                                "3"]), tools=[add]), "sum")
    session = await runner.load_session(result.session_id)
    assert session is not None
    state = session.to_state()
    again = Session.from_state(state).to_state()
    assert again.model_dump(exclude={"runtime_state"}) == state.model_dump(
        exclude={"runtime_state"})
    assert again.runtime_state.usage.model_turns == 2


async def test_resume_unknown_and_finished_sessions(runner: Runner) -> None:
    missing: RunResult = await runner.resume(Agent(model=ScriptedModel([])), "no-such-session")
    assert not missing.success and "not found" in (missing.error or "")
    done = await runner.run_react(Agent(model=ScriptedModel(["fin"])), "x")
    model = ScriptedModel([])
    again = await runner.resume(Agent(model=model), done.session_id)
    assert again.success and again.output == "fin" and model.requests == []


async def test_warning_for_unknown_outcome_of_a_non_idempotent_call(runner: Runner) -> None:
    @tool
    def charge(amount: int) -> str:
        """Charge a card (not safe to repeat)."""
        return "charged"

    session = Session("unknown-outcome")
    session.memory.append(MemoryEntry.make("user", "pay"))
    call_ = ToolCall(id="p1", name="charge", arguments='{"amount": 5}')
    session.memory.append(MemoryEntry.assistant("", [call_]))
    session.record_intent(call_)
    await runner.store.save_session(session.to_state())
    events: list[Any] = []
    model = ScriptedModel(["I could not confirm the charge"])
    result = await runner.resume(Agent(model=model, tools=[charge]), "unknown-outcome",
                                 on_event=events.append)
    assert result.success
    assert any(isinstance(e, RunWarning) and e.code == "tool_outcome_unknown" for e in events)
    tool_msg = model.requests[0].messages[-1]
    assert tool_msg.role == "tool" and tool_msg.content.startswith("outcome unknown")
