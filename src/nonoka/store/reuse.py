"""What a store keeps between its reads and saves, so a growing session is not decoded
or encoded whole every time.

A turn saves its session after every model answer and tool result, and a long-lived
bridge reads the same session every turn, one exchange longer. Three things repeat:

- ``SnapshotTexts``: the JSON of the parts of a snapshot that rarely change between
  saves (each plan's, each trace event's, a session's joined trace);
- ``DecodedSnapshots``: the decoded snapshot row (without entries) a session was last
  read from, reused while the row and revision are the same;
- ``DecodedEntries``: a session's decoded conversation, with the digest chain of its
  last row (``nonoka.store.sqlite.digests``), so a later read decodes only the rows
  after it.

A store owns a ``StoreReuse`` (a new one unless it is given one): a process that opens
a store per request, as the bridge does, creates one at its entry point and hands it to
every store it opens. Nothing here is shared through module state; a store made without
one starts empty and computes everything, with the same results.

Internal: this module's layout may change.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from operator import is_
from typing import TYPE_CHECKING, NamedTuple

from nonoka.state.frozen import replace

if TYPE_CHECKING:
    from nonoka.state.entries import MemoryEntry
    from nonoka.state.plan import Plan
    from nonoka.state.session_state import SessionState, TraceEvent

SESSIONS_KEPT = 256
"""Sessions whose plan and trace texts are kept (a process saves few at a time)."""
EVENTS_KEPT = 4096
NEW_EVENTS_SCANNED = 64
"""How far back from the end the last written event is looked for (events added since)."""
SNAPSHOTS_KEPT = 8
CONVERSATIONS_KEPT = 4
"""Decoded conversations kept: a bridge serves one session at a time."""


class SnapshotTexts:
    """The JSON of each plan and trace event a snapshot holds, and each session's joined
    trace text, so a save writes only what is new."""

    __slots__ = ("_events", "_plans", "_runs")

    def __init__(self) -> None:
        self._plans: dict[int, tuple[Plan, str]] = {}
        """Each plan's JSON by the plan's identity (the plan is kept, so its id is not
        reused while it is here)."""
        self._events: dict[tuple[str, str, float], str] = {}
        """Each trace event's JSON by its fields (a loaded session's events are new
        objects with the same values, so they are found by value)."""
        self._runs: dict[str, tuple[list[TraceEvent], list[str], str]] = {}
        """Per session: the trace last written, each event's JSON, and the joined text."""

    def plan_json(self, plan: Plan | None) -> str:
        """The plan's JSON, made once per plan: a plan is frozen, and a session keeps the
        same object between saves (a new plan is a new object)."""
        if plan is None:
            return "null"
        known = self._plans.get(id(plan))
        if known is not None and known[0] is plan:
            return known[1]
        if len(self._plans) >= SESSIONS_KEPT:
            self._plans.clear()
        text = plan.model_dump_json()
        self._plans[id(plan)] = (plan, text)
        return text

    def trace_text(self, session_id: str, trace: list[TraceEvent]) -> str:
        """The trace's events as JSON, comma-joined; reuses the text of the events that
        were in this session's trace last time (the trace only grows at its end and
        drops from its start), found by identity, so an unchanged trace costs one list
        comparison."""
        run = self._runs.get(session_id)
        if run is not None:
            events, texts, joined = run
            if _same(trace, events):
                return joined
            kept = _kept_texts(events, texts, trace)
        else:
            kept = []
        texts = kept + [self._event_json(event) for event in trace[len(kept):]]
        joined = ",".join(texts)
        if len(self._runs) >= SESSIONS_KEPT:
            self._runs.clear()
        self._runs[session_id] = (list(trace), texts, joined)
        return joined

    def _event_json(self, event: TraceEvent) -> str:
        key = (event.kind, event.detail, event.at)
        text = self._events.get(key)
        if text is None:
            if len(self._events) >= EVENTS_KEPT:
                self._events.clear()
            text = self._events[key] = event.model_dump_json()
        return text


def _same(trace: list[TraceEvent], events: list[TraceEvent]) -> bool:
    """The same event objects, in order. By identity only: comparing a decoded trace's
    events by value (pydantic's ``__eq__``, ~2 µs each) cost more than encoding the
    ones not found again, whose texts ``_event_json`` finds by value anyway."""
    return len(trace) == len(events) and all(map(is_, trace, events))


