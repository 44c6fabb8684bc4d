"""The rows session operations move around, and the capability each engine implements.

A session is exported and imported as its stored rows, as text: the snapshot, every
conversation entry, the step updates, the event log and the index row, and the files its
entries refer to (stored once, by digest: ``nonoka.store.media``). Moving text, not
decoded models, is what makes an export lossless and byte-for-byte comparable between
engines.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from nonoka.store.media import Media


@dataclass(frozen=True)
class SessionHead:
    """A session's checkpoint row (without the entries)."""

    session_id: str
    snapshot: str
    revision: int
    entry_count: int
    memory_generation: int
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class StepRow:
    step_id: str
    update_type: str
    payload: str
    updated_at: float


@dataclass(frozen=True)
class EventRow:
    seq: int
    at: float
    kind: str
    data: str
    """The event's data as stored (JSON text)."""


@dataclass(frozen=True)
class SessionSummary:
    """What pruning decides on: one row per stored session."""

    session_id: str
    status: str
    last_active: float
    """The index row's (what ``sessions list`` shows), else the checkpoint's last save."""
    model: str = ""
    purpose: str = "chat"
    forked_from: str | None = None


@dataclass(frozen=True)
class SearchQuery:
    """A full-text search: every word of ``text`` must occur (case-insensitive)."""

    text: str
    status: tuple[str, ...] = ()
    since: float | None = None
    """Only sessions active at or after this time."""
    model: str | None = None
    limit: int = 20
    everything: bool = False
    """Title-generation sessions too."""
    session: str | None = None
    """Only this session's conversation (a branch's shared entries included)."""


@dataclass(frozen=True)
class RawHit:
    """A matching document as an engine returns it, before the snippet is made."""

    session_id: str
    seq: int
    """The entry's position, or -1 for the session's title."""
    text: str
    """The entry's JSON (or the title) the snippet is cut from."""
    title: str
    status: str
    last_active: float | None
    shared_with: tuple[str, ...] = ()
    """Other sessions holding the same stored entry at the same position (branches)."""


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    position: int | None
    """The entry's position in the conversation; ``None`` when the title matched."""
    role: str
    snippet: str
    """Around the first match, matches wrapped in ``[`` and ``]``; credentials masked."""
    title: str
    status: str
    last_active: float | None
    shared_with: tuple[str, ...] = ()
    """Branches whose conversations hold this same stored entry (``ops/sharing.py``)."""
    marks: tuple[tuple[int, int], ...] = ()
    """Where the matches are in ``snippet`` (inside their brackets), for highlighting."""

    def as_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "position": self.position, "role": self.role,
                "snippet": self.snippet, "title": self.title, "status": self.status,
                "last_active": self.last_active, "shared_with": list(self.shared_with)}


@dataclass(frozen=True)
class Finding:
    """One problem ``db check`` found; ``error`` ones make it fail."""

    level: str
    """``error`` or ``warning``."""
    kind: str
    message: str
    session_id: str | None = None
    entries: tuple[int, ...] = ()
    """The entries (their ``seq``) it names: for ``digest_chain``, those whose text was
    changed after they were stored, which a repair takes as they are now."""


def entries_named(seqs: tuple[int, ...]) -> str:
    """``entry 3``, ``entries 3 and 7``, ``entries 3, 7 and 9``."""
    if len(seqs) == 1:
        return f"entry {seqs[0]}"
    return f"entries {', '.join(map(str, seqs[:-1]))} and {seqs[-1]}"


@dataclass
class Stats:
    engine: str
    sessions: int
    entries: int
    events: int
    bytes_by_table: dict[str, int] = field(default_factory=dict)
    largest: list[tuple[str, int, int]] = field(default_factory=list)
    """``(session_id, entries, bytes)``, the largest first (entry text; files apart)."""
    media: int = 0
    """Files stored (each once, however many entries refer to it)."""
    media_bytes: int = 0
    """Their bytes."""

    def as_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "sessions": self.sessions, "entries": self.entries,
                "events": self.events, "media": self.media, "media_bytes": self.media_bytes,
                "bytes_by_table": self.bytes_by_table,
                "largest": [{"session_id": s, "entries": n, "bytes": b}
                            for s, n, b in self.largest]}


class SessionReader(Protocol):
    """One consistent read of a session's rows (the engine's own transaction)."""

    async def head(self, session_id: str) -> SessionHead | None: ...

    def entries(self, session_id: str) -> AsyncIterator[list[tuple[int, str]]]:
        """``(seq, entry_json)`` in ``seq`` order, in batches (a bounded number of rows
        in memory at a time, whatever the session's length).

        Resolves the entries of the session in conversation order; an engine that lets a
        session share rows with another (lineage) resolves them here.
        """
        ...

    async def steps(self, session_id: str) -> list[StepRow]:
        """In the order they were written (time, then insertion)."""
        ...

    def events(self, session_id: str) -> AsyncIterator[EventRow]: ...

    async def index(self, session_id: str) -> dict[str, Any] | None:
        """The index row's columns by name (``metadata`` decoded, or as its stored JSON
        text), or ``None``; ``ops.stored.index_record`` reads it."""
        ...

    async def files(self, session_id: str) -> list[str]:
        """The digests of the files the session's entries refer to (a branch's shared
        entries included), each once, in the order the entries first refer to them."""
        ...

    async def file(self, digest: str) -> Media | None:
        """A stored file, or ``None`` when nothing is stored under ``digest``."""
        ...


class Searchable(Protocol):
    async def search(self, query: SearchQuery, words: list[str]) -> list[RawHit]: ...


class Exportable(Protocol):
    def reader(self) -> AbstractAsyncContextManager[SessionReader]: ...

    async def session_ids(self) -> list[str]:
        """Every session with a checkpoint, sorted."""
        ...


class Importable(Protocol):
    async def write_session(self, head: SessionHead, entries: Iterable[str],
                            steps: list[StepRow], events: Iterable[EventRow],
                            index: dict[str, Any] | None,
                            media: Sequence[Media] = ()) -> bool:
        """Write one whole session in one transaction, with the files its entries refer
        to (``media``; those already stored are kept as they are); ``False`` (and nothing
        written) when a checkpoint with its id exists."""
        ...


class Prunable(Protocol):
    async def summaries(self) -> list[SessionSummary]:
        """Every session (checkpoint or index row), with its status and last activity."""
        ...

    async def session_bytes(self, session_id: str) -> int:
        """The bytes of text stored for the session (what deleting it frees)."""
        ...


class Maintainable(Protocol):
    async def check(self) -> list[Finding]:
        """What the engine itself can find wrong with its rows."""
        ...

    async def repair(self) -> list[Finding]:
        """Rebuild what is derived from other rows (SQLite: the entries' digest chain);
        the findings that were repaired."""
        ...

    async def vacuum(self) -> tuple[int, int]:
        """Reclaim space (files no entry refers to are deleted first); ``(bytes before,
        bytes after)``."""
        ...

    async def stats(self, largest: int = 10) -> Stats: ...


class OpsBackend(Searchable, Exportable, Importable, Prunable, Maintainable, Protocol):
    """Everything the session operations need from one engine."""

    engine: str
