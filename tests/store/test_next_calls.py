"""Next-call templates (``NextCallStore``): the SQLite engine's, in its checkpoint store
and as the early path opens it before the runtime loads.

Both implementations run the same checks here on a real file: a template belongs to the
checkpoint revision it was saved at, is not handed out while another owner holds the
session, and the lease is taken only while the checkpoint is unchanged.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from nonoka.errors import UnsupportedVersionError
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState, SessionStatus
from nonoka.store.base import entry_json
from nonoka.store.memory import MemoryCheckpointStore
from nonoka.store.next_calls import ClosableNextCallStore, NextCallStore
from nonoka.store.project import open_next_call_store
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.ledger import apply_migrations
from nonoka.store.sqlite.migrations import MIGRATIONS


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[SQLiteCheckpointStore]:
    """The runtime's store, which creates and migrates the file."""
    store = SQLiteCheckpointStore(tmp_path / "sessions.db")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def early(runtime: SQLiteCheckpointStore) -> Iterator[ClosableNextCallStore]:
    """The store the early path opens on the same file, before the runtime loads."""
    opened = open_next_call_store(runtime.path.parent, str(runtime.path))
    assert opened is not None
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=["checkpoint store", "early path"])
def calls(request: pytest.FixtureRequest, runtime: SQLiteCheckpointStore) -> NextCallStore:
    """Each implementation in turn."""
    if request.param == "checkpoint store":
        return runtime
    early: NextCallStore = request.getfixturevalue("early")
    return early


def _state(status: SessionStatus = SessionStatus.COMPLETED) -> SessionState:
    return SessionState(session_id="s1", status=status, memory_entries=[
        MemoryEntry.make("user", "hi ✓"), MemoryEntry.make("assistant", "hello")])


async def test_a_template_belongs_to_its_revision(runtime: SQLiteCheckpointStore,
                                                  calls: NextCallStore) -> None:
    state = _state()
    revision = await runtime.save_session(state)
    assert calls.load_next_call("s1") is None
    assert calls.save_next_call("s1", revision + 1, "ahead") is False
    assert calls.save_next_call("unknown", 1, "nobody") is False
    assert calls.save_next_call("s1", revision, "first") is True
    assert calls.save_next_call("s1", revision, "second") is True  # replaced
    found = calls.load_next_call("s1")
    assert found is not None
    assert (found.template, found.revision, found.status) == ("second", revision, "completed")
    assert found.entries == [entry_json(e) for e in state.memory_entries]
    # A later save outdates it: it is no longer handed out.
    await runtime.save_session(state.model_copy(update={"revision": revision,
                                                        "status": SessionStatus.PAUSED}))
    assert calls.load_next_call("s1") is None


def _wal_frames(db_path: Path) -> int:
    """Frames in the file's write-ahead log (it only grows while the tests write)."""
    wal = Path(f"{db_path}-wal")
    page_size = sqlite3.connect(db_path).execute("PRAGMA page_size").fetchone()[0]
    return (wal.stat().st_size - 32) // (page_size + 24) if wal.exists() else 0


async def test_a_template_saved_again_rewrites_only_what_changed(
        runtime: SQLiteCheckpointStore, calls: NextCallStore) -> None:
    """A session's template is about the same every turn (tools, options: ~25 KB, over
    several overflow pages); saving it at the next revision writes the row's leaf, not
    every page again."""
    template = json.dumps({"tools": [{"name": f"tool{n}", "description": "d" * 400}
                                     for n in range(60)]})
    state = _state()
    revision = 0
    for _ in range(2):  # past revision 1, which SQLite stores in no bytes at all
        revision = await runtime.save_session(state.model_copy(update={"revision": revision}))
    assert calls.save_next_call("s1", revision, template)
    revision = await runtime.save_session(state.model_copy(update={"revision": revision}))
    before = _wal_frames(runtime.path)
    assert calls.save_next_call("s1", revision, template)
    written = _wal_frames(runtime.path) - before
    assert 1 <= written <= 2, f"{written} pages written for a {len(template)}-byte template"
    found = calls.load_next_call("s1")
    assert found is not None and (found.template, found.revision) == (template, revision)