def _kept_texts(events: list[TraceEvent], texts: list[str],
                trace: list[TraceEvent]) -> list[str]:
    """The texts of ``trace``'s first events when they are the end of ``events`` (the
    same objects, in order); ``[]`` when they are not."""
    if not events:
        return []
    last = events[-1]
    stop = max(-1, len(trace) - 1 - NEW_EVENTS_SCANNED)
    for at in range(len(trace) - 1, stop, -1):
        if trace[at] is last:
            dropped = len(events) - (at + 1)
            if dropped >= 0 and _same(trace[:at + 1], events[dropped:]):
                return texts[dropped:]
            return []
    return []


class DecodedSnapshots:
    """The snapshot row each session was last decoded from, and its decoded state
    (without entries): a turn reads its session more than once, and a long-lived bridge
    every turn, most often the same row. Validating the snapshot's ~200 trace events
    each time cost ~0.5 ms a read."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[str, tuple[int, str | bytes, SessionState]] = {}

    def get(self, session_id: str, revision: int, snapshot: str | bytes
            ) -> SessionState | None:
        known = self._kept.get(session_id)
        if known is not None and known[0] == revision and known[1] == snapshot:
            return known[2]
        return None

    def remember(self, session_id: str, revision: int, snapshot: str | bytes,
                 state: SessionState) -> None:
        """Keep ``state`` for the next read of the same row. Only a state whose every
        value is frozen: extension state and step results may hold lists and dicts a
        caller could change in place, and the next reader must not see that."""
        if state.extension_state or state.completed_steps or state.failed_steps:
            return
        if len(self._kept) >= SNAPSHOTS_KEPT and session_id not in self._kept:
            self._kept.clear()
        self._kept[session_id] = (revision, snapshot, state)

    def remember_saved(self, session_id: str, revision: int, snapshot: str | bytes,
                       state: SessionState) -> None:
        """Keep the state a committed save wrote as the row ``snapshot`` at ``revision``:
        what decoding that row gives (the entries apart), without decoding it. The trace
        is copied, so the caller's list is not the one kept; its events are the saved
        objects, so the next save finds their texts by identity."""
        self.remember(session_id, revision, snapshot, replace(
            state, revision=revision, memory_entries=[], trace=list(state.trace)))


class Decoded(NamedTuple):
    """Entries decoded from a session's rows: they are the first ``len(entries)`` rows
    while the row ``len(entries) - 1`` still carries ``chain`` (its stored text)."""

    created_at: float
    entries: list[MemoryEntry]
    chain: str


class DecodedEntries:
    """Per database file and session, the entries decoded last time and the digest
    chain of the last of them. Stored rows are only appended, or rewritten whole; a
    read reuses the kept entries only when the row at the same position still carries
    the same chain and the session's creation time is the same (a session deleted and
    made again under its id starts over). Thread-safe: a store may be shared."""

    __slots__ = ("_kept", "_lock")

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str], Decoded] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, session_id: str) -> Decoded | None:
        with self._lock:
            found = self._kept.get((path, session_id))
            if found is not None:
                self._kept.move_to_end((path, session_id))
            return found

    def put(self, path: str, session_id: str, decoded: Decoded) -> None:
        with self._lock:
            self._kept[(path, session_id)] = decoded
            self._kept.move_to_end((path, session_id))
            while len(self._kept) > CONVERSATIONS_KEPT:
                self._kept.popitem(last=False)

    def extend(self, entries: list[MemoryEntry], start: int, new: list[MemoryEntry]
               ) -> list[MemoryEntry]:
        """``entries[:start] + new``, appending in place when ``entries`` still ends at
        ``start`` (snapshots taken of it see only their own first entries)."""
        with self._lock:
            if len(entries) == start:
                entries.extend(new)
                return entries
        return [*entries[:start], *new]

    def clear(self) -> None:
        """Forget every decoded conversation (the next read of each decodes it whole)."""
        with self._lock:
            self._kept.clear()


class StoreReuse:
    """Everything a store keeps between calls; one per store unless a process shares
    one between the stores it opens (``nonoka bridge`` does, across requests)."""

    __slots__ = ("entries", "snapshots", "texts")

    def __init__(self) -> None:
        self.texts = SnapshotTexts()
        self.snapshots = DecodedSnapshots()
        self.entries = DecodedEntries()
