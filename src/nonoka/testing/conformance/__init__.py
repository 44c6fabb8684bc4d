"""The storage conformance suite: what any checkpoint store or record store must do.

nonoka runs it against its memory, SQLite and PostgreSQL engines; a third-party store
runs the same tests by subclassing the suites in its own pytest files. It needs
``pytest``, ``pytest-asyncio`` (any ``asyncio_mode``: the tests carry their marker) and
``hypothesis``::

    import pytest_asyncio
    from nonoka.testing.conformance import (
        CheckpointStoreSuite, RecordStoreSuite, SessionLeasesSuite,
    )

    class Harness:                        # a StoreHarness
        def __init__(self, path):
            self.path = path
            self.store = MyStore(path)    # the store under test
            self.opened = []

        async def reopen(self):           # another instance over the same data
            self.opened.append(MyStore(self.path))
            return self.opened[-1]

    @pytest_asyncio.fixture
    async def engine(tmp_path):
        harness = Harness(tmp_path / "db")
        yield harness
        for store in [harness.store, *harness.opened]:
            await store.close()

    class TestMyStore(CheckpointStoreSuite, SessionLeasesSuite):
        pass

- ``CheckpointStoreSuite`` (fixture ``engine``, a ``StoreHarness``): round trips,
  revisions and conflicts, step updates and their merge rules.
- ``BranchingSuite`` (fixture ``engine``): forks and rewinds through ``Runner`` — a
  branch holds its parent's first entries and survives whatever the parent does next.
- ``SessionLeasesSuite`` (fixture ``engine``; the store implements ``SessionLeases``):
  one owner at a time, expiry, renewal, ``hold_lease``.
- ``StoredRowsSuite`` (fixture ``engine``, a ``RowsHarness`` with back doors into the
  stored rows): entries appended and rewritten, deletes, and corrupt, old or newer data
  refused without being changed.
- ``MediaSuite`` (fixture ``engine``, a ``MediaHarness``: a ``RowsHarness`` with back
  doors into the stored files): the files in entries' parts round trip byte for byte,
  are stored once however many entries, branches and sessions hold them, and go with
  the last entry that refers to them.
- ``RecordStoreSuite`` (fixture ``records``, a ``RecordsHarness``): the session index
  and the event log.

A fixture with parameters runs every test once per parameter (nonoka's own
``tests/conformance/conftest.py`` parametrises over its engines). ``states`` has the
session states the tests save, from minimal to every field set.
"""

import pytest

# Before the suites are imported, so that a failing assertion shows its values.
pytest.register_assert_rewrite(
    "nonoka.testing.conformance.branches",
    "nonoka.testing.conformance.checkpoints",
    "nonoka.testing.conformance.leases",
    "nonoka.testing.conformance.media",
    "nonoka.testing.conformance.records",
    "nonoka.testing.conformance.rows",
)

from nonoka.testing.conformance.branches import BranchingSuite  # noqa: E402
from nonoka.testing.conformance.checkpoints import CheckpointStoreSuite  # noqa: E402
from nonoka.testing.conformance.harness import (  # noqa: E402
    MediaHarness,
    RecordsHarness,
    RecordStore,
    RowsHarness,
    StoredRows,
    StoreHarness,
)
from nonoka.testing.conformance.leases import SessionLeasesSuite  # noqa: E402
from nonoka.testing.conformance.media import MediaSuite  # noqa: E402
from nonoka.testing.conformance.records import RecordStoreSuite  # noqa: E402
from nonoka.testing.conformance.rows import StoredRowsSuite  # noqa: E402

__all__ = (
    "BranchingSuite",
    "CheckpointStoreSuite",
    "MediaHarness",
    "MediaSuite",
    "RecordStore",
    "RecordStoreSuite",
    "RecordsHarness",
    "RowsHarness",
    "SessionLeasesSuite",
    "StoreHarness",
    "StoredRows",
    "StoredRowsSuite",
)