async def test_the_runtime_taking_the_early_paths_lease_again_writes_nothing(
        runtime: SQLiteCheckpointStore, calls: NextCallStore) -> None:
    """The bridge's early path takes the lease, then the runtime takes it again for the
    same owner: with more than half of its ttl left it is already held as asked, and
    nothing is written; with less, it is extended. Another owner still cannot take it."""
    revision = await runtime.save_session(_state())
    assert calls.lease_at_revision("s1", revision, "turn-1", 30)
    before = _wal_frames(runtime.path)
    assert await runtime.acquire_lease("s1", "turn-1", 30)
    assert _wal_frames(runtime.path) == before
    assert await runtime.acquire_lease("s1", "turn-2", 30) is False
    runtime.connection.execute("UPDATE session_leases SET expires_at = ? "
                               "WHERE session_id = 's1'", (time.time() + 10,))
    assert await runtime.acquire_lease("s1", "turn-1", 30)  # a third left: extended
    lease = await runtime.get_lease("s1")
    assert lease is not None and lease.owner == "turn-1" and lease.expires_in > 29


async def test_a_lease_taken_again_after_a_release_writes_one_page(
        runtime: SQLiteCheckpointStore, calls: NextCallStore) -> None:
    """Every bridge turn takes the session's lease and gives it up: the row stays (its
    expiry 0), so each is an update of one page, not an insert into or a delete from the
    table and its key index. A released lease is free, to anyone, and cannot be renewed."""
    revision = await runtime.save_session(_state())
    assert calls.lease_at_revision("s1", revision, "turn-1", 30)
    assert await runtime.release_lease("s1", "turn-1")
    for turn in range(2, 4):
        before = _wal_frames(runtime.path)
        assert calls.lease_at_revision("s1", revision, f"turn-{turn}", 30)
        assert await runtime.release_lease("s1", f"turn-{turn}")
        assert _wal_frames(runtime.path) - before == 2  # one page a transaction
    assert await runtime.get_lease("s1") is None
    assert await runtime.renew_lease("s1", "turn-3", 30) is False
    assert await runtime.release_lease("s1", "turn-3") is False
    found = calls.load_next_call("s1") if calls.save_next_call("s1", revision, "t") else None
    assert found is not None  # a released lease holds nothing back
    assert await runtime.acquire_lease("s1", "someone", 30)
    lease = await runtime.get_lease("s1")
    assert lease is not None and lease.owner == "someone"
    assert await runtime.release_lease("s1", "someone")
    assert await runtime.delete_session("s1")  # and the released row goes with it
    rows = runtime.connection.execute("SELECT count(*) FROM session_leases").fetchone()[0]
    assert rows == 0


async def test_no_template_while_another_owner_holds_the_session(
        runtime: SQLiteCheckpointStore, calls: NextCallStore) -> None:
    revision = await runtime.save_session(_state())
    assert calls.save_next_call("s1", revision, "t")
    assert await runtime.acquire_lease("s1", "someone", 60)
    assert calls.load_next_call("s1") is None
    assert calls.lease_at_revision("s1", revision, "me", 30) is False
    assert await runtime.release_lease("s1", "someone")
    found = calls.load_next_call("s1")
    assert found is not None and found.template == "t"


async def test_the_lease_is_taken_only_at_the_revision(runtime: SQLiteCheckpointStore,
                                                       calls: NextCallStore) -> None:
    revision = await runtime.save_session(_state())
    assert calls.lease_at_revision("s1", revision + 1, "me", 30) is False
    assert calls.lease_at_revision("unknown", 1, "me", 30) is False
    assert await runtime.get_lease("s1") is None
    assert calls.lease_at_revision("s1", revision, "me", 30) is True
    lease = await runtime.get_lease("s1")
    assert lease is not None and lease.owner == "me" and 29 < lease.expires_in <= 30
    # The turn then takes it again under the same owner, as the bridge does.
    assert await runtime.acquire_lease("s1", "me", 30)
    assert await runtime.acquire_lease("s1", "other", 30) is False


