"""What every engine must do with what it stores: entries appended between compactions,
deletes that leave nothing behind, and data it cannot use refused without changing it.

``StoredRowsSuite`` needs an ``engine`` fixture that is a ``RowsHarness``: besides the
store, back doors to read and damage the stored rows, written by the engine's author.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from nonoka import (
    MemoryEntry,
    SessionState,
    SessionStatus,
    StepFailure,
    StepResult,
    StepStatus,
)
from nonoka.errors import (
    CorruptSessionError,
    SessionConflictError,
    StoreError,
    UnsupportedVersionError,
)
from nonoka.store.base import CheckpointStore, snapshot_json
from nonoka.testing.conformance import states
from nonoka.testing.conformance.harness import RowsHarness

SCHEMA_VERSION: int = SessionState.model_fields["schema_version"].default
"""The snapshot layout this nonoka writes."""


async def _save_turns(store: CheckpointStore, state: SessionState, turns: range) -> SessionState:
    """Save one turn at a time, as a running session does; return the last saved state."""
    for n in turns:
        state = state.model_copy(update={"memory_entries": [*state.memory_entries,
                                                            *states.turn(n, tools=n % 4 == 0)],
                                         "turn_count": state.turn_count + 1})
        state = states.stored_as(state, await store.save_session(state))
    return state


async def _check(engine: RowsHarness, state: SessionState) -> None:
    assert await engine.store.load_session(state.session_id) == state
    reopened = await engine.reopen()
    assert await reopened.load_session(state.session_id) == state
    rows = engine.dump(state.session_id)
    assert rows is not None
    assert [MemoryEntry.model_validate_json(e) for e in rows.entries] == state.memory_entries


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def v1_snapshot(session_id: str) -> dict[str, Any]:
    """A snapshot as the original layout wrote it."""
    entries = [e.model_dump() for e in states.conversation(2)]
    return {
        "schema_version": 1,
        "session_id": session_id,
        "status": "paused",
        "current_plan": states.plan().model_dump(mode="json"),
        "step_statuses": {"fetch": "completed", "parse": "failed"},
        "completed_steps": {"fetch": {"data": {"body": "<h1>hi</h1>"}}},
        "failed_steps": {"parse": {"error_type": "ValueError", "message": "no title"}},
        "memory_entries": entries,
        "runtime_state": None,
        "completion_contract": {"description": "done", "required_tools": ["send"]},
        "extension_state": {"approval": {"granted": ["ls"]}},
        "start_time": _iso(1_700_000_000.0),
        "end_time": None,
        "turn_count": 2,
        "step_count": 1,
        "trace": {"resumed": "pid 42"},
    }


class StoredRowsSuite:
    """Behaviour every engine shows with its stored rows.

    Subclass it as ``Test...`` where an ``engine`` fixture (a ``RowsHarness``) is
    visible; each test then runs once per value of that fixture.
    """

    pytestmark = pytest.mark.asyncio  # every test is async; any asyncio_mode runs them

    # -- conversation entries: appended between compactions, rewritten after one

    async def test_append_compact_append(self, engine: RowsHarness) -> None:
        state = await _save_turns(engine.store, states.minimal(), range(25))
        assert len(state.memory_entries) > 50
        await _check(engine, state)

        summary = MemoryEntry.make("system", "Summary of turns 0-22: files were read.")
        compacted = state.model_copy(update={
            "memory_entries": [summary, *state.memory_entries[-4:]],
            "memory_generation": state.memory_generation + 1,
        })
        compacted = states.stored_as(compacted, await engine.store.save_session(compacted))
        await _check(engine, compacted)

        state = await _save_turns(engine.store, compacted, range(100, 110))
        assert state.memory_entries[0] == summary
        assert len(state.memory_entries) == 5 + 2 * 10 + 2 * 3  # three turns had tool calls
        await _check(engine, state)

    async def test_shrinking_without_new_generation_rewrites(self, engine: RowsHarness) -> None:
        state = await _save_turns(engine.store, states.minimal(), range(5))
        trimmed = state.model_copy(update={"memory_entries": state.memory_entries[:3]})
        trimmed = states.stored_as(trimmed, await engine.store.save_session(trimmed))
        await _check(engine, trimmed)
        state = await _save_turns(engine.store, trimmed, range(10, 12))
        await _check(engine, state)

    async def test_same_length_new_generation_rewrites(self, engine: RowsHarness) -> None:
        state = await _save_turns(engine.store, states.minimal(), range(3))
        replaced = [MemoryEntry.make("user", f"new {i}") for i in range(len(state.memory_entries))]
        state = state.model_copy(update={"memory_entries": replaced, "memory_generation": 1})
        state = states.stored_as(state, await engine.store.save_session(state))
        await _check(engine, state)

    async def test_compaction_to_nothing_then_growth(self, engine: RowsHarness) -> None:
        state = await _save_turns(engine.store, states.minimal(), range(4))
        empty = state.model_copy(update={"memory_entries": [], "memory_generation": 1})
        empty = states.stored_as(empty, await engine.store.save_session(empty))
        await _check(engine, empty)
        await _check(engine, await _save_turns(engine.store, empty, range(2)))

    async def test_save_without_new_entries_keeps_them(self, engine: RowsHarness) -> None:
        state = await _save_turns(engine.store, states.minimal(), range(3))
        for status in (SessionStatus.RUNNING, SessionStatus.COMPLETED):
            state = state.model_copy(update={"status": status})
            state = states.stored_as(state, await engine.store.save_session(state))
        await _check(engine, state)

    # -- deletes and races leave exactly what they should

    async def test_delete_removes_everything(self, engine: RowsHarness) -> None:
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

    async def test_stale_writer_conflicts_and_first_write_survives(
            self, engine: RowsHarness) -> None:
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

    # -- stored data that cannot be used is refused clearly, and never changed

    @pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"', '{"session_id": 5}'])
    async def test_corrupt_snapshot_is_refused_untouched(
            self, engine: RowsHarness, text: str) -> None:
        state = states.full()
        await engine.store.save_session(state)
        engine.corrupt_snapshot(state.session_id, text)
        before = engine.dump(state.session_id)
        with pytest.raises(CorruptSessionError, match=state.session_id):
            await engine.store.load_session(state.session_id)
        assert engine.dump(state.session_id) == before

    async def test_corrupt_entry_is_refused_untouched(self, engine: RowsHarness) -> None:
        state = states.full()
        await engine.store.save_session(state)
        engine.corrupt_entry(state.session_id, 2, '{"role": "wizard", "content": 1}')
        before = engine.dump(state.session_id)
        with pytest.raises(CorruptSessionError, match=rf"{state.session_id}.*entry 2"):
            await engine.store.load_session(state.session_id)
        assert engine.dump(state.session_id) == before

    async def test_newer_schema_is_refused_untouched(self, engine: RowsHarness) -> None:
        state = states.full()
        await engine.store.save_session(state)
        raw = json.loads(snapshot_json(state))
        raw["schema_version"] = SCHEMA_VERSION + 1
        raw["a_field_from_the_future"] = {"x": 1}
        engine.write_raw_snapshot(state.session_id, json.dumps(raw))
        await engine.store.save_step_status(state.session_id, "fetch", StepStatus.FAILED)
        before = engine.dump(state.session_id)
        with pytest.raises(UnsupportedVersionError, match=rf"{state.session_id}.*version") as info:
            await engine.store.load_session(state.session_id)
        assert isinstance(info.value, StoreError)
        assert engine.dump(state.session_id) == before

    async def test_v1_snapshot_migrates_on_load(self, engine: RowsHarness) -> None:
        sid = states.new_id()
        engine.write_raw_snapshot(sid, json.dumps(v1_snapshot(sid)))
        before = engine.dump(sid)
        state = await engine.store.load_session(sid)
        assert state is not None
        assert engine.dump(sid) == before  # loading migrates in memory only
        assert state.schema_version == SCHEMA_VERSION
        assert state.revision == 1
        assert state.start_time == 1_700_000_000.0
        assert state.runtime_state.started_at == 1_700_000_000.0
        assert state.runtime_state.usage.model_turns == 0
        assert state.completed_steps["fetch"].output == {"body": "<h1>hi</h1>"}
        assert state.failed_steps["parse"].message == "no title"
        assert [(t.kind, t.detail) for t in state.trace] == [("resumed", "pid 42")]
        assert state.memory_entries == states.conversation(2)
        assert state.memory_entries[4].tool_calls[0].id == "call_1"
        assert state.completion_contract is not None
        assert state.completion_contract.required_tools == ["send"]

        # Saving writes the current layout, entries as rows; nothing is lost on the way.
        assert await engine.store.save_session(state) == 2
        assert await engine.store.load_session(sid) == states.stored_as(state, 2)
        rows = engine.dump(sid)
        assert rows is not None and len(rows.entries) == len(state.memory_entries)
        assert json.loads(rows.snapshot)["schema_version"] == SCHEMA_VERSION
        assert "memory_entries" not in json.loads(rows.snapshot)

    @pytest.mark.parametrize(
        ("kind", "text"),
        [("status", '{"status": "exploded"}'), ("result", "{oops"), ("error", '{"message": 1}')],
    )
    async def test_corrupt_step_update_is_refused_untouched(self,
        engine: RowsHarness, kind: str, text: str
    ) -> None:
        state = states.full()
        await engine.store.save_session(state)
        await engine.store.save_step_status(state.session_id, "fetch", StepStatus.RUNNING)
        await engine.store.save_step_result(state.session_id, "fetch", StepResult(output=1))
        await engine.store.save_step_error(state.session_id, "fetch",
                                           StepFailure(error_type="E", message="m"))
        engine.corrupt_step_update(state.session_id, "fetch", kind, text)
        before = engine.dump(state.session_id)
        with pytest.raises(CorruptSessionError, match=rf"{state.session_id}.*{kind}.*fetch"):
            await engine.store.load_session(state.session_id)
        assert engine.dump(state.session_id) == before
