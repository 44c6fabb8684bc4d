"""The SQLite engine: one file per project, safe for many short-lived processes.

A save is one ``BEGIN IMMEDIATE`` transaction that checks the revision, upserts the
snapshot row, inserts only the new conversation entries (or rewrites them after a
compaction) and bumps the revision; so its cost does not grow with the conversation, and
a process that raced another one gets ``SessionConflictError`` instead of overwriting it.
A load reads the snapshot, the entries and the step updates in one read transaction.
Leases (``SessionLeases``) are rows of ``session_leases`` with a ``time.time()`` expiry
(0 once released: the row stays for the next turn's lease, ``leases.RELEASE``): every
process sharing the file runs on the same machine, so they share that clock.

Other tables live in the same file (the session index and event log,
``nonoka.store.sqlite.records``): they are created by migrations in
``nonoka.store.sqlite.migrations`` and can be written through
``SQLiteCheckpointStore.transaction`` on the store's own connection. The store also keeps
next-call templates for the bridge's early dispatch (``NextCallStore``, with the SQL of
``nonoka.store.sqlite.next_calls``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

from nonoka.errors import CorruptSessionError, StoreError
from nonoka.state.entries import EntrySnapshot, MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import (
    EntryPlan,
    Lease,
    StepUpdateWriter,
    check_fork,
    check_lease_args,
    check_parent,
    conflict_error,
    decode_entries,
    decode_session,
    encode_entry,
    media_marks,
    next_revision,
    next_update_time,
    snapshot_json,
    stored_lease,
    with_media,
)
from nonoka.store.media import Media, files_column, needed
from nonoka.store.next_call_row import StoredNextCall
from nonoka.store.reuse import Decoded, StoreReuse
from nonoka.store.sqlite import leases, lineage, next_calls
from nonoka.store.sqlite import media as stored_media
from nonoka.store.sqlite.database import open_database, open_read_only, sqlite_error
from nonoka.store.sqlite.digests import Chain, is_stored
from nonoka.store.sqlite.entries import INSERT as INSERT_ENTRY
from nonoka.store.sqlite.entries import LAST_SEQ, delete_rows, doc, entry_block, new_block
from nonoka.store.sqlite.packing import pack, unpack

_UPSERT_CHECKPOINT = """
INSERT INTO checkpoints (session_id, state_json, revision, entry_count, memory_generation,
                         created_at, updated_at, entry_block)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id) DO UPDATE SET
    state_json = excluded.state_json,
    revision = excluded.revision,
    entry_count = excluded.entry_count,
    memory_generation = excluded.memory_generation,
    updated_at = excluded.updated_at
"""

_UPDATE_CHECKPOINT = """
UPDATE checkpoints SET state_json = ?, revision = ?, entry_count = ?, updated_at = ?
WHERE session_id = ? AND revision = ? AND entry_count = ? AND memory_generation = ?
"""


class _Transaction:
    """``SQLiteCheckpointStore.transaction``: a plain context manager rather than a
    generator one, which costs a few µs more on each of a turn's saves."""

    __slots__ = ("_begin", "_db", "_store")

    def __init__(self, store: SQLiteCheckpointStore, begin: str) -> None:
        self._store = store
        self._begin = begin

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        store._lock.acquire()
        try:
            db = store.connection
            db.execute(self._begin)
        except BaseException as exc:
            store._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise store._error(exc) from exc
            raise
        self._db = db
        return db

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:
        store = self._store
        try:
            if kind is None:
                try:
                    self._db.execute("COMMIT")
                except BaseException as error:
                    exc = error
                else:
                    if store._saved:
                        store._keep_saved()
                    return
            store._written.clear()  # what it says may not have been committed
            store._saved.clear()
            if self._db.in_transaction:
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise store._error(exc) from exc
            if kind is None and exc is not None:
                raise exc
        finally:
            store._lock.release()


class _Written(NamedTuple):
    """A session as this store last saved it: its revision, number of entries, memory
    generation, the digest chain of its last entry and where its entry rows live."""

    revision: int
    entries: int
    generation: int
    chain: Chain
    block: int


_STEPS = ("SELECT step_id, update_type, payload_json, updated_at FROM step_updates "
          "WHERE session_id = ? ORDER BY updated_at, rowid")

_UPSERT_STEP = """
INSERT INTO step_updates (session_id, step_id, update_type, payload_json, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (session_id, step_id, update_type) DO UPDATE SET
    payload_json = excluded.payload_json,
    updated_at = excluded.updated_at
"""


