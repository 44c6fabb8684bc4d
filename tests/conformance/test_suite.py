"""nonoka's engines (memory, SQLite, PostgreSQL) run the whole conformance suite.

The suites are ``nonoka.testing.conformance``'s, as a third-party store would run them;
the fixtures they ask for (``engine``, ``records``) come from ``conftest.py``, over every
engine in ``engines.py``.
"""

from __future__ import annotations

from nonoka.testing.conformance import (
    CheckpointStoreSuite,
    RecordStoreSuite,
    SessionLeasesSuite,
    SessionOpsSuite,
    StoredRowsSuite,
)


class TestCheckpointStore(CheckpointStoreSuite):
    pass


class TestStoredRows(StoredRowsSuite):
    pass


class TestSessionLeases(SessionLeasesSuite):
    pass


class TestRecordStore(RecordStoreSuite):
    pass


class TestSessionOps(SessionOpsSuite):
    pass