async def test_entries_that_disagree_with_the_checkpoint_give_no_template(
        runtime: SQLiteCheckpointStore, early: NextCallStore) -> None:
    revision = await runtime.save_session(_state())
    assert runtime.save_next_call("s1", revision, "t")
    with runtime.transaction() as db:
        db.execute("DELETE FROM session_entries WHERE seq = 1")
    assert runtime.load_next_call("s1") is None
    assert early.load_next_call("s1") is None


async def test_rows_that_refer_to_stored_files_come_back_with_their_bytes(
        runtime: SQLiteCheckpointStore, calls: NextCallStore) -> None:
    """What the early dispatch encodes is the conversation the runtime saved: a file
    stored once by digest is put back in its part, byte for byte."""
    data = base64.b64encode(bytes(range(256)) * 40).decode()
    look = MemoryEntry.make("user", "look", parts=[
        {"type": "text", "text": "look"},
        {"type": "file", "media_type": "image/png", "data": data, "filename": "a.png"}])
    state = _state().model_copy(update={"memory_entries": [*_state().memory_entries, look]})
    revision = await runtime.save_session(state)
    with runtime.transaction(write=False) as db:
        (stored,) = db.execute("SELECT entry_text(entry_json) FROM session_entries "
                               "WHERE seq = 2").fetchone()
    assert data not in stored and '"media":"sha256:' in stored
    assert calls.save_next_call("s1", revision, "t")
    found = calls.load_next_call("s1")
    assert found is not None
    assert [json.loads(e) for e in found.entries] == [
        json.loads(entry_json(e)) for e in state.memory_entries]
    with runtime.transaction() as db:  # a file that is gone: nothing to guess from
        db.execute("DELETE FROM media")
    assert calls.load_next_call("s1") is None


def test_which_stores_keep_templates() -> None:
    assert not isinstance(MemoryCheckpointStore(), NextCallStore)


def test_both_sqlite_stores_keep_templates(runtime: SQLiteCheckpointStore,
                                           early: NextCallStore) -> None:
    assert isinstance(runtime, NextCallStore)
    assert isinstance(early, NextCallStore)


@pytest.mark.parametrize("url", ["memory:", "postgresql://me@127.0.0.1:1/nonoka"])
def test_other_engines_have_no_early_store(tmp_path: Path, url: str) -> None:
    assert open_next_call_store(tmp_path, url) is None


def test_the_early_path_creates_nothing(tmp_path: Path) -> None:
    assert open_next_call_store(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def _raw(path: Path) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(path, isolation_level=None, timeout=5))


def test_the_early_path_uses_only_a_file_the_engine_set_up(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    with _raw(foreign) as db:  # a rollback-journal file, not the engine's
        db.execute("CREATE TABLE t (x)")
    before = foreign.read_bytes()
    assert open_next_call_store(tmp_path, str(foreign)) is None
    assert foreign.read_bytes() == before
    old = tmp_path / "old.db"
    with _raw(old) as db:  # WAL, but a migration short: the runtime migrates it first
        db.execute("PRAGMA journal_mode = WAL")
        apply_migrations(db, str(old), MIGRATIONS[:-1])
    assert open_next_call_store(tmp_path, str(old)) is None


async def test_a_file_from_a_newer_nonoka_is_refused(runtime: SQLiteCheckpointStore) -> None:
    with runtime.transaction() as db:
        db.execute("INSERT INTO nonoka_migrations VALUES ('m999_from_the_future', ?)",
                   (time.time(),))
    with pytest.raises(UnsupportedVersionError, match="m999_from_the_future"):
        open_next_call_store(runtime.path.parent, str(runtime.path))
