"""The in-memory reference engine's checkpoint store.

It keeps what the SQLite engine keeps, as JSON text rather than object references, so a
round trip through it is as faithful (and as lossy) as one through a database, and it
follows the same rules: revision checks, entries appended between compactions, step
updates with a strictly increasing time, leases with an expiry. Tests, and runs that
need no persistence, use it. Several store instances can share one ``MemoryDatabase`` to
stand in for processes reopening the same file.
"""

from __future__ import annotations

import time

from nonoka.state.entries import MemoryEntry
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
    media_rows,
    next_update_time,
    snapshot_json,
    with_media,
)
from nonoka.store.media import Media, base64_text, digests, files_column, needed
from nonoka.store.memory.database import CheckpointRow, MemoryDatabase, StepRow
from nonoka.store.reuse import StoreReuse


class MemoryCheckpointStore(StepUpdateWriter):
    """A ``CheckpointStore`` and ``SessionLeases`` over a ``MemoryDatabase`` (fresh by
    default)."""

    def __init__(self, database: MemoryDatabase | None = None, *,
                 reuse: StoreReuse | None = None) -> None:
        self.database = database if database is not None else MemoryDatabase()
        self.reuse = reuse if reuse is not None else StoreReuse()
        """What this store keeps between saves (``nonoka.store.reuse``)."""

    async def save_session(self, state: SessionState) -> int:
        snapshot = snapshot_json(state, self.reuse.texts)
        db = self.database
        with db.lock:
            row = db.checkpoints.get(state.session_id)
            stored = 0 if row is None else row.revision
            if state.revision != stored:
                raise conflict_error(state, None if row is None else stored)
            now = time.time()
            if row is None:
                row = CheckpointRow(snapshot, 0, state.memory_generation, [], now, now)
            plan = EntryPlan(state, len(row.entries), row.memory_generation)
            start = 0 if plan.rewrite else len(row.entries)
            marks = {} if plan.rewrite else dict(row.media)
            new = []
            for seq, entry in enumerate(plan.new_entries, start):
                text, files = encode_entry(entry)
                new.append(text)
                if files is not None:
                    marks[seq] = files_column(files)
                    for file in media_rows(files):
                        db.media.setdefault(file.digest, file)
            entries = new if plan.rewrite else row.entries + new
            db.checkpoints[state.session_id] = CheckpointRow(
                snapshot, stored + 1, state.memory_generation, entries, row.created_at, now,
                marks)
            if plan.rewrite:
                collect_media(db, needed(row.media.values()))
            return stored + 1

    async def fork_session(self, state: SessionState, parent_id: str, at: int,
                           parent_generation: int) -> int:
        """A branch; this engine copies the shared entries (their text, not the objects)."""
        check_fork(state, at)
        db = self.database
        with db.lock:
            parent = db.checkpoints.get(parent_id)
            check_parent(parent_id, None if parent is None else
                         (len(parent.entries), parent.memory_generation), at, parent_generation)
            assert parent is not None
            if state.session_id in db.checkpoints:
                raise conflict_error(state, db.checkpoints[state.session_id].revision)
            now = time.time()
            db.checkpoints[state.session_id] = CheckpointRow(
                snapshot_json(state, self.reuse.texts), 1, state.memory_generation,
                parent.entries[:at], now, now,
                {seq: value for seq, value in parent.media.items() if seq < at})
            return 1

    async def stored_revision(self, session_id: str) -> int | None:
        with self.database.lock:
            row = self.database.checkpoints.get(session_id)
            return None if row is None else row.revision

    async def load_snapshot(self, session_id: str) -> tuple[SessionState, int] | None:
        with self.database.lock:
            row = self.database.checkpoints.get(session_id)
            if row is None:
                return None
            snapshot, revision, count = row.state_json, row.revision, len(row.entries)
            steps = self._steps(session_id)
        return decode_session(session_id, snapshot, [], revision, steps), count

    async def load_entries(self, session_id: str, start: int, stop: int) -> list[MemoryEntry]:
        start, stop = max(0, start), max(0, stop)
        with self.database.lock:
            row = self.database.checkpoints.get(session_id)
            texts = [] if row is None else row.entries[start:stop]
            marks = {} if row is None else {seq - start: value for seq, value in
                                            row.media.items() if start <= seq < stop}
            found = self._found(marks)
        entries = decode_entries(session_id, texts, start)
        return with_media(session_id, entries, marks, found, start) if marks else entries

    async def load_session(self, session_id: str) -> SessionState | None:
        db = self.database
        with db.lock:
            row = db.checkpoints.get(session_id)
            if row is None:
                return None
            steps = self._steps(session_id)
            snapshot, entries, revision = row.state_json, list(row.entries), row.revision
            marks = dict(row.media)
            found = self._found(marks)
        if not marks:
            return decode_session(session_id, snapshot, entries, revision, steps)
        decoded = with_media(session_id, decode_entries(session_id, entries), marks, found)
        return decode_session(session_id, snapshot, [], revision, steps, decoded)

    def _found(self, marks: dict[int, str]) -> dict[str, str]:
        """The files the rows ``marks`` names refer to, as base64 (the lock held)."""
        stored = self.database.media
        return {d: base64_text(stored[d].data) for d in needed(marks.values()) if d in stored}

    async def load_media(self, digest: str) -> Media | None:
        """``MediaStore``: the file stored under ``digest``."""
        with self.database.lock:
            return self.database.media.get(digest)

    def _steps(self, session_id: str) -> list[tuple[str, str, str, float]]:
        """The session's step updates in time order (call with the lock held)."""
        steps = sorted(
            ((step_id, kind, step.payload_json, step.updated_at, step.order)
             for (sid, step_id, kind), step in self.database.step_updates.items()
             if sid == session_id),
            key=lambda r: (r[3], r[4]),
        )
        return [r[:4] for r in steps]

    async def _write_step(self, session_id: str, step_id: str, kind: str, payload: str) -> None:
        self._save_step(session_id, step_id, kind, payload)

    def _save_step(self, session_id: str, step_id: str, kind: str, payload: str) -> None:
        db = self.database
        with db.lock:
            times = [s.updated_at for k, s in db.step_updates.items() if k[0] == session_id]
            at = next_update_time(max(times, default=None))
            key = (session_id, step_id, kind)
            old = db.step_updates.get(key)
            if old is None:
                order, db.next_order = db.next_order, db.next_order + 1
            else:
                order = old.order  # an upsert keeps its rowid
            db.step_updates[key] = StepRow(payload, at, order)

    async def delete_session(self, session_id: str) -> bool:
        db = self.database
        with db.lock:
            row = db.checkpoints.pop(session_id, None)
            keys = [k for k in db.step_updates if k[0] == session_id]
            for key in keys:
                del db.step_updates[key]
            if row is not None:
                collect_media(db, needed(row.media.values()))
            return row is not None or bool(keys)

    # -- SessionLeases -------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        db = self.database
        with db.lock:
            now = time.monotonic()
            held = db.leases.get(session_id)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            db.leases[session_id] = (owner, now + ttl_seconds)
            return True

    async def renew_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        check_lease_args(owner, ttl_seconds)
        db = self.database
        with db.lock:
            held = db.leases.get(session_id)
            if held is None or held[0] != owner:
                return False
            db.leases[session_id] = (owner, time.monotonic() + ttl_seconds)
            return True

    async def release_lease(self, session_id: str, owner: str) -> bool:
        db = self.database
        with db.lock:
            held = db.leases.get(session_id)
            if held is None or held[0] != owner:
                return False
            del db.leases[session_id]
            return True

    async def get_lease(self, session_id: str) -> Lease | None:
        with self.database.lock:
            held = self.database.leases.get(session_id)
        if held is None:
            return None
        left = held[1] - time.monotonic()
        return Lease(session_id, held[0], left) if left > 0 else None

    async def close(self) -> None:
        """Nothing to release; the data lives as long as the ``MemoryDatabase``."""



def collect_media(db: MemoryDatabase, candidates: list[str]) -> None:
    """Forget the files among ``candidates`` no stored entry refers to (call it with the
    database's lock held)."""
    if not candidates:
        return
    referenced = {d for row in db.checkpoints.values() for value in row.media.values()
                  for d in digests(value)}
    for digest in candidates:
        if digest not in referenced:
            db.media.pop(digest, None)
