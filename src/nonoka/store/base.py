"""The storage contract every engine implements, and the helpers they share.

An engine keeps three things per session: the snapshot (everything small and mutable),
the conversation entries (append-only between compactions), and step updates (one
latest row per step and kind). Saving checks the snapshot's ``revision`` against the
stored one, so a writer that raced another process fails with ``SessionConflictError``
instead of silently overwriting it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from nonoka.errors import CorruptSessionError
from nonoka.messages import MemoryEntry
from nonoka.state import (
    SessionState,
    StepFailure,
    StepResult,
    StepStatus,
    migrate_state_dict,
)


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


SNAPSHOT_EXCLUDE = {"memory_entries", "revision"}


def snapshot_json(state: SessionState) -> str:
    """The snapshot row: the whole state except the entries (stored as rows of their own)."""
    return state.model_dump_json(exclude=SNAPSHOT_EXCLUDE)


def entry_json(entry: MemoryEntry) -> str:
    return entry.model_dump_json()


def decode_state(
    session_id: str, snapshot: str | bytes, entries: list[str], revision: int
) -> SessionState:
    """Decode and migrate stored rows into a ``SessionState``.

    Raises ``CorruptSessionError`` (naming the session and what is wrong) for rows that
    cannot be decoded, and ``UnsupportedVersionError`` for a newer schema.
    """
    try:
        raw: Any = json.loads(snapshot)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptSessionError(
            f"session {session_id}: the stored snapshot is not valid JSON ({exc}); "
            "the row was left as it is"
        ) from exc
    if not isinstance(raw, dict):
        raise CorruptSessionError(f"session {session_id}: the stored snapshot is not an object")
    raw = migrate_state_dict(raw)
    try:
        if entries or "memory_entries" not in raw:
            raw["memory_entries"] = [json.loads(e) for e in entries]
        raw["revision"] = revision
        return SessionState.model_validate(raw)
    except (ValueError, ValidationError) as exc:
        raise CorruptSessionError(
            f"session {session_id}: the stored state does not decode ({exc}); "
            "the row was left as it is"
        ) from exc


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
