"""Conversation entries: appended between compactions, rewritten after one."""

from __future__ import annotations

from nonoka.messages import MemoryEntry
from nonoka.state import SessionState, SessionStatus
from nonoka.store.base import CheckpointStore
from tests.conformance import states
from tests.conformance.engines import EngineHarness


async def _save_turns(store: CheckpointStore, state: SessionState, turns: range) -> SessionState:
    """Save one turn at a time, as a running session does; return the last saved state."""
    for n in turns:
        state = state.model_copy(update={"memory_entries": [*state.memory_entries,
                                                            *states.turn(n, tools=n % 4 == 0)],
                                         "turn_count": state.turn_count + 1})
        state = states.stored_as(state, await store.save_session(state))
    return state


async def _check(engine: EngineHarness, state: SessionState) -> None:
    assert await engine.store.load_session(state.session_id) == state
    reopened = await engine.reopen()
    assert await reopened.load_session(state.session_id) == state
    rows = engine.dump(state.session_id)
    assert rows is not None
    assert [MemoryEntry.model_validate_json(e) for e in rows.entries] == state.memory_entries


async def test_append_compact_append(engine: EngineHarness) -> None:
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


async def test_shrinking_without_new_generation_rewrites(engine: EngineHarness) -> None:
    state = await _save_turns(engine.store, states.minimal(), range(5))
    trimmed = state.model_copy(update={"memory_entries": state.memory_entries[:3]})
    trimmed = states.stored_as(trimmed, await engine.store.save_session(trimmed))
    await _check(engine, trimmed)
    state = await _save_turns(engine.store, trimmed, range(10, 12))
    await _check(engine, state)


async def test_same_length_new_generation_rewrites(engine: EngineHarness) -> None:
    state = await _save_turns(engine.store, states.minimal(), range(3))
    replaced = [MemoryEntry.make("user", f"new {i}") for i in range(len(state.memory_entries))]
    state = state.model_copy(update={"memory_entries": replaced, "memory_generation": 1})
    state = states.stored_as(state, await engine.store.save_session(state))
    await _check(engine, state)


async def test_compaction_to_nothing_then_growth(engine: EngineHarness) -> None:
    state = await _save_turns(engine.store, states.minimal(), range(4))
    empty = state.model_copy(update={"memory_entries": [], "memory_generation": 1})
    empty = states.stored_as(empty, await engine.store.save_session(empty))
    await _check(engine, empty)
    await _check(engine, await _save_turns(engine.store, empty, range(2)))


async def test_save_without_new_entries_keeps_them(engine: EngineHarness) -> None:
    state = await _save_turns(engine.store, states.minimal(), range(3))
    for status in (SessionStatus.RUNNING, SessionStatus.COMPLETED):
        state = state.model_copy(update={"status": status})
        state = states.stored_as(state, await engine.store.save_session(state))
    await _check(engine, state)
