"""Revisions: a writer that raced another one fails loudly instead of overwriting it."""

from __future__ import annotations

import pytest

from nonoka.errors import SessionConflictError, StoreError
from nonoka.state import SessionStatus, StepStatus
from nonoka.store.base import CheckpointStore
from tests.conformance import states
from tests.conformance.engines import EngineHarness


async def test_saves_return_increasing_revisions(store: CheckpointStore) -> None:
    state = states.minimal()
    assert await store.save_session(state) == 1
    assert await store.save_session(states.stored_as(state, 1)) == 2
    loaded = await store.load_session(state.session_id)
    assert loaded is not None and loaded.revision == 2


async def test_new_session_conflicts_with_an_existing_row(store: CheckpointStore) -> None:
    state = states.minimal(turn_count=1)
    await store.save_session(state)
    with pytest.raises(SessionConflictError, match=state.session_id):
        await store.save_session(state.model_copy(update={"turn_count": 2}))
    loaded = await store.load_session(state.session_id)
    assert loaded is not None and loaded.turn_count == 1


async def test_stale_writer_conflicts_and_first_write_survives(engine: EngineHarness) -> None:
    state = states.full()
    await engine.store.save_session(state)
    second = await engine.reopen()
    a = await engine.store.load_session(state.session_id)
    b = await second.load_session(state.session_id)
    assert a is not None and b is not None
    a_turn = a.model_copy(update={"memory_entries": [*a.memory_entries, *states.turn(50)],
                                  "turn_count": a.turn_count + 1})
    b_turn = b.model_copy(update={"memory_entries": [*b.memory_entries, *states.turn(60),
                                                     *states.turn(61)],
                                  "status": SessionStatus.FAILED})
    assert await engine.store.save_session(a_turn) == 2
    before = engine.dump(state.session_id)
    with pytest.raises(SessionConflictError) as info:
        await second.save_session(b_turn)
    assert isinstance(info.value, StoreError)
    assert "revision 2" in str(info.value)
    assert engine.dump(state.session_id) == before
    assert await second.load_session(state.session_id) == states.stored_as(a_turn, 2)


async def test_saving_a_deleted_session_conflicts(store: CheckpointStore) -> None:
    state = states.minimal()
    await store.save_session(state)
    await store.delete_session(state.session_id)
    with pytest.raises(SessionConflictError, match="not stored"):
        await store.save_session(states.stored_as(state, 1))
    assert await store.load_session(state.session_id) is None


async def test_revision_ahead_of_store_conflicts(store: CheckpointStore) -> None:
    state = states.minimal()
    await store.save_session(state)
    with pytest.raises(SessionConflictError):
        await store.save_session(states.stored_as(state, 5))


async def test_step_updates_do_not_bump_the_revision(store: CheckpointStore) -> None:
    state = states.full()
    await store.save_session(state)
    await store.save_step_status(state.session_id, "notify", StepStatus.RUNNING)
    loaded = await store.load_session(state.session_id)
    assert loaded is not None and loaded.revision == 1
    assert await store.save_session(loaded) == 2
