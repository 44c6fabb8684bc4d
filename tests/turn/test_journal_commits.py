"""A turn's journal commits as few times as its entries allow: what was held back until
the session was known goes in one transaction, and the end of a turn (the entries held
for it, ``finish`` and the session's index row) in one more, so no reader sees the row of
a finished turn without the ``finish`` that ends it. Counted on a real SQLite file, by
the statements its connection runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka import faults
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState, SessionStatus
from nonoka.store.project import open_project_stores
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.turn.journal import Journal


async def test_a_turn_opens_in_one_commit_and_ends_in_one(tmp_path: Path) -> None:
    stores = open_project_stores(tmp_path)
    try:
        checkpoints = stores.checkpoints
        assert isinstance(checkpoints, SQLiteCheckpointStore)
        await checkpoints.save_session(SessionState(
            session_id="s1", status=SessionStatus.COMPLETED, turn_count=1,
            memory_entries=[MemoryEntry.make("user", "hi"),
                            MemoryEntry.make("assistant", "hello")]))
        statements: list[str] = []
        checkpoints.connection.set_trace_callback(statements.append)

        def commits() -> int:
            """Write transactions run since the last count (reads are ``BEGIN``)."""
            count = sum(s.strip().upper() == "BEGIN IMMEDIATE" for s in statements)
            statements.clear()
            return count

        book = Journal(stores, title="a title")
        await book.log("request", {"n": 1})  # held: the session is not known yet
        assert commits() == 0
        book.start("s1")
        await book.log("session", {"opened": "continued"})
        assert commits() == 1
        book.hold("early_request", {"outcome": "used"})
        assert commits() == 0
        await book.finish("stop")
        assert commits() == 1
        checkpoints.connection.set_trace_callback(None)

        events = await stores.events.list_events("s1")
        assert [e.kind for e in events] == ["request", "session", "early_request", "finish"]
        assert events[0].data["process"]  # the opening entry names its process
        row = await stores.index.get_session("s1")
        assert row is not None
        assert (row.title, row.status, row.turn_count, row.message_count) == (
            "a title", "completed", 1, 2)
        assert book.entries == 2
    finally:
        await stores.close()


async def test_a_failed_end_still_logs_finish(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """When the turn's one closing transaction fails (here a full disk, injected where
    the row is about to be written), the row and the entries are tried again apart: a
    turn does not stay open in the timeline for want of the transaction that closes it."""
    stores = open_project_stores(tmp_path)
    try:
        await stores.checkpoints.save_session(SessionState(
            session_id="s1", memory_entries=[MemoryEntry.make("user", "hi")]))
        monkeypatch.setattr(faults, "point", faults._armed("index.update.before:1:full", ""))
        book = Journal(stores)
        book.start("s1")
        book.hold("early_request", {"outcome": "used"})
        await book.finish("stop")
        events = await stores.events.list_events("s1")
        assert [e.kind for e in events] == ["early_request", "finish"]
        assert await stores.index.get_session("s1") is not None
    finally:
        await stores.close()
