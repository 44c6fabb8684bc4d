"""The memory engine's "database": rows kept as JSON text, shared like a file.

Several store instances can share one ``MemoryDatabase`` (checkpoints, step updates,
leases) or ``MemoryRecordDatabase`` (session index, event logs) to stand in for
processes reopening the same file. Nothing here outlives the process, so there is
nothing to migrate.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from nonoka.store.media import Media


@dataclass
class CheckpointRow:
    state_json: str
    revision: int
    memory_generation: int
    entries: list[str]
    created_at: float
    updated_at: float
    media: dict[int, str] = field(default_factory=dict)
    """The entries that refer to stored files: position → the digests, as the SQL
    engines' ``media`` column holds them (``nonoka.store.media``)."""


@dataclass
class StepRow:
    payload_json: str
    updated_at: float
    order: int
    """Insertion order of the key, the stand-in for SQLite's rowid."""


@dataclass
class MemoryDatabase:
    """The rows of every session; share one between stores to mimic a reopened file."""

    checkpoints: dict[str, CheckpointRow] = field(default_factory=dict)
    step_updates: dict[tuple[str, str, str], StepRow] = field(default_factory=dict)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)
    """``session_id`` → ``(owner, expiry)`` on the ``time.monotonic`` clock."""
    media: dict[str, Media] = field(default_factory=dict)
    """The files entries refer to, by digest, each once."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_order: int = 0


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    at: float
    kind: str
    data_json: str


@dataclass
class MemoryRecordDatabase:
    """Index rows and event logs; share one between stores to mimic a reopened file."""

    sessions: dict[str, str] = field(default_factory=dict)
    """``session_id`` → the ``SessionRecord`` as JSON."""
    events: dict[str, list[StoredEvent]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
