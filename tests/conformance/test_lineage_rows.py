"""On the SQL engines a branch shares its parent's entry rows instead of copying them,
until the parent rewrites or deletes them."""

from __future__ import annotations

from nonoka.runtime.runner import Runner
from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionStatus
from tests.conformance.engines import EngineHarness


async def _parent(harness: EngineHarness, entries: int) -> str:
    session = Session("lineage-parent")
    for i in range(entries):
        session.memory.append(MemoryEntry.make("user" if i % 2 else "assistant", f"entry {i}"))
    session.status = SessionStatus.COMPLETED
    await harness.store.save_session(session.to_state())
    return session.session_id


async def test_a_fork_writes_no_entry_rows_until_the_parent_rewrites(
        shared_engine: EngineHarness) -> None:
    store = shared_engine.store
    parent = await _parent(shared_engine, 2_000)
    child = await Runner(store).fork_session(parent, at=1_500)
    rows = shared_engine.dump(child)
    assert rows is not None and rows.entries == ()  # shared, not copied
    loaded = await store.load_session(child)
    assert loaded is not None and len(loaded.memory_entries) == 1_500
    await store.delete_session(parent)
    rows = shared_engine.dump(child)
    assert rows is not None and len(rows.entries) == 1_500  # its own copy now
    again = await store.load_session(child)
    assert again is not None and again.memory_entries == loaded.memory_entries
