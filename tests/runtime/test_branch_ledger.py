"""A branch's ledger is what its parent had spent up to the fork point, plus its own:
never the parent's turns after the fork point."""

from __future__ import annotations

from pathlib import Path

from nonoka import Agent, Runner
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing import ScriptedModel, text


async def test_a_branch_counts_what_came_before_its_fork_point_and_its_own(
        tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    try:
        model = ScriptedModel([text("a1", input_tokens=100, output_tokens=10, cost_usd=0.01),
                               text("a2", input_tokens=200, output_tokens=20, cost_usd=0.02),
                               text("a3", input_tokens=300, output_tokens=30, cost_usd=0.03),
                               text("b", input_tokens=40, output_tokens=4, cost_usd=0.004)])
        agent = Agent(model=model)
        runner = Runner(store)
        first = await runner.run_react(agent, "q1")
        sid = first.session_id
        await runner.run_react(agent, "q2", session_id=sid)
        parent = await runner.run_react(agent, "q3", session_id=sid)
        assert parent.usage.input_tokens == 600
        branch_id = await runner.fork_session(sid, 2)  # after the first exchange
        state = await store.load_session(branch_id)
        assert state is not None
        usage = state.runtime_state.usage
        assert (usage.model_turns, usage.input_tokens, usage.output_tokens) == (1, 100, 10)
        assert abs(usage.cost_usd - 0.01) < 1e-12
        ran = await runner.run_react(agent, "q2 again", session_id=branch_id)
        assert (ran.usage.model_turns, ran.usage.input_tokens) == (2, 140)
        again = await store.load_session(sid)
        assert again is not None and again.runtime_state.usage.input_tokens == 600
    finally:
        await store.close()
