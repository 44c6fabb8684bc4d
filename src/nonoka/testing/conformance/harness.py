"""What a store's author hands the suites: a harness around the store under test.

A harness owns the store and can open another instance over the same data (standing in
for a second process). The optional back doors of ``RowsHarness`` let the suite look at
and damage what is stored, as a failing disk, an older or a newer nonoka would; they are
the engine's own business (raw SQL for a database), so they are written by whoever
runs the suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from nonoka.store.base import CheckpointStore
from nonoka.store.records import EventLog, SessionIndex


class StoreHarness(Protocol):
    """The store under test (``store``) and a way to reopen its data."""

    store: CheckpointStore

    async def reopen(self) -> CheckpointStore:
        """A new store instance over the same data; the harness closes it."""
        ...


@dataclass(frozen=True)
class StoredRows:
    """Everything an engine holds for one session, as text."""

    snapshot: str
    revision: int
    entries: tuple[str, ...]
    steps: tuple[tuple[str, str, str, float], ...]
    """``(step_id, update_type, payload_json, updated_at)``, sorted by step and kind."""


class RowsHarness(StoreHarness, Protocol):
    """A ``StoreHarness`` with back doors into the stored rows."""

    def corrupt_snapshot(self, session_id: str, text: str) -> None:
        """Replace the stored snapshot text of the session."""
        ...

    def corrupt_entry(self, session_id: str, seq: int, text: str) -> None:
        """Replace the text of the session's conversation entry ``seq`` (from 0)."""
        ...

    def corrupt_step_update(self, session_id: str, step_id: str, kind: str, text: str) -> None:
        """Replace the payload of a stored step update."""
        ...

    def write_raw_snapshot(self, session_id: str, json_text: str) -> None:
        """Store ``json_text`` as the snapshot row; a new row gets revision 1, no entries."""
        ...

    def dump(self, session_id: str) -> StoredRows | None:
        """Everything stored for the session, or ``None`` when nothing is."""
        ...


class MediaHarness(RowsHarness, Protocol):
    """A ``RowsHarness`` with back doors into the stored files: the files an entry's
    parts hold are stored once, by digest (``sha256:<hex>`` of the bytes)."""

    def stored_media(self) -> dict[str, int]:
        """Every stored file: digest → size in bytes."""
        ...

    def delete_media(self, digest: str) -> None:
        """Remove a stored file (as a damaged database would), its references left."""
        ...


class RecordStore(SessionIndex, EventLog, Protocol):
    """What a record engine implements: both protocols, plus ``close``."""

    async def close(self) -> None: ...


class RecordsHarness(Protocol):
    """The session index and event log under test, and a way to reopen their data."""

    store: RecordStore

    async def reopen(self) -> RecordStore:
        """A new store instance over the same data; the harness closes it."""
        ...
