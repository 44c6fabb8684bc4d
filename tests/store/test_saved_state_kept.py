"""A store keeps the state it saved: the next read of that session, while the row is
still the one it wrote, gives that state (with the entries) instead of decoding the
snapshot row again — and a row written since by anybody else is decoded as usual."""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.sqlite import SQLiteCheckpointStore


def turn(session: Session, n: int) -> None:
    session.memory.append(MemoryEntry.make("user", f"question {n} \u2028 ö"))
    session.add_trace("model_call", f"call {n}")
    session.memory.append(MemoryEntry.assistant(f"answer {n}"))
    session.add_trace("finish", f"turn {n}")


async def decoded_afresh(path: Path, session_id: str) -> SessionState:
    store = SQLiteCheckpointStore(path)
    try:
        state = await store.load_session(session_id)
    finally:
        await store.close()
    assert state is not None
    return state


async def test_a_session_read_after_its_own_save_is_the_saved_state(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        session = Session("kept")
        for n in range(30):
            turn(session, n)
            saved = session.to_state()
            revision = await store.save_session(saved)
            loaded = await store.load_session("kept")
            assert loaded is not None
            afresh = await decoded_afresh(path, "kept")
            assert loaded.model_dump() == afresh.model_dump()
            assert loaded.revision == revision
            if n:  # the first read decodes the entries; every later one keeps them
                assert all(a is b for a, b in zip(loaded.trace, saved.trace, strict=True)), \
                    "the snapshot row was decoded again"
                assert loaded.trace is not saved.trace  # the caller's list is not kept
            session = Session.from_state(loaded)
    finally:
        await store.close()


async def test_a_row_another_store_wrote_since_is_decoded(tmp_path: Path) -> None:
    """Two stores on one file (two processes, as two servers on one database are): each
    reads the other's saves, never its own older state."""
    path = tmp_path / "s.db"
    ours, theirs = SQLiteCheckpointStore(path), SQLiteCheckpointStore(path)
    try:
        session = Session("shared")
        for n in range(12):
            writer, reader = (ours, theirs) if n % 2 else (theirs, ours)
            turn(session, n)
            await writer.save_session(session.to_state())
            loaded = await reader.load_session("shared")
            assert loaded is not None
            assert loaded.trace[-1].detail == f"turn {n}"
            assert loaded.model_dump() == (await decoded_afresh(path, "shared")).model_dump()
            session = Session.from_state(loaded)
    finally:
        await ours.close()
        await theirs.close()


async def test_a_save_that_is_not_committed_is_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        session = Session("undone")
        turn(session, 0)
        session.revision = await store.save_session(session.to_state())
        assert await store.load_session("undone") is not None
        turn(session, 1)
        state = session.to_state()

        def fails_after_the_save() -> None:
            with store.transaction() as db:
                store.write_session(db, state)
                raise RuntimeError("the turn's other writes failed")

        with pytest.raises(RuntimeError):
            fails_after_the_save()
        loaded = await store.load_session("undone")
        assert loaded is not None and loaded.revision == session.revision
        assert loaded.trace[-1].detail == "turn 0"
        assert not store._saved, "a rolled-back save is still waiting to be kept"
    finally:
        await store.close()
