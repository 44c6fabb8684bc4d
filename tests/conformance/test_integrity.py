"""Stored data that cannot be used is refused clearly, and never changed by the refusal."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from nonoka.errors import CorruptSessionError, StoreError, UnsupportedVersionError
from nonoka.state import SCHEMA_VERSION, StepFailure, StepResult, StepStatus
from nonoka.store.base import snapshot_json
from tests.conformance import states
from tests.conformance.engines import EngineHarness


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"', '{"session_id": 5}'])
async def test_corrupt_snapshot_is_refused_untouched(engine: EngineHarness, text: str) -> None:
    state = states.full()
    await engine.store.save_session(state)
    engine.corrupt_snapshot(state.session_id, text)
    before = engine.dump(state.session_id)
    with pytest.raises(CorruptSessionError, match=state.session_id):
        await engine.store.load_session(state.session_id)
    assert engine.dump(state.session_id) == before


async def test_corrupt_entry_is_refused_untouched(engine: EngineHarness) -> None:
    state = states.full()
    await engine.store.save_session(state)
    engine.corrupt_entry(state.session_id, 2, '{"role": "wizard", "content": 1}')
    before = engine.dump(state.session_id)
    with pytest.raises(CorruptSessionError, match=rf"{state.session_id}.*entry 2"):
        await engine.store.load_session(state.session_id)
    assert engine.dump(state.session_id) == before


async def test_newer_schema_is_refused_untouched(engine: EngineHarness) -> None:
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


async def test_v1_snapshot_migrates_on_load(engine: EngineHarness) -> None:
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
async def test_corrupt_step_update_is_refused_untouched(
    engine: EngineHarness, kind: str, text: str
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
