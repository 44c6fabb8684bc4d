"""Round trips: what is saved is exactly what a later load (in any process) returns."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nonoka.messages import MemoryEntry
from nonoka.plan import Plan, Ref, Step
from nonoka.state import StepFailure, StepStatus
from nonoka.store.base import CheckpointStore
from tests.conformance import states
from tests.conformance.engines import EngineHarness


async def test_unknown_session_is_none(store: CheckpointStore) -> None:
    assert await store.load_session(states.new_id()) is None


async def test_every_field_round_trips(store: CheckpointStore) -> None:
    state = states.full()
    revision = await store.save_session(state)
    loaded = await store.load_session(state.session_id)
    assert loaded == states.stored_as(state, revision)
    assert loaded is not None
    assert loaded.model_dump_json() == states.stored_as(state, revision).model_dump_json()
    # The tool-call pairing crash repair relies on survives.
    assert loaded.memory_entries[4].tool_calls[0].id == "call_1"
    assert loaded.memory_entries[5].tool_call_id == "call_1"


async def test_minimal_state_round_trips(store: CheckpointStore) -> None:
    state = states.minimal()
    revision = await store.save_session(state)
    assert await store.load_session(state.session_id) == states.stored_as(state, revision)


async def test_plan_refs_and_layers_survive(store: CheckpointStore) -> None:
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


async def test_ref_objects_in_args_survive(store: CheckpointStore) -> None:
    plan = Plan(steps=[Step(id="a", tool="t"), Step(id="b", tool="t", args={"x": Ref("a")})])
    state = states.minimal(current_plan=plan)
    await store.save_session(state)
    loaded = await store.load_session(state.session_id)
    assert loaded is not None and loaded.current_plan is not None
    assert loaded.current_plan.step("b").resolved_args({"a": 1}) == {"x": 1}


async def test_sessions_are_isolated(store: CheckpointStore) -> None:
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


async def test_persists_across_store_instances(engine: EngineHarness) -> None:
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


async def test_delete_removes_everything(engine: EngineHarness) -> None:
    store = engine.store
    state = states.full()
    await store.save_session(state)
    await store.save_step_error(state.session_id, "fetch",
                                StepFailure(error_type="E", message="m"))
    assert await store.delete_session(state.session_id) is True
    assert await store.load_session(state.session_id) is None
    assert engine.dump(state.session_id) is None
    assert await store.delete_session(state.session_id) is False
    # A new session under the same id starts clean: no old entries or step updates.
    fresh = states.minimal(state.session_id)
    assert await store.save_session(fresh) == 1
    assert await store.load_session(state.session_id) == states.stored_as(fresh, 1)


async def test_delete_unknown_session(store: CheckpointStore) -> None:
    assert await store.delete_session(states.new_id()) is False


# -- property: generated entries and extension state --------------------------------------

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


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=_entries, more=_entries, extension_state=_extension_state)
async def test_generated_states_round_trip(
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