SNAPSHOT_SIZE_STEP = 512
"""Snapshot rows are padded with spaces (valid JSON whitespace) to a multiple of this."""


def padded(snapshot: str) -> str:
    """The snapshot padded to the next ``SNAPSHOT_SIZE_STEP`` bytes.

    A snapshot of a few KB spills onto an overflow page. SQLite rewrites a row in place
    when its new size equals the old one; otherwise it frees the old overflow page and
    takes a new one, which also writes the free-list page and the file header: five
    pages to commit instead of two. Saves of one session differ by a few bytes, so
    rounding the size keeps most of them in place (bench/README.md, ``save_load.py``).
    """
    size = len(snapshot) if snapshot.isascii() else len(snapshot.encode())
    return snapshot + " " * (-size % SNAPSHOT_SIZE_STEP)


def _reusable(db: sqlite3.Connection, session_id: str, known: Decoded | None,
              created_at: float, count: int) -> list[MemoryEntry] | None:
    """The cached entries when they are still the first stored rows, else ``None``."""
    if known is None or known.created_at != created_at or not 0 < len(known.entries) <= count:
        return None
    row = lineage.entry_row(db, session_id, len(known.entries) - 1, "key_chain")
    return known.entries if row is not None and row[0] == known.chain else None


class SQLiteCheckpointStore(StepUpdateWriter):
    """A ``CheckpointStore``, ``SessionLeases`` and ``NextCallStore`` in the SQLite file
    at ``path`` (created owner-only if new).

    The sqlite3 calls run synchronously inside the ``async`` methods, on purpose: a
    local write takes about 50 µs, less than handing it to a worker thread costs, and
    the busy timeout only blocks while another process holds the write lock for its own
    equally short transaction. One connection per store, serialised by a lock, so the
    store may be shared between threads. Call ``close()`` when done.
    """

    def __init__(self, path: str | os.PathLike[str], *, ours_only: bool = False,
                 read_only: bool = False, reuse: StoreReuse | None = None) -> None:
        """``ours_only``: refuse a SQLite file that holds other tables and not nonoka's
        (the project's own database; an explicit path may share its file).
        ``read_only``: open an existing file for reading only (``open_read_only``); every
        write is then a ``StoreError``. ``reuse``: what to keep between calls
        (``nonoka.store.reuse``), when a process shares it between the stores it opens;
        a new one otherwise."""
        self._path = Path(path)
        self.reuse = reuse if reuse is not None else StoreReuse()
        self.read_only = read_only
        self._db: sqlite3.Connection | None = (
            open_read_only(self._path, ours_only=ours_only) if read_only
            else open_database(self._path, ours_only=ours_only))
        self._lock = threading.Lock()
        self._written: dict[str, _Written] = {}
        """Per session: what this store last saved of it (cleared by a rollback)."""
        self._saved: dict[str, tuple[int, str, SessionState]] = {}
        """Per session: the revision, snapshot row and state the transaction under way
        wrote; handed to ``reuse.snapshots`` once it commits, dropped if it does not."""

    @property
    def path(self) -> Path:
        """The database file; other components may open their own connection to it."""
        return self._path

    @property
    def connection(self) -> sqlite3.Connection:
        """The store's connection (autocommit mode); prefer ``transaction()``."""
        if self._db is None:
            raise StoreError(f"the store for {self._path} is closed")
        return self._db

    def transaction(self, *, write: bool = True) -> _Transaction:
        """Run a block in one transaction on the store's connection, under its lock.

        Writes use ``BEGIN IMMEDIATE``: the write lock is taken up front (waiting up to
        the busy timeout), so a read-then-write block cannot fail half way because
        another process committed in between. SQLite errors become ``StoreError``.
        """
        return _Transaction(self, "BEGIN IMMEDIATE" if write else "BEGIN")

    def _error(self, exc: sqlite3.Error) -> StoreError:
        return sqlite_error(self._path, exc)

    # -- CheckpointStore ------------------------------------------------------------------

    async def save_session(self, state: SessionState) -> int:
        with self.transaction() as db:
            return self.write_session(db, state)

    def write_session(self, db: sqlite3.Connection, state: SessionState) -> int:
        """The statements of ``save_session``, inside the caller's write transaction."""
        snapshot = padded(snapshot_json(state, self.reuse.texts))
        revision = self._append(db, state, snapshot)
        if revision is None:
            revision = self._write(db, state, snapshot)
        self._saved[state.session_id] = (revision, snapshot, state)
        return revision

    def _keep_saved(self) -> None:
        """After a commit: the states it stored, as the next read of their rows would
        decode them, so that read (a turn's next, or the next request's) does not decode
        the snapshot again. Kept by revision and row text, so a row another process or
        store wrote since is decoded as usual."""
        for sid, (revision, snapshot, state) in self._saved.items():
            self.reuse.snapshots.remember_saved(sid, revision, snapshot, state)
        self._saved.clear()

    def _append(self, db: sqlite3.Connection, state: SessionState, snapshot: str
                ) -> int | None:
        """The common save, in two statements: this store wrote the stored revision, so
        it knows the entry count and memory generation; one ``UPDATE`` both checks them
        (with the revision) and writes the snapshot, then the new entries are inserted.
        ``None``, with nothing written, when that does not apply (``_write`` then)."""
        sid = state.session_id
        known = self._written.get(sid)
        if known is None or known.revision != state.revision:
            return None
        plan = EntryPlan(state, known.entries, known.generation)
        if plan.rewrite:
            return None
        revision = next_revision(sid, known.revision)
        if db.execute(_UPDATE_CHECKPOINT, (
                snapshot, revision, len(state.memory_entries), time.time(), sid,
                known.revision, known.entries, known.generation)).rowcount != 1:
            return None
        self._insert(db, sid, known.block, known.entries, plan.new_entries, known.chain,
                     revision, known.generation)
        return revision

    def _write(self, db: sqlite3.Connection, state: SessionState, snapshot: str) -> int:
        """Any save: check the revision against the stored row, append or rewrite the
        entries, upsert the snapshot."""
        sid = state.session_id
        self._written.pop(sid, None)
        row = db.execute(
            "SELECT revision, entry_count, memory_generation, entry_block FROM checkpoints "
            "WHERE session_id = ?",
            (sid,),
        ).fetchone()
        stored = 0 if row is None else int(row[0])
        if state.revision != stored:
            raise conflict_error(state, None if row is None else stored)
        revision = next_revision(sid, stored)
        count, generation = (0, state.memory_generation) if row is None else row[1:3]
        plan = EntryPlan(state, count, generation)
        start = count
        dropped: list[str] = []
        # A new session's row is given the block its entry rows will live in.
        block = new_block(db) if row is None else entry_block(db, sid, row[3])
        now = time.time()
        db.execute(
            _UPSERT_CHECKPOINT,
            (sid, snapshot, revision, len(state.memory_entries), state.memory_generation,
             now, now, block),
        )
        if plan.rewrite or row is None:
            lineage.detach_branches(db, sid)  # they keep the entries this rewrite drops
            if plan.rewrite:  # (a new session's leftover rows: `db vacuum` collects theirs)
                dropped = stored_media.referenced_by(db, sid)
            delete_rows(db, sid, block)
            start = 0
        if plan.new_entries or start == 0:
            chain = self._chain_before(db, sid, start)
            self._insert(db, sid, block, start, plan.new_entries, chain, revision,
                         state.memory_generation)
        stored_media.collect(db, dropped)  # after the new rows: a file they keep stays
        if plan.rewrite:
            db.execute("UPDATE checkpoints SET base_session_id = NULL, base_count = 0 "
                       "WHERE session_id = ?", (sid,))
        return revision

    def _insert(self, db: sqlite3.Connection, sid: str, block: int, start: int,
                entries: Sequence[MemoryEntry], chain: Chain, revision: int,
                generation: int) -> None:
        """Insert ``entries`` from ``start`` with their digest chain, and remember what
        the session holds once this transaction commits (``transaction`` forgets it
        if it does not). One loop, one statement for the usual one entry: this runs
        twice a turn."""
        rows: list[tuple[int, str, int, str | bytes, bytes | str, str | None]] = []
        seq = start
        files: list[Media] = []
        if start + len(entries) > LAST_SEQ + 1:
            raise StoreError(f"session {sid}: more than {LAST_SEQ + 1} entries; start a new "
                             "session (compacting this one keeps its summary)")
        for entry in entries:
            text, moved = encode_entry(entry)
            chain = chain.add(text)
            if moved is None:
                rows.append((doc(block, seq), sid, seq, pack(text), chain.stored(), None))
            else:
                rows.append((doc(block, seq), sid, seq, pack(text), chain.stored(),
                             files_column(moved)))
                files += moved
            seq += 1
        if files:
            stored_media.keep(db, files)
        if len(rows) == 1:
            db.execute(INSERT_ENTRY, rows[0])
        elif rows:
            db.executemany(INSERT_ENTRY, rows)
        if len(self._written) >= 256:
            self._written.clear()  # a cache: at worst the stored row is read again
        self._written[sid] = _Written(revision, seq, generation, chain, block)

    def _chain_before(self, db: sqlite3.Connection, session_id: str, seq: int) -> Chain:
        """The digest chain of the entries before ``seq`` (stored with entry ``seq - 1``)."""
        if seq == 0:
            return Chain()
        row = lineage.entry_row(db, session_id, seq - 1, "key_chain")
        if row is None or not is_stored(row[0]):
            raise CorruptSessionError(
                f"session {session_id}: stored entry {seq - 1} is missing or has no digest "
                "chain; the rows were left as they are")
        return Chain.decode(row[0])

    async def fork_session(self, state: SessionState, parent_id: str, at: int,
                           parent_generation: int) -> int:
        check_fork(state, at)
        sid = state.session_id
        with self.transaction() as db:
            parent = db.execute("SELECT entry_count, memory_generation FROM checkpoints "
                                "WHERE session_id = ?", (parent_id,)).fetchone()
            check_parent(parent_id, None if parent is None else (int(parent[0]), parent[1]),
                         at, parent_generation)
            if db.execute("SELECT 1 FROM checkpoints WHERE session_id = ?",
                          (sid,)).fetchone() is not None:
                raise conflict_error(state, 1)
            now = time.time()
            db.execute(_UPSERT_CHECKPOINT, (sid, snapshot_json(state, self.reuse.texts), 1, at,
                                            state.memory_generation, now, now, new_block(db)))
            db.execute("UPDATE checkpoints SET base_session_id = ?, base_count = ? "
                       "WHERE session_id = ?", (parent_id, at, sid))
        return 1

    async def stored_revision(self, session_id: str) -> int | None:
        with self.transaction(write=False) as db:
            row = db.execute("SELECT revision FROM checkpoints WHERE session_id = ?",
                             (session_id,)).fetchone()
        return None if row is None else int(row[0])

    async def load_snapshot(self, session_id: str) -> tuple[SessionState, int] | None:
        with self.transaction(write=False) as db:
            row = db.execute("SELECT state_json, revision, entry_count FROM checkpoints "
                             "WHERE session_id = ?", (session_id,)).fetchone()
            if row is None:
                return None
            steps = db.execute(_STEPS, (session_id,)).fetchall()
        return (decode_session(session_id, row[0], [], row[1], steps, kept=self.reuse.snapshots),
                int(row[2]))

    async def load_entries(self, session_id: str, start: int, stop: int) -> list[MemoryEntry]:
        with self.transaction(write=False) as db:
            rows = lineage.resolved_entries(db, session_id, max(0, start), max(0, stop),
                                            "entry_json, media")
            marks = media_marks([r[1] for r in rows])
            found = stored_media.fetch(db, needed(marks.values())) if marks else {}
        entries = decode_entries(session_id, [unpack(r[0]) for r in rows], max(0, start))
        return with_media(session_id, entries, marks, found, max(0, start)) if marks \
            else entries

    async def load_media(self, digest: str) -> Media | None:
        """``MediaStore``: the file stored under ``digest``."""
        with self.transaction(write=False) as db:
            return stored_media.load(db, digest)

    async def load_session(self, session_id: str) -> SessionState | None:
        path = str(self._path)
        cache = self.reuse.entries
        known = cache.get(path, session_id)
        with self.transaction(write=False) as db:
            row = db.execute(
                "SELECT state_json, revision, entry_count, created_at FROM checkpoints "
                "WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            snapshot, revision, count, created_at = row
            reused = _reusable(db, session_id, known, created_at, count)
            start = len(reused) if reused is not None else 0
            # A branch's first entries are its bases' rows: read through them.
            rows = lineage.resolved_entries(db, session_id, start, None,
                                            "entry_json, key_chain, media")
            steps = db.execute(_STEPS, (session_id,)).fetchall()
            # The files of the rows that refer to some, in the same read (one query).
            marks = media_marks([r[2] for r in rows])
            found = stored_media.fetch(db, needed(marks.values())) if marks else {}
        if start + len(rows) != count:
            raise CorruptSessionError(
                f"session {session_id}: {start + len(rows)} entry rows stored but the "
                f"snapshot expects {count}; the rows were left as they are"
            )
        texts = [unpack(r[0]) for r in rows]
        if marks:
            new = with_media(session_id, decode_entries(session_id, texts, start), marks,
                             found, start)
            if reused is None:
                state = decode_session(session_id, snapshot, [], revision, steps, new)
                if rows[-1][1] is not None:
                    cache.put(path, session_id, Decoded(created_at, new, rows[-1][1]))
                return state.model_copy(update={"memory_entries": EntrySnapshot(new)})
            combined = cache.extend(reused, start, new)
            cache.put(path, session_id, Decoded(created_at, combined, rows[-1][1]))
            return decode_session(session_id, snapshot, [], revision, steps,
                                  EntrySnapshot(combined), self.reuse.snapshots)
        if reused is None:
            state = decode_session(session_id, snapshot, texts, revision, steps)
            if count and rows[-1][1] is not None:
                entries = list(state.memory_entries)
                cache.put(path, session_id, Decoded(created_at, entries, rows[-1][1]))
                state = state.model_copy(update={"memory_entries": EntrySnapshot(entries)})
            return state
        combined = cache.extend(reused, start, decode_entries(session_id, texts, start))
        if rows:
            cache.put(path, session_id, Decoded(created_at, combined, rows[-1][1]))
        return decode_session(session_id, snapshot, [], revision, steps,
                              EntrySnapshot(combined), self.reuse.snapshots)

    async def _write_step(self, session_id: str, step_id: str, kind: str, payload: str) -> None:
        self._save_step(session_id, step_id, kind, payload)

    def _save_step(self, session_id: str, step_id: str, kind: str, payload: str) -> None:
        with self.transaction() as db:
            (last,) = db.execute(
                "SELECT max(updated_at) FROM step_updates WHERE session_id = ?", (session_id,)
            ).fetchone()
            db.execute(
                _UPSERT_STEP, (session_id, step_id, kind, payload, next_update_time(last))
            )

    async def delete_session(self, session_id: str) -> bool:
        self._written.pop(session_id, None)
        with self.transaction() as db:
            lineage.detach_branches(db, session_id)
            dropped = stored_media.referenced_by(db, session_id)
            row = db.execute("SELECT entry_block FROM checkpoints WHERE session_id = ?",
                             (session_id,)).fetchone()
            removed = delete_rows(db, session_id, None if row is None else row[0])
            removed += sum(
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,)).rowcount
                for table in ("checkpoints", "step_updates")
            )
            db.execute("DELETE FROM next_calls WHERE session_id = ?", (session_id,))
            # A released lease's row (a live one stays: its holder finds out on its own).
            db.execute("DELETE FROM session_leases WHERE session_id = ? AND expires_at = 0",
                       (session_id,))
            # Files no other entry refers to go with it, in the same transaction.
            stored_media.collect(db, dropped)
        return removed > 0

    # -- NextCallStore -------------------------------------------------------------------

    def save_next_call(self, session_id: str, revision: int, template: str) -> bool:
        with self.transaction() as db:
            return next_calls.save(db, session_id, revision, template)

    def load_next_call(self, session_id: str, *, entries: bool = True
                       ) -> StoredNextCall | None:
        with self.transaction(write=False) as db:
            return next_calls.load(db, session_id, entries)

    def lease_at_revision(self, session_id: str, revision: int, owner: str,
                          ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        with self.transaction() as db:
            return next_calls.lease_at_revision(db, session_id, revision, owner, ttl_seconds)

    # -- SessionLeases -------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        now = time.time()
        with self.transaction() as db:
            return leases.acquire(db, session_id, owner, ttl_seconds, now)

    async def renew_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        with self.transaction() as db:
            return db.execute(leases.RENEW, (time.time() + ttl_seconds, session_id, owner),
                              ).rowcount == 1

    async def release_lease(self, session_id: str, owner: str) -> bool:
        with self.transaction() as db:
            released = db.execute(leases.RELEASE, (session_id, owner)).rowcount == 1
            if released:
                db.execute(leases.FORGET, (session_id,))
            return released

    async def get_lease(self, session_id: str) -> Lease | None:
        now = time.time()
        with self.transaction(write=False) as db:
            row = db.execute(
                "SELECT owner, expires_at FROM session_leases "
                "WHERE session_id = ? AND expires_at > ?",
                (session_id, now),
            ).fetchone()
        return None if row is None else stored_lease(session_id, row[0], row[1], now)

    async def close(self) -> None:
        """Close the connection (the last one to close also folds the WAL back in)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
