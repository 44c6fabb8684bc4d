"""A process that read a session before decodes only what was stored since: the digest
chain on the entry rows tells it the entries it decoded are still the stored ones."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.store.base import decode_entries, entry_json
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.digests import Chain, entry_chains


def exchanges(session: Session, count: int) -> None:
    """Append ``count`` user/assistant pairs, numbered on from what the session holds."""
    start = len(session.memory)
    for n in range(start, start + count):
        session.memory.append(MemoryEntry.make("user", f"q {n}"))
        session.memory.append(MemoryEntry.assistant(f"a {n}"))


def chain_of(stored: Sequence[MemoryEntry]) -> Chain:
    chains = entry_chains(Chain(), (entry_json(e) for e in stored))
    return chains[-1] if chains else Chain()


def stored_chain(path: Path, session_id: str) -> Chain | None:
    """The chain on the session's last entry row, read as it is stored."""
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT key_chain FROM session_entries WHERE session_id = ? "
                         "ORDER BY seq DESC LIMIT 1", (session_id,)).fetchone()
    finally:
        db.close()
    return None if row is None else Chain.decode(row[0])


async def test_later_reads_reuse_the_decoded_entries_and_stay_exact(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    ours, theirs = SQLiteCheckpointStore(path), SQLiteCheckpointStore(path)
    try:
        session = Session("cached")
        exchanges(session, 4)
        session.revision = await theirs.save_session(session.to_state())
        first = await ours.load_session("cached")
        assert first is not None and first.memory_entries == session.memory.entries
        decoded = ours.reuse.entries.get(str(path), "cached")
        assert decoded is not None and len(decoded.entries) == 8

        # Another writer appends: the next read decodes only the new rows.
        session.memory.append(MemoryEntry.make("user", "more"))
        session.revision = await theirs.save_session(session.to_state())
        second = await ours.load_session("cached")
        assert second is not None and second.memory_entries == session.memory.entries
        again = ours.reuse.entries.get(str(path), "cached")
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


async def test_the_sqlite_store_keeps_the_chain_through_appends_and_rewrites(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        session = Session("chained")
        for _ in range(5):
            exchanges(session, 1)
            session.revision = await store.save_session(session.to_state())
            assert stored_chain(path, "chained") == chain_of(session.memory.entries)
        assert await session.memory.compact(10)  # rewritten: the chain starts again
        session.revision = await store.save_session(session.to_state())
        assert stored_chain(path, "chained") == chain_of(session.memory.entries)
    finally:
        await store.close()


async def test_the_migration_gives_existing_rows_their_chain(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    session = Session("older")
    for n in range(3):
        session.memory.append(MemoryEntry.make("system", "rules") if n == 0 else
                              MemoryEntry.make("user", f"q {n}"))
        session.memory.append(MemoryEntry.assistant(f"a {n}"))
    await store.save_session(session.to_state())
    await store.close()
    db = sqlite3.connect(path, isolation_level=None)
    # As a file from before the chain: no column, no record of the migration.
    db.execute("ALTER TABLE session_entries DROP COLUMN key_chain")
    db.execute("DELETE FROM nonoka_migrations WHERE name = 'm006_entry_digest_chain'")
    db.close()
    store = SQLiteCheckpointStore(path)
    try:
        assert (await store.load_session("older")) is not None
        found = stored_chain(path, "older")
        assert found == chain_of(session.memory.entries)
        assert found is not None and found.rows
    finally:
        await store.close()


@pytest.mark.parametrize("older", [
    "seq || ':0:' || printf('%032d', seq) || ':' || lower(hex(key_chain))",
    "lower(hex(key_chain))"], ids=["hosted-form", "hex-text"])
async def test_rows_written_in_the_older_chain_form_continue_the_chain(
        tmp_path: Path, older: str) -> None:
    """Rows from before the rows-only form (``hosted:summary:key digest:rows digest``)
    carry the same rows digest last, and rows from before the 16-byte form its 32 hex
    digits: appending continues the chain, and a process's decoded entries are still
    reused and still right."""
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        session = Session("older-form")
        exchanges(session, 3)
        session.revision = await store.save_session(session.to_state())
        db = sqlite3.connect(path, isolation_level=None)
        assert {r[0] for r in db.execute("SELECT typeof(key_chain) FROM session_entries")
                } == {"blob"}
        db.execute(f"UPDATE session_entries SET key_chain = {older}")
        db.close()
        store.reuse.entries.clear()
        loaded = await store.load_session("older-form")
        assert loaded is not None and list(loaded.memory_entries) == list(session.memory.entries)
        session.memory.append(MemoryEntry.make("user", "q 3"))
        session.revision = await store.save_session(session.to_state())
        assert stored_chain(path, "older-form") == chain_of(session.memory.entries)
        again = await store.load_session("older-form")
        assert again is not None and list(again.memory_entries) == list(session.memory.entries)
        assert again.memory_entries[0] is loaded.memory_entries[0]  # reused, not decoded
    finally:
        await store.close()


async def test_a_store_made_without_shared_reuse_decodes_from_the_rows(tmp_path: Path) -> None:
    """What one store kept is its own: another store over the same file (a fresh
    process, or a benchmark's "fresh connection") decodes every row, and a store given
    the same ``StoreReuse`` reuses what the first decoded."""
    from nonoka.store.reuse import StoreReuse

    path = tmp_path / "s.db"
    shared = StoreReuse()
    first = SQLiteCheckpointStore(path, reuse=shared)
    try:
        session = Session("owned")
        exchanges(session, 40)
        session.revision = await first.save_session(session.to_state())
        loaded = await first.load_session("owned")
        assert loaded is not None
        kept = shared.entries.get(str(path), "owned")
        assert kept is not None
    finally:
        await first.close()
    fresh, again = SQLiteCheckpointStore(path), SQLiteCheckpointStore(path, reuse=shared)
    try:
        from_rows = await fresh.load_session("owned")
        reused = await again.load_session("owned")
        assert from_rows is not None and reused is not None
        assert list(from_rows.memory_entries) == list(reused.memory_entries)
        assert from_rows.memory_entries[0] is not kept.entries[0]  # decoded anew
        assert reused.memory_entries[0] is kept.entries[0]  # the shared decode
        assert fresh.reuse.entries.get(str(path), "owned") is not None
    finally:
        await fresh.close()
        await again.close()
