"""The storage contract every engine implements, and the helpers they share.

An engine keeps three things per session: the snapshot (everything small and mutable),
the conversation entries (append-only between compactions), and step updates (one
latest row per step and kind). Saving checks the snapshot's ``revision`` against the
stored one, so a writer that raced another process fails with ``SessionConflictError``
instead of silently overwriting it.
"""

from __future__ import annotations

import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from nonoka.errors import CorruptSessionError, SessionConflictError, StoreError
from nonoka.state.entries import MemoryEntry
from nonoka.state.frozen import replace
from nonoka.state.session_state import (
    SessionState,
    StepFailure,
    StepResult,
    StepStatus,
    StepUpdate,
    merge_step_updates,
    migrate_state_dict,
)
from nonoka.store import media
from nonoka.store.media import Media
from nonoka.store.reuse import DecodedSnapshots, SnapshotTexts


@runtime_checkable
class CheckpointStore(Protocol):
    """Checkpoints and step updates. Every method is safe to call from any process."""

    async def save_session(self, state: SessionState) -> int:
        """Persist the snapshot; return the new revision.

        Raises ``SessionConflictError`` when the stored revision is not ``state.revision``.
        """
        ...

    async def load_session(self, session_id: str) -> SessionState | None:
        """The migrated snapshot with step updates merged, or ``None`` when unknown."""
        ...

    async def save_step_status(self, session_id: str, step_id: str, status: StepStatus) -> None:
        ...

    async def save_step_result(self, session_id: str, step_id: str, result: StepResult) -> None:
        ...

    async def save_step_error(self, session_id: str, step_id: str, failure: StepFailure) -> None:
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Remove everything stored for the session; ``False`` when there was nothing."""
        ...

    async def close(self) -> None:
        ...


@dataclass(frozen=True)
class Lease:
    """A live lease: who runs the session, and for how long unless they renew."""

    session_id: str
    owner: str
    expires_in: float
    """Seconds left, by the store's clock (the database's, for a shared server)."""


@runtime_checkable
class SessionLeases(Protocol):
    """Session ownership: at most one live owner runs a session at a time.

    Revisions make a lost race fail loudly; leases keep the race from happening. A lease
    has an expiry, so one left behind by a killed process frees the session after its
    ttl. ``owner`` is a token unique to the process and request (``new_lease_owner()``
    in ``nonoka.store.leases``); ``hold_lease`` there acquires, renews and releases.
    """

    async def acquire_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        """Take the lease when it is free, expired or already ``owner``'s (then extend it;
        an engine may leave one with more than half of ``ttl_seconds`` left as it is).

        ``False`` when another owner holds a live lease; nothing is changed then.
        """
        ...

    async def renew_lease(self, session_id: str, owner: str, ttl_seconds: float) -> bool:
        """Extend ``owner``'s lease to ``ttl_seconds`` from now; ``False`` if it was lost
        (taken over after it expired, or released)."""
        ...

    async def release_lease(self, session_id: str, owner: str) -> bool:
        """Give the lease up; ``False`` when ``owner`` did not hold it."""
        ...

    async def get_lease(self, session_id: str) -> Lease | None:
        """The live lease on the session, or ``None`` when it is free (or expired)."""
        ...


def check_lease_args(owner: str, ttl_seconds: float | None = None) -> None:
    """Refuse an empty owner or a ttl that is not a positive number of seconds."""
    if not owner:
        raise ValueError("a lease owner must be a non-empty token")
    if ttl_seconds is not None and not (ttl_seconds > 0 and math.isfinite(ttl_seconds)):
        raise ValueError(f"a lease ttl must be a positive number of seconds, not {ttl_seconds!r}")


SNAPSHOT_EXCLUDE = {"memory_entries", "revision"}


MAX_REVISION = 2**63 - 1
"""The largest revision both SQL engines can store (a signed 64-bit integer)."""


def next_revision(session_id: str, stored: int) -> int:
    """The revision after ``stored``; a ``StoreError`` (nothing written) at the maximum."""
    if stored >= MAX_REVISION:
        raise StoreError(
            f"session {session_id} cannot be saved again: its stored revision is at the "
            "largest value the database can hold (the row was edited by hand?); the stored "
            "session is unchanged. Start a new session")
    return stored + 1


def stored_lease(session_id: str, owner: object, expires_at: object, now: float) -> Lease:
    """A lease row as a ``Lease``; a ``StoreError`` naming the fix when a column holds
    the wrong type (a row edited by hand), rather than a failure deep in a turn."""
    if not isinstance(owner, str) or isinstance(expires_at, bool) \
            or not isinstance(expires_at, int | float):
        raise StoreError(
            f"the lease of session {session_id} is damaged (owner {owner!r:.40}, expires_at "
            f"{expires_at!r:.40}); nothing was changed. Remove it with: DELETE FROM "
            f"session_leases WHERE session_id = '{session_id}'")
    return Lease(session_id, owner, float(expires_at) - now)


def snapshot_json(state: SessionState, texts: SnapshotTexts | None = None) -> str:
    """The snapshot row: the whole state except the entries (stored as rows of their own).

    The trace (the last events of the run, most of a snapshot's text) changes by a few
    events a save and the plan rarely: with ``texts`` (the store's ``SnapshotTexts``)
    their JSON is kept and only new events are encoded; without, all of it is."""
    head = state.model_dump_json(exclude=_WRITTEN_APART)
    if texts is None:
        plan = "null" if state.current_plan is None else state.current_plan.model_dump_json()
        trace = ",".join(event.model_dump_json() for event in state.trace)
    else:
        plan = texts.plan_json(state.current_plan)
        trace = texts.trace_text(state.session_id, state.trace)
    return f'{head[:-1]},"current_plan":{plan},"trace":[{trace}]}}'


_WRITTEN_APART = {*SNAPSHOT_EXCLUDE, "trace", "current_plan"}


def entry_json(entry: MemoryEntry) -> str:
    """An entry's row as it is stored when it holds no inline file (``encode_entry``)."""
    return entry.model_dump_json()


def encode_entry(entry: MemoryEntry) -> tuple[str, list[Media] | None]:
    """An entry's row text, and the files whose bytes go to the ``media`` table instead
    (``None`` for an entry without inline files: its row is ``entry_json``'s).

    This is where a store decides what is stored once, by digest (``nonoka.store.media``):
    each inline file part of ``metadata["parts"]`` becomes a reference. An entry without
    parts costs one dictionary look-up more than ``entry_json``: no other pass over it.
    """
    meta = entry.metadata
    if meta:
        parts = meta.get("parts")
        if parts:
            moved = media.stored_parts(parts)
            if moved is not None:
                kept, files = moved
                stored = entry.model_copy(update={"metadata": {**meta, "parts": kept}})
                return stored.model_dump_json(), files
    return entry.model_dump_json(), None


def media_rows(files: Iterable[Media]) -> list[Media]:
    """Each file once (the same bytes sent again in a later turn are one row)."""
    return list({f.digest: f for f in files}.values())


def with_media(session_id: str, entries: list[MemoryEntry], marks: dict[int, str],
               found: dict[str, str], first: int = 0) -> list[MemoryEntry]:
    """``entries`` with the files of the rows ``marks`` names (position in ``entries`` →
    the row's ``media`` column) put back from ``found`` (digest → base64 text), in place.

    A reference whose file is not stored is a ``CorruptSessionError`` naming the entry
    and the digest (``nonoka db check`` lists every such reference).
    """
    for at in marks:
        entry = entries[at]
        try:
            parts = media.restored_parts(entry.metadata["parts"], found)
        except KeyError as exc:
            raise CorruptSessionError(
                f"session {session_id}: stored entry {first + at} refers to the file "
                f"{exc.args[0]}, which is not stored (run `nonoka db check`); the rows were "
                "left as they are") from None
        entries[at] = entry.model_copy(update={"metadata": {**entry.metadata,
                                                            "parts": parts}})
    return entries


def media_marks(columns: Sequence[str | None]) -> dict[int, str]:
    """The rows (by position) whose ``media`` column names files. One C-level count
    settles the usual batch, where no row does."""
    if columns.count(None) == len(columns):
        return {}
    return {at: value for at, value in enumerate(columns) if value is not None}


@runtime_checkable
class MediaStore(Protocol):
    """Optional capability: the files entries refer to, stored once by digest
    (``nonoka.store.media``), read without loading a session (every engine nonoka
    ships has it: ``nonoka ui`` serves images with it)."""

    async def load_media(self, digest: str) -> Media | None:
        """The file stored under ``digest``; ``None`` when nothing is."""
        ...


def decode_state(
    session_id: str, snapshot: str | bytes, entries: list[str], revision: int,
    decoded: Sequence[MemoryEntry] | None = None, kept: DecodedSnapshots | None = None,
) -> SessionState:
    """Decode and migrate stored rows into a ``SessionState``.

    ``decoded``: the entries, already decoded (``entries`` is then ignored); with
    ``kept`` (the store's ``DecodedSnapshots``), a snapshot row decoded before is not
    decoded again. Raises
    ``CorruptSessionError`` (naming the session and what is wrong) for rows that cannot
    be decoded, and ``UnsupportedVersionError`` for a newer schema.
    """
    if decoded is not None and kept is not None:
        known = kept.get(session_id, revision, snapshot)
        if known is not None:
            return replace(known, memory_entries=decoded)
    try:
        raw: Any = json.loads(snapshot)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptSessionError(
            f"session {session_id}: the stored snapshot is not valid JSON ({exc}); "
            "the row was left as it is"
        ) from exc
    if not isinstance(raw, dict):
        raise CorruptSessionError(f"session {session_id}: the stored snapshot is not an object")
    try:
        raw = migrate_state_dict(raw)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptSessionError(
            f"session {session_id}: the stored snapshot cannot be migrated ({exc!r}); "
            "the row was left as it is"
        ) from exc
    if decoded is not None:
        raw["memory_entries"] = []
    elif entries or "memory_entries" not in raw:
        raw["memory_entries"] = decode_entries(session_id, entries)
    try:
        raw["revision"] = revision
        state = SessionState.model_validate(raw)
        if decoded is not None:
            if kept is not None:
                kept.remember(session_id, revision, snapshot, state)
            return replace(state, memory_entries=decoded)
        return state
    except (ValueError, ValidationError) as exc:
        raise CorruptSessionError(
            f"session {session_id}: the stored state does not decode ({exc}); "
            "the row was left as it is"
        ) from exc


def decode_entries(session_id: str, entries: list[str], first: int = 0) -> list[MemoryEntry]:
    """Validate entry rows straight from JSON text.

    Validating each row's JSON directly costs little more than ``json.loads`` alone and
    about 60% of ``json.loads`` followed by validation of the dicts (or of one
    concatenated array); it matters for long sessions (see ``bench/save_load.py``).
    """
    validate = MemoryEntry.__pydantic_validator__.validate_json
    try:
        return [validate(text) for text in entries]
    except (ValueError, ValidationError):
        pass
    for seq, text in enumerate(entries, first):  # find the bad row to name it
        try:
            validate(text)
        except (ValueError, ValidationError) as exc:
            raise CorruptSessionError(
                f"session {session_id}: stored entry {seq} does not decode ({exc}); "
                "the rows were left as they are"
            ) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def decode_session(
    session_id: str,
    snapshot: str | bytes,
    entries: list[str],
    revision: int,
    step_rows: Iterable[tuple[str, str, str | bytes, float]],
    decoded: Sequence[MemoryEntry] | None = None,
    kept: DecodedSnapshots | None = None,
) -> SessionState:
    """``decode_state`` plus the step updates, merged in time order.

    ``step_rows`` are ``(step_id, update_type, payload_json, updated_at)``; a row that
    does not decode is a ``CorruptSessionError`` naming the session and the step.
    """
    state = decode_state(session_id, snapshot, entries, revision, decoded, kept)
    updates: list[StepUpdate] = []
    for step_id, update_type, payload, updated_at in step_rows:
        try:
            update = StepUpdate.model_validate({
                "step_id": step_id,
                "update_type": update_type,
                "payload": json.loads(payload),
                "updated_at": updated_at,
            })
            _PAYLOAD_CHECKS[update.update_type](update.payload)
        except (ValueError, KeyError, ValidationError) as exc:
            raise CorruptSessionError(
                f"session {session_id}: the stored {update_type} update of step {step_id!r} "
                f"does not decode ({exc}); the rows were left as they are"
            ) from exc
        updates.append(update)
    return merge_step_updates(state, updates) if updates else state


_PAYLOAD_CHECKS: dict[str, Callable[[dict[str, Any]], object]] = {
    "status": lambda payload: StepStatus(payload["status"]),
    "result": StepResult.model_validate,
    "error": StepFailure.model_validate,
}


def next_update_time(last: float | None) -> float:
    """A timestamp for a new step update, strictly after ``last`` (the session's latest).

    Merging sorts updates by time, so a clock that stalls or steps back must not reorder
    them.
    """
    now = time.time()
    return now if last is None or now > last else last + 1e-6


def conflict_error(state: SessionState, stored: int | None) -> SessionConflictError:
    """The error for a save whose ``state.revision`` is not the stored one (``None``: no row)."""
    sid = state.session_id
    if stored is None:
        return SessionConflictError(
            f"session {sid} is not stored (deleted by another writer?) but this copy builds "
            f"on revision {state.revision}; nothing was written"
        )
    what = "already exists" if state.revision == 0 else "was saved by another writer"
    return SessionConflictError(
        f"session {sid} {what}: stored revision {stored}, this copy builds on revision "
        f"{state.revision}. Load it again and reapply the change; nothing was written."
    )


@runtime_checkable
class RevisionReader(Protocol):
    """Optional capability: a session's stored revision, read without loading it.

    A front end that chose a session by loading it checks, once it holds the session's
    lease, that nobody saved it in between; the turn then goes on with the session it
    loaded instead of reading it again (every engine nonoka ships has it)."""

    async def stored_revision(self, session_id: str) -> int | None:
        """The revision of the stored snapshot; ``None`` when the session is unknown."""
        ...


@runtime_checkable
class BranchingStore(Protocol):
    """Optional capability: branches that share their parent's first entries, made and
    read without decoding the whole conversation.

    ``Runner.fork_session`` uses it when the store has it, so a fork costs the same for
    10 entries and 10,000; otherwise it loads the parent and saves a copy.
    """

    async def load_snapshot(self, session_id: str) -> tuple[SessionState, int] | None:
        """The session without its entries (``memory_entries`` empty, step updates
        merged) and how many entries it holds; ``None`` when unknown."""
        ...

    async def load_entries(self, session_id: str, start: int, stop: int) -> list[MemoryEntry]:
        """The session's entries ``start`` to ``stop`` (fewer at its end)."""
        ...

    async def fork_session(self, state: SessionState, parent_id: str, at: int,
                           parent_generation: int) -> int:
        """Store ``state`` as a new session whose entries are ``parent_id``'s first ``at``,
        shared rather than copied (``state.memory_entries`` is ignored); returns its
        revision (1).

        Raises ``SessionConflictError`` (nothing written) when the parent is gone, holds
        fewer than ``at`` entries, or rewrote them since ``parent_generation``, or when a
        session with the branch's id exists.
        """
        ...


def check_fork(state: SessionState, at: int) -> None:
    """Refuse a branch that is not a new session, or a negative fork point."""
    if state.revision != 0:
        raise ValueError("a branch is a new session: its state must build on revision 0")
    if at < 0:
        raise ValueError(f"a fork point counts entries: {at} is negative")


def check_parent(parent_id: str, stored: tuple[int, int] | None, at: int,
                 generation: int) -> None:
    """Refuse a fork whose parent (``(entry_count, memory_generation)`` as stored) changed."""
    if stored is None:
        raise SessionConflictError(f"session {parent_id} is not stored; nothing was forked")
    count, stored_generation = stored
    if stored_generation != generation or count < at:
        raise SessionConflictError(
            f"session {parent_id} was rewritten since it was read (it now holds {count} "
            f"entries); load it again and fork again. Nothing was written.")


class StepUpdateWriter(ABC):
    """The contract's three step-update methods, over one engine primitive.

    Each engine stores a step update the same way whatever its kind; it implements
    ``_write_step`` and inherits the rest.
    """

    @abstractmethod
    async def _write_step(self, session_id: str, step_id: str, kind: str, payload: str) -> None:
        """Upsert the latest ``kind`` row of one step."""

    async def save_step_status(self, session_id: str, step_id: str, status: StepStatus) -> None:
        await self._write_step(session_id, step_id, "status", step_payload("status", status))

    async def save_step_result(self, session_id: str, step_id: str, result: StepResult) -> None:
        await self._write_step(session_id, step_id, "result", step_payload("result", result))

    async def save_step_error(self, session_id: str, step_id: str, failure: StepFailure) -> None:
        await self._write_step(session_id, step_id, "error", step_payload("error", failure))


def step_payload(update_type: str, value: StepStatus | StepResult | StepFailure) -> str:
    if isinstance(value, StepStatus):
        return json.dumps({"status": value.value})
    return value.model_dump_json()


class EntryPlan:
    """How to store a snapshot's entries given what the store already holds.

    Entries are appended while the memory generation is unchanged and nothing was
    removed; otherwise (after a compaction) they are rewritten.
    """

    __slots__ = ("new_entries", "rewrite")

    def __init__(
        self, state: SessionState, stored_count: int, stored_generation: int
    ) -> None:
        entries = state.memory_entries
        self.rewrite = (
            state.memory_generation != stored_generation or len(entries) < stored_count
        )
        self.new_entries = entries if self.rewrite else entries[stored_count:]
