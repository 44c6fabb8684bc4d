"""Plans: layers, concurrency, references, failure, and resume skipping done steps."""

from __future__ import annotations

import asyncio

import pytest

from nonoka import Agent, Plan, Ref, Runner, Step, tool
from nonoka.errors import ConfigurationError
from nonoka.state.session_state import SessionStatus, StepStatus
from nonoka.store.base import CheckpointStore
from nonoka.testing import ScriptedModel


def test_layers_follow_dependencies_and_references() -> None:
    plan = Plan(steps=[
        Step(id="c", tool="t", args={"x": Ref("a"), "y": {"deep": [Ref("b", path="v")]}}),
        Step(id="a", tool="t"),
        Step(id="b", tool="t"),
        Step(id="d", prompt="use {{c}} and {{a.k}}"),
        Step(id="e", tool="t", depends_on=["a"]),
    ])
    assert plan.layers == [["a", "b"], ["c", "e"], ["d"]]


@pytest.mark.parametrize(("steps", "message"), [
    ([Step(id="a", tool="t", depends_on=["zz"])], "unknown step"),
    ([Step(id="a", tool="t", depends_on=["b"]), Step(id="b", tool="t", depends_on=["a"])],
     "cycle"),
    ([Step(id="a", tool="t"), Step(id="a", tool="t")], "duplicate"),
])
def test_bad_plans_are_refused(steps: list[Step], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Plan(steps=steps)


def test_a_step_needs_exactly_one_action() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Step(id="a")


async def test_steps_of_a_layer_run_concurrently_and_refs_resolve(runner: Runner) -> None:
    both_running = asyncio.Event()
    running = 0

    @tool
    async def fetch(name: str) -> dict[str, str]:
        """Fetch a record; waits until its sibling runs too, proving concurrency."""
        nonlocal running
        running += 1
        if running == 2:
            both_running.set()
        await asyncio.wait_for(both_running.wait(), timeout=5)
        return {"name": name.upper()}

    @tool
    def join(left: dict[str, str], right: str) -> str:
        """Join two values."""
        return f"{left['name']}+{right}"

    plan = Plan(steps=[
        Step(id="a", tool="fetch", args={"name": "ann"}),
        Step(id="b", tool="fetch", args={"name": "bob"}),
        Step(id="c", tool="join", args={"left": Ref("a"), "right": Ref("b", path="name")}),
        Step(id="d", prompt="Greet {{c}}"),
    ])
    model = ScriptedModel(["Hello ANN+BOB"])
    result = await runner.run_plan(Agent(model=model, tools=[fetch, join]), plan)
    assert result.success, result.error
    assert result.output == {"a": {"name": "ANN"}, "b": {"name": "BOB"}, "c": "ANN+BOB",
                             "d": "Hello ANN+BOB"}
    assert model.requests[0].messages[-1].content == "Greet ANN+BOB"
    session = await runner.load_session(result.session_id)
    assert session is not None
    assert set(session.step_statuses.values()) == {StepStatus.COMPLETED}
    assert session.usage.tool_calls == 3 and session.usage.model_turns == 1


async def test_a_failing_step_fails_the_plan_and_skips_dependents(store: CheckpointStore) -> None:
    calls: list[str] = []

    @tool(idempotent=True)
    def work(name: str, fail: bool = False) -> str:
        """Do some work."""
        calls.append(name)
        if fail:
            raise ValueError(f"{name} broke")
        return name

    plan = Plan(steps=[Step(id="ok", tool="work", args={"name": "ok"}),
                       Step(id="bad", tool="work", args={"name": "bad", "fail": True},
                            max_attempts=2),
                       Step(id="after", tool="work", args={"name": "after"}, depends_on=["bad"])])
    agent = Agent(model=ScriptedModel([]), tools=[work])
    result = await Runner(store).run_plan(agent, plan)
    assert not result.success and result.status == SessionStatus.FAILED
    assert "bad broke" in (result.error or "")
    assert calls.count("bad") == 2 and "after" not in calls
    state = await store.load_session(result.session_id)
    assert state is not None
    assert state.failed_steps["bad"].attempts == 2
    assert state.step_statuses["bad"] == StepStatus.FAILED
    assert state.completed_steps["ok"].output == "ok"
    again = await Runner(store).resume(agent, result.session_id)
    assert not again.success and calls.count("bad") == 2, "a failed session must return at once"


async def test_rerunning_a_plan_skips_completed_steps(store: CheckpointStore) -> None:
    calls: list[str] = []
    flaky = {"fail": True}

    @tool(idempotent=True)
    def step(name: str) -> str:
        """Record the call; fails once for 'c'."""
        calls.append(name)
        if name == "c" and flaky["fail"]:
            flaky["fail"] = False
            raise RuntimeError("transient")
        return name

    plan = Plan(steps=[Step(id=n, tool="step", args={"name": n}) for n in "ab"]
                + [Step(id="c", tool="step", args={"name": "c"}, depends_on=["a", "b"])])
    agent = Agent(model=ScriptedModel([]), tools=[step])
    first = await Runner(store).run_plan(agent, plan, session_id="plan-retry")
    assert not first.success
    second = await Runner(store).run_plan(agent, plan, session_id="plan-retry")
    assert second.success
    assert sorted(calls) == ["a", "b", "c", "c"]
    state = await store.load_session("plan-retry")
    assert state is not None and "c" not in state.failed_steps
