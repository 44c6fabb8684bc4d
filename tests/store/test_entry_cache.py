"""A process that read a session before decodes only what was stored since."""

from __future__ import annotations

from pathlib import Path

from nonoka.messages import MemoryEntry
from nonoka.session import Session
from nonoka.store.base import decode_entries, entry_json
from nonoka.store.sqlite import SQLiteCheckpointStore, entry_cache


async def test_later_reads_reuse_the_decoded_entries_and_stay_exact(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    ours, theirs = SQLiteCheckpointStore(path), SQLiteCheckpointStore(path)
    try:
        session = Session("cached")
        for n in range(4):
            session.memory.append(MemoryEntry.make("user", f"q {n}"))
            session.memory.append(MemoryEntry.assistant(f"a {n}"))
        session.revision = await theirs.save_session(session.to_state())
        first = await ours.load_session("cached")
        assert first is not None and first.memory_entries == session.memory.entries
        decoded = entry_cache.get(str(path), "cached")
        assert decoded is not None and len(decoded.entries) == 8

        # Another writer appends: the next read decodes only the new rows.
        session.memory.append(MemoryEntry.make("user", "more"))
        session.revision = await theirs.save_session(session.to_state())
        second = await ours.load_session("cached")
        assert second is not None and second.memory_entries == session.memory.entries
        again = entry_cache.get(str(path), "cached")
        assert again is not None and again.entries is decoded.entries  # extended in place
        assert len(first.memory_entries) == 8, "an earlier snapshot changed"

        # A rewrite (compaction) is noticed: the rows at that position changed.
        assert await session.memory.compact(5)
        session.revision = await theirs.save_session(session.to_state())
        third = await ours.load_session("cached")
        assert third is not None and third.memory_entries == session.memory.entries
        rows = [entry_json(e) for e in session.memory.entries]
        assert list(third.memory_entries) == decode_entries("cached", rows)
        assert second.memory_entries[-1].content == "more"
    finally:
        await ours.close()
        await theirs.close()


async def test_a_recreated_session_is_decoded_afresh(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    try:
        session = Session("again")
        session.memory.append(MemoryEntry.make("user", "first life"))
        await store.save_session(session.to_state())
        assert await store.load_session("again") is not None
        assert await store.delete_session("again")
        other = Session("again")
        other.memory.append(MemoryEntry.make("user", "first life"))
        other.memory.append(MemoryEntry.make("user", "second life"))
        await store.save_session(other.to_state())
        loaded = await store.load_session("again")
        assert loaded is not None and loaded.memory_entries == other.memory.entries
    finally:
        await store.close()
