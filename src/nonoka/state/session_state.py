"""``SessionState``: the immutable snapshot that goes in and out of storage.

Everything a new process needs to carry a session on lives here. The snapshot carries a
``schema_version``; stored snapshots of older versions are migrated on load, and a newer
version is refused without touching the stored data.

Versions:
    1  the original layout: ISO timestamps, optional ledger, ``trace`` as a dict,
       step results as ``{"data": ...}``.
    2  epoch-second timestamps, ledger always present, ``trace`` a bounded list,
       ``memory_generation`` (lets stores append instead of rewriting), ``revision``.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from nonoka.errors import CorruptSessionError, UnsupportedVersionError
from nonoka.state.entries import MemoryEntry
from nonoka.state.ledger import SessionRuntimeState
from nonoka.state.plan import Plan

SCHEMA_VERSION = 2
TRACE_LIMIT = 200


class SessionStatus(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def terminal(self) -> bool:
        return self in (StepStatus.COMPLETED, StepStatus.FAILED)


class StepResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    output: Any = None
    completed_at: float = Field(default_factory=time.time)


class StepFailure(BaseModel):
    model_config = ConfigDict(frozen=True)

    error_type: str
    message: str
    traceback: str | None = None
    attempts: int = 1
    failed_at: float = Field(default_factory=time.time)


class CompletionContract(BaseModel):
    """What must hold before a run may count as done.

    When the model answers without meeting it, the loop tells the model what is missing
    and carries on, at most ``max_repairs`` times.
    """

    model_config = ConfigDict(frozen=True)

    description: str = ""
    required_tools: list[str] = Field(default_factory=list)
    required_steps: list[str] = Field(default_factory=list)
    output_must_contain: list[str] = Field(default_factory=list)
    max_repairs: int = 2


class TraceEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    detail: str = ""
    at: float = Field(default_factory=time.time)


class SessionState(BaseModel):
    """Immutable snapshot of a ``Session``; pure data for storage."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    session_id: str
    status: SessionStatus = SessionStatus.CREATED
    revision: int = 0
    """The stored revision this snapshot builds on; stores use it to detect races."""

    current_plan: Plan | None = None
    step_statuses: dict[str, StepStatus] = Field(default_factory=dict)
    completed_steps: dict[str, StepResult] = Field(default_factory=dict)
    failed_steps: dict[str, StepFailure] = Field(default_factory=dict)

    memory_entries: Sequence[MemoryEntry] = Field(default_factory=list)
    """A list once decoded; ``Session.to_state`` shares its memory's entries as an
    ``EntrySnapshot`` instead of copying them."""
    memory_generation: int = 0
    """Bumped whenever entries are rewritten rather than appended (compaction)."""

    runtime_state: SessionRuntimeState = Field(default_factory=SessionRuntimeState)

    completion_contract: CompletionContract | None = None
    extension_state: dict[str, dict[str, Any]] = Field(default_factory=dict)

    start_time: float | None = None
    end_time: float | None = None
    turn_count: int = 0
    step_count: int = 0
    trace: list[TraceEvent] = Field(default_factory=list)

    forked_from: str | None = None
    """The session this one branched from (``Runner.fork_session``), if any."""
    fork_point: int | None = None
    """How many of the parent's entries this session shares (its first ones)."""

    @field_serializer("memory_entries")
    def _entries_as_list(self, entries: Sequence[MemoryEntry]) -> list[MemoryEntry]:
        return list(entries)


# -- migrations ---------------------------------------------------------------------------

def _epoch(value: Any) -> Any:
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return value


def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    out = dict(raw)
    for key in ("start_time", "end_time"):
        out[key] = _epoch(out.get(key))
    ledger = dict(out.get("runtime_state") or {})
    if "started_at" not in ledger and out.get("start_time") is not None:
        ledger["started_at"] = out["start_time"]  # not "now": loads must agree
    for key in ("started_at", "deadline_at", "cancelled_at"):
        if key in ledger:
            ledger[key] = _epoch(ledger[key])
    if isinstance(ledger.get("termination"), dict):
        term = dict(ledger["termination"])
        term["at"] = _epoch(term.get("at", time.time()))
        ledger["termination"] = term
    out["runtime_state"] = ledger
    trace = out.get("trace")
    if isinstance(trace, dict):
        out["trace"] = [{"kind": str(k), "detail": str(v)} for k, v in trace.items()]
    elif trace is None:
        out["trace"] = []
    out["completed_steps"] = {
        k: {"output": v.get("data", v.get("output"))} if isinstance(v, dict) else {"output": v}
        for k, v in (out.get("completed_steps") or {}).items()
    }
    out.setdefault("memory_generation", 0)
    out["schema_version"] = 2
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}
"""``MIGRATIONS[n]`` turns a version-n snapshot into version n + 1."""


def migrate_state_dict(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring a decoded snapshot up to ``SCHEMA_VERSION``; refuse newer ones."""
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise CorruptSessionError(f"snapshot has an invalid schema_version: {version!r}")
    if version > SCHEMA_VERSION:
        raise UnsupportedVersionError(
            f"session {raw.get('session_id', '?')} was written with state schema version "
            f"{version}, but this nonoka understands up to {SCHEMA_VERSION}. "
            "Upgrade nonoka to load it; the stored data was not changed."
        )
    while version < SCHEMA_VERSION:
        raw = MIGRATIONS[version](raw)
        version = raw["schema_version"]
    return raw


# -- step updates -------------------------------------------------------------------------

StepUpdateType = Literal["status", "result", "error"]


class StepUpdate(BaseModel):
    """One row of ``step_updates``: the latest update of one kind for one step."""

    model_config = ConfigDict(frozen=True)

    step_id: str
    update_type: StepUpdateType
    payload: dict[str, Any]
    updated_at: float


def merge_step_updates(state: SessionState, updates: Iterable[StepUpdate]) -> SessionState:
    """Apply step updates in time order with the three protective rules.

    1. A terminal status (completed/failed) is never overwritten by a non-terminal one.
    2. A result clears an earlier failure record.
    3. An error clears an earlier success record.
    """
    statuses = dict(state.step_statuses)
    completed = dict(state.completed_steps)
    failed = dict(state.failed_steps)
    for update in sorted(updates, key=lambda u: u.updated_at):
        step_id = update.step_id
        if update.update_type == "status":
            new = StepStatus(update.payload["status"])
            current = statuses.get(step_id)
            if current is not None and current.terminal and not new.terminal:
                continue
            statuses[step_id] = new
        elif update.update_type == "result":
            statuses[step_id] = StepStatus.COMPLETED
            completed[step_id] = StepResult.model_validate(update.payload)
            failed.pop(step_id, None)
        else:
            statuses[step_id] = StepStatus.FAILED
            failed[step_id] = StepFailure.model_validate(update.payload)
            completed.pop(step_id, None)
    return state.model_copy(
        update={"step_statuses": statuses, "completed_steps": completed, "failed_steps": failed}
    )
