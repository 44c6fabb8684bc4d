"""Tool approval: a pause that another process resolves; counters survive restarts."""

from __future__ import annotations

import pytest

from nonoka import Agent, Runner, ToolApproval, tool
from nonoka.errors import ToolResultMismatchError
from nonoka.extensions.approval import NAMESPACE, pending_approvals
from nonoka.state.session_state import SessionStatus
from nonoka.store.base import CheckpointStore
from nonoka.testing import ScriptedModel, call, text

deleted: list[str] = []


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"


def agent(model: ScriptedModel) -> Agent:
    return Agent(model=model, tools=[delete_file], extensions=[ToolApproval()])


async def test_approval_pauses_and_a_later_process_decides(store: CheckpointStore) -> None:
    deleted.clear()
    first = await Runner(store).run_react(
        agent(ScriptedModel([call("delete_file", {"path": "a"}, id="d1")])), "clean up")
    assert first.paused and [c.id for c in first.pending_approvals] == ["d1"]
    assert deleted == []
    state = await store.load_session(first.session_id)
    assert state is not None and state.status == SessionStatus.PAUSED
    assert list(pending_approvals(state.extension_state)) == ["d1"]

    # Resuming without a decision stays paused and does not count the request twice.
    still = await Runner(store).resume(agent(ScriptedModel([])), first.session_id)
    assert still.paused and deleted == []

    with pytest.raises(ToolResultMismatchError, match="no tool call 'zz'"):
        await Runner(store).approve_tool_call(first.session_id, "zz")
    await Runner(store).approve_tool_call(first.session_id, "d1", approved=True)
    model = ScriptedModel([call("delete_file", {"path": "b"}, id="d2")])
    second = await Runner(store).resume(agent(model), first.session_id)
    assert deleted == ["a"] and second.paused

    await Runner(store).approve_tool_call(first.session_id, "d2", approved=False, note="keep b")
    model3 = ScriptedModel([text("ok, kept b")])
    third = await Runner(store).resume(agent(model3), first.session_id)
    assert third.success and deleted == ["a"]
    denial = model3.requests[0].messages[-1]
    assert denial.role == "tool" and "denied" in denial.content and "keep b" in denial.content

    final = await store.load_session(first.session_id)
    assert final is not None
    assert final.extension_state[NAMESPACE]["counters"] == {
        "requested": 2, "approved": 1, "denied": 1}, "counters were reset by a restart"
