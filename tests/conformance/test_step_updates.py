"""Step updates: merged over the snapshot in time order with the three protective rules."""

from __future__ import annotations

from typing import Any

from nonoka.state import SessionState, StepFailure, StepResult, StepStatus
from nonoka.store.base import CheckpointStore
from tests.conformance import states
from tests.conformance.engines import EngineHarness

FAILURE = StepFailure(error_type="TimeoutError", message="took too long", attempts=2)
RESULT = StepResult(output={"rows": [1, 2, 3]})


async def _session(store: CheckpointStore, **fields: Any) -> str:
    state = states.minimal(current_plan=states.plan(), **fields)
    await store.save_session(state)
    return state.session_id


async def _load(store: CheckpointStore, session_id: str) -> SessionState:
    state = await store.load_session(session_id)
    assert state is not None
    return state


# Rule 1: a terminal status is never overwritten by a non-terminal one.

async def test_terminal_snapshot_status_survives_a_late_running(store: CheckpointStore) -> None:
    sid = await _session(store, step_statuses={"fetch": StepStatus.COMPLETED,
                                               "parse": StepStatus.FAILED})
    await store.save_step_status(sid, "fetch", StepStatus.RUNNING)
    await store.save_step_status(sid, "parse", StepStatus.PENDING)
    state = await _load(store, sid)
    assert state.step_statuses["fetch"] == StepStatus.COMPLETED
    assert state.step_statuses["parse"] == StepStatus.FAILED


async def test_running_after_a_result_keeps_completed(store: CheckpointStore) -> None:
    sid = await _session(store)
    await store.save_step_result(sid, "fetch", RESULT)
    await store.save_step_status(sid, "fetch", StepStatus.RUNNING)
    state = await _load(store, sid)
    assert state.step_statuses["fetch"] == StepStatus.COMPLETED
    assert state.completed_steps["fetch"] == RESULT


async def test_statuses_move_forward(store: CheckpointStore) -> None:
    sid = await _session(store, step_statuses={"fetch": StepStatus.PENDING})
    await store.save_step_status(sid, "fetch", StepStatus.RUNNING)
    assert (await _load(store, sid)).step_statuses["fetch"] == StepStatus.RUNNING
    await store.save_step_status(sid, "fetch", StepStatus.COMPLETED)
    assert (await _load(store, sid)).step_statuses["fetch"] == StepStatus.COMPLETED
    await store.save_step_status(sid, "parse", StepStatus.SKIPPED)
    assert (await _load(store, sid)).step_statuses["parse"] == StepStatus.SKIPPED


# Rule 2: a result clears an earlier failure record.

async def test_result_after_error_clears_the_failure(store: CheckpointStore) -> None:
    sid = await _session(store)
    await store.save_step_error(sid, "fetch", FAILURE)
    await store.save_step_result(sid, "fetch", RESULT)
    state = await _load(store, sid)
    assert state.step_statuses["fetch"] == StepStatus.COMPLETED
    assert state.completed_steps["fetch"] == RESULT
    assert "fetch" not in state.failed_steps


async def test_result_clears_a_failure_in_the_snapshot(store: CheckpointStore) -> None:
    sid = await _session(store, step_statuses={"fetch": StepStatus.FAILED},
                         failed_steps={"fetch": FAILURE})
    await store.save_step_result(sid, "fetch", RESULT)
    state = await _load(store, sid)
    assert state.step_statuses["fetch"] == StepStatus.COMPLETED
    assert state.failed_steps == {}


# Rule 3: an error clears an earlier success record.

async def test_error_after_result_clears_the_success(store: CheckpointStore) -> None:
    sid = await _session(store)
    await store.save_step_result(sid, "fetch", RESULT)
    await store.save_step_error(sid, "fetch", FAILURE)
    state = await _load(store, sid)
    assert state.step_statuses["fetch"] == StepStatus.FAILED
    assert state.failed_steps["fetch"] == FAILURE
    assert "fetch" not in state.completed_steps


# Time order: the latest write of a kind decides, whichever kind came first.

async def test_rewriting_an_older_kind_moves_it_to_the_end(store: CheckpointStore) -> None:
    sid = await _session(store)
    await store.save_step_result(sid, "fetch", RESULT)
    await store.save_step_error(sid, "fetch", FAILURE)
    retried = StepResult(output="second try")
    await store.save_step_result(sid, "fetch", retried)
    state = await _load(store, sid)
    assert state.step_statuses["fetch"] == StepStatus.COMPLETED
    assert state.completed_steps["fetch"] == retried
    assert "fetch" not in state.failed_steps


async def test_many_quick_updates_keep_their_order(store: CheckpointStore) -> None:
    """Updates written within one clock tick must still merge in write order."""
    sid = await _session(store)
    for i in range(30):
        if i % 2:
            await store.save_step_error(sid, "fetch", FAILURE)
        else:
            await store.save_step_result(sid, "fetch", StepResult(output=i))
    state = await _load(store, sid)  # the last write (i = 29) was an error
    assert state.step_statuses["fetch"] == StepStatus.FAILED
    assert "fetch" not in state.completed_steps


async def test_updates_survive_reopen_and_resave(engine: EngineHarness) -> None:
    sid = await _session(engine.store)
    await engine.store.save_step_result(sid, "fetch", RESULT)
    await engine.store.save_step_error(sid, "parse", FAILURE)
    other = await engine.reopen()
    state = await _load(other, sid)
    assert state.completed_steps == {"fetch": RESULT}
    assert state.failed_steps == {"parse": FAILURE}
    await other.save_session(state)  # the merged view becomes the snapshot
    assert await _load(engine.store, sid) == states.stored_as(state, 2)


async def test_updates_before_the_first_snapshot_apply_once_it_exists(
    store: CheckpointStore,
) -> None:
    state = states.minimal(current_plan=states.plan())
    await store.save_step_status(state.session_id, "fetch", StepStatus.RUNNING)
    assert await store.load_session(state.session_id) is None
    await store.save_session(state)
    assert (await _load(store, state.session_id)).step_statuses == {"fetch": StepStatus.RUNNING}
