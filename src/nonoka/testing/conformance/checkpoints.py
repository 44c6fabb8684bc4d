"""What every ``CheckpointStore`` must do: round trips, revisions, step updates.

``CheckpointStoreSuite`` needs an ``engine`` fixture: a ``StoreHarness`` whose ``store``
is the store under test and whose ``reopen()`` gives another instance over the same data.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nonoka import MemoryEntry, Plan, Ref, SessionState, Step, StepFailure, StepResult, StepStatus
from nonoka.errors import SessionConflictError
from nonoka.store.base import CheckpointStore
from nonoka.testing.conformance import states
from nonoka.testing.conformance.harness import StoreHarness

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


_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)

_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)

_entries = st.lists(
    st.builds(
        MemoryEntry,
        role=st.sampled_from(["system", "user", "assistant", "tool"]),
        content=st.text(),
        metadata=st.dictionaries(st.text(), _json, max_size=3),
        tokens=st.integers(min_value=0, max_value=2**31),
    ),
    max_size=8,
)

_extension_state = st.dictionaries(st.text(), st.dictionaries(st.text(), _json, max_size=3),
                                   max_size=3)


class CheckpointStoreSuite:
    """Behaviour every ``CheckpointStore`` shows, whatever keeps the data.

    Subclass it as ``Test...`` where an ``engine`` fixture (a ``StoreHarness``) is
    visible; each test then runs once per value of that fixture.
    """

    pytestmark = pytest.mark.asyncio  # every test is async; any asyncio_mode runs them

    @pytest.fixture
    def store(self, engine: StoreHarness) -> CheckpointStore:
        """The store under test."""
        return engine.store

    # -- round trips: what is saved is exactly what a later load (in any process) returns

    async def test_unknown_session_is_none(self, store: CheckpointStore) -> None:
        assert await store.load_session(states.new_id()) is None

    async def test_every_field_round_trips(self, store: CheckpointStore) -> None:
        state = states.full()
        revision = await store.save_session(state)
        loaded = await store.load_session(state.session_id)
        assert loaded == states.stored_as(state, revision)
        assert loaded is not None
        assert loaded.model_dump_json() == states.stored_as(state, revision).model_dump_json()
        # The tool-call pairing crash repair relies on survives.
        assert loaded.memory_entries[4].tool_calls[0].id == "call_1"
        assert loaded.memory_entries[5].tool_call_id == "call_1"

    async def test_minimal_state_round_trips(self, store: CheckpointStore) -> None:
        state = states.minimal()
        revision = await store.save_session(state)
        assert await store.load_session(state.session_id) == states.stored_as(state, revision)

    async def test_plan_refs_and_layers_survive(self, store: CheckpointStore) -> None:
        state = states.full()
        await store.save_session(state)
        loaded = await store.load_session(state.session_id)
        assert loaded is not None and loaded.current_plan is not None
        plan = loaded.current_plan
        assert plan.layers == [["fetch"], ["parse"], ["summarise"], ["notify"]]
        assert plan.step("summarise").references() == {"parse"}
        outputs = {"fetch": {"body": "<p>"}, "parse": {"title": "T"}}
        assert plan.step("parse").resolved_args(outputs) == {"html": "<p>"}
        assert plan.step("summarise").resolved_prompt(outputs) == "Summarise T in one line"

    async def test_ref_objects_in_args_survive(self, store: CheckpointStore) -> None:
        plan = Plan(steps=[Step(id="a", tool="t"), Step(id="b", tool="t", args={"x": Ref("a")})])
        state = states.minimal(current_plan=plan)
        await store.save_session(state)
        loaded = await store.load_session(state.session_id)
        assert loaded is not None and loaded.current_plan is not None
        assert loaded.current_plan.step("b").resolved_args({"a": 1}) == {"x": 1}

    async def test_sessions_are_isolated(self, store: CheckpointStore) -> None:
        a = states.full()
        b = states.minimal(memory_entries=states.turn(99), extension_state={"x": {"y": 1}})
        await store.save_session(a)
        await store.save_session(b)
        await store.save_step_status(a.session_id, "fetch", StepStatus.FAILED)
        loaded_a = await store.load_session(a.session_id)
        loaded_b = await store.load_session(b.session_id)
        assert loaded_b == states.stored_as(b, 1)
        assert loaded_a is not None and loaded_a.memory_entries == a.memory_entries
        assert await store.delete_session(b.session_id) is True
        assert await store.load_session(a.session_id) == loaded_a

    async def test_persists_across_store_instances(self, engine: StoreHarness) -> None:
        state = states.full()
        revision = await engine.store.save_session(state)
        await engine.store.save_step_status(state.session_id, "summarise", StepStatus.COMPLETED)
        other = await engine.reopen()
        loaded = await other.load_session(state.session_id)
        assert loaded is not None
        assert loaded.revision == revision
        assert loaded.step_statuses["summarise"] == StepStatus.COMPLETED
        # ...and the other instance can carry the session on.
        more = loaded.model_copy(update={"memory_entries": [*loaded.memory_entries,
                                                            *states.turn(5)]})
        assert await other.save_session(more) == revision + 1
        assert await engine.store.load_session(state.session_id) == states.stored_as(
            more, revision + 1
        )

    async def test_delete_unknown_session(self, store: CheckpointStore) -> None:
        assert await store.delete_session(states.new_id()) is False

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(first=_entries, more=_entries, extension_state=_extension_state)
    async def test_generated_states_round_trip(
        self,
        store: CheckpointStore,
        first: list[MemoryEntry],
        more: list[MemoryEntry],
        extension_state: dict[str, dict[str, Any]],
    ) -> None:
        state = states.minimal(memory_entries=first, extension_state=extension_state)
        revision = await store.save_session(state)
        assert await store.load_session(state.session_id) == states.stored_as(state, revision)
        grown = states.stored_as(state, revision).model_copy(
            update={"memory_entries": [*first, *more]}
        )
        revision = await store.save_session(grown)
        assert await store.load_session(state.session_id) == states.stored_as(grown, revision)

    # -- revisions: a writer that raced another one fails loudly instead of overwriting it

    async def test_saves_return_increasing_revisions(self, store: CheckpointStore) -> None:
        state = states.minimal()
        assert await store.save_session(state) == 1
        assert await store.save_session(states.stored_as(state, 1)) == 2
        loaded = await store.load_session(state.session_id)
        assert loaded is not None and loaded.revision == 2

    async def test_new_session_conflicts_with_an_existing_row(self, store: CheckpointStore) -> None:
        state = states.minimal(turn_count=1)
        await store.save_session(state)
        with pytest.raises(SessionConflictError, match=state.session_id):
            await store.save_session(state.model_copy(update={"turn_count": 2}))
        loaded = await store.load_session(state.session_id)
        assert loaded is not None and loaded.turn_count == 1

    async def test_saving_a_deleted_session_conflicts(self, store: CheckpointStore) -> None:
        state = states.minimal()
        await store.save_session(state)
        await store.delete_session(state.session_id)
        with pytest.raises(SessionConflictError, match="not stored"):
            await store.save_session(states.stored_as(state, 1))
        assert await store.load_session(state.session_id) is None

    async def test_revision_ahead_of_store_conflicts(self, store: CheckpointStore) -> None:
        state = states.minimal()
        await store.save_session(state)
        with pytest.raises(SessionConflictError):
            await store.save_session(states.stored_as(state, 5))

    async def test_step_updates_do_not_bump_the_revision(self, store: CheckpointStore) -> None:
        state = states.full()
        await store.save_session(state)
        await store.save_step_status(state.session_id, "notify", StepStatus.RUNNING)
        loaded = await store.load_session(state.session_id)
        assert loaded is not None and loaded.revision == 1
        assert await store.save_session(loaded) == 2

    # -- step updates: merged over the snapshot in time order with the three rules

    # Rule 1: a terminal status is never overwritten by a non-terminal one.

    async def test_terminal_snapshot_status_survives_a_late_running(
            self, store: CheckpointStore) -> None:
        sid = await _session(store, step_statuses={"fetch": StepStatus.COMPLETED,
                                                   "parse": StepStatus.FAILED})
        await store.save_step_status(sid, "fetch", StepStatus.RUNNING)
        await store.save_step_status(sid, "parse", StepStatus.PENDING)
        state = await _load(store, sid)
        assert state.step_statuses["fetch"] == StepStatus.COMPLETED
        assert state.step_statuses["parse"] == StepStatus.FAILED

    async def test_running_after_a_result_keeps_completed(self, store: CheckpointStore) -> None:
        sid = await _session(store)
        await store.save_step_result(sid, "fetch", RESULT)
        await store.save_step_status(sid, "fetch", StepStatus.RUNNING)
        state = await _load(store, sid)
        assert state.step_statuses["fetch"] == StepStatus.COMPLETED
        assert state.completed_steps["fetch"] == RESULT

    async def test_statuses_move_forward(self, store: CheckpointStore) -> None:
        sid = await _session(store, step_statuses={"fetch": StepStatus.PENDING})
        await store.save_step_status(sid, "fetch", StepStatus.RUNNING)
        assert (await _load(store, sid)).step_statuses["fetch"] == StepStatus.RUNNING
        await store.save_step_status(sid, "fetch", StepStatus.COMPLETED)
        assert (await _load(store, sid)).step_statuses["fetch"] == StepStatus.COMPLETED
        await store.save_step_status(sid, "parse", StepStatus.SKIPPED)
        assert (await _load(store, sid)).step_statuses["parse"] == StepStatus.SKIPPED

    # Rule 2: a result clears an earlier failure record.

    async def test_result_after_error_clears_the_failure(self, store: CheckpointStore) -> None:
        sid = await _session(store)
        await store.save_step_error(sid, "fetch", FAILURE)
        await store.save_step_result(sid, "fetch", RESULT)
        state = await _load(store, sid)
        assert state.step_statuses["fetch"] == StepStatus.COMPLETED
        assert state.completed_steps["fetch"] == RESULT
        assert "fetch" not in state.failed_steps

    async def test_result_clears_a_failure_in_the_snapshot(self, store: CheckpointStore) -> None:
        sid = await _session(store, step_statuses={"fetch": StepStatus.FAILED},
                             failed_steps={"fetch": FAILURE})
        await store.save_step_result(sid, "fetch", RESULT)
        state = await _load(store, sid)
        assert state.step_statuses["fetch"] == StepStatus.COMPLETED
        assert state.failed_steps == {}

    # Rule 3: an error clears an earlier success record.

    async def test_error_after_result_clears_the_success(self, store: CheckpointStore) -> None:
        sid = await _session(store)
        await store.save_step_result(sid, "fetch", RESULT)
        await store.save_step_error(sid, "fetch", FAILURE)
        state = await _load(store, sid)
        assert state.step_statuses["fetch"] == StepStatus.FAILED
        assert state.failed_steps["fetch"] == FAILURE
        assert "fetch" not in state.completed_steps

    # Time order: the latest write of a kind decides, whichever kind came first.

    async def test_rewriting_an_older_kind_moves_it_to_the_end(
            self, store: CheckpointStore) -> None:
        sid = await _session(store)
        await store.save_step_result(sid, "fetch", RESULT)
        await store.save_step_error(sid, "fetch", FAILURE)
        retried = StepResult(output="second try")
        await store.save_step_result(sid, "fetch", retried)
        state = await _load(store, sid)
        assert state.step_statuses["fetch"] == StepStatus.COMPLETED
        assert state.completed_steps["fetch"] == retried
        assert "fetch" not in state.failed_steps

    async def test_many_quick_updates_keep_their_order(self, store: CheckpointStore) -> None:
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

    async def test_updates_survive_reopen_and_resave(self, engine: StoreHarness) -> None:
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
        self,
        store: CheckpointStore,
    ) -> None:
        state = states.minimal(current_plan=states.plan())
        await store.save_step_status(state.session_id, "fetch", StepStatus.RUNNING)
        assert await store.load_session(state.session_id) is None
        await store.save_session(state)
        assert (await _load(store, state.session_id)).step_statuses == {"fetch": StepStatus.RUNNING}
