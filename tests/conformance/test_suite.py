"""nonoka's engines (memory, SQLite, PostgreSQL) run the whole conformance suite.

The suites are ``nonoka.testing.conformance``'s, as a third-party store would run them
(``ops_suite.py``'s session operations are nonoka's own: their backends are internal);
the fixtures they ask for (``engine``, ``records``) come from ``conftest.py``, over every
engine in ``engines.py``.
"""

from __future__ import annotations

from nonoka.store.base import BranchingStore, MediaStore
from nonoka.testing.conformance import (
    BranchingSuite,
    CheckpointStoreSuite,
    MediaSuite,
    RecordStoreSuite,
    SessionLeasesSuite,
    StoredRowsSuite,
)
from tests.conformance.ops_suite import SessionOpsSuite


class TestCheckpointStore(CheckpointStoreSuite):
    pass


class TestStoredRows(StoredRowsSuite):
    pass


class TestSessionLeases(SessionLeasesSuite):
    pass


class TestRecordStore(RecordStoreSuite):
    pass


class TestBranching(BranchingSuite):
    async def test_every_engine_shares_entries_itself(self, store: object) -> None:
        assert isinstance(store, BranchingStore)


class TestMedia(MediaSuite):
    async def test_every_engine_serves_files_by_digest(self, store: object) -> None:
        assert isinstance(store, MediaStore)


class TestSessionOps(SessionOpsSuite):
    pass
