"""A turn's journal: the session index row and the event-log timeline.

Every front end (the bridge, one process per model step; ``nonoka run``, one turn
in-process) records what a turn did through this one writer, so ``nonoka sessions list``
and ``sessions show`` read one format whoever wrote it. ``Journal`` holds the turn's
events back until the session is known, keeps the index row (``cli_sessions``) in step
with the stored session, logs the runtime's events (model calls with usage, tool calls
and results, warnings) and ends the turn with a ``finish`` entry.

A turn opens with a ``request`` entry, which names the process running it (``process``,
``host:pid:turn`` in the form of a lease owner), and closes with ``finish``.
``open_turn`` reads that back: a request with no finish after it is a turn under way, or
one whose process died (``turn.status``).

It is on the bridge's per-turn path: it imports nothing a bridge turn does not already load.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nonoka import faults
from nonoka.errors import NonokaError
from nonoka.events import (
    ModelCalled,
    RunEvent,
    RunWarning,
    TextDelta,
    ToolCallFinished,
    ToolCallRequested,
)
from nonoka.redact import redact, redact_text, settled
from nonoka.runtime.session import Session
from nonoka.store.base import RevisionReader
from nonoka.store.lease_terms import lease_host
from nonoka.store.project import ProjectStores
from nonoka.store.records import AppendsTogether, CreatesIndexed, EventRecord, SessionRecord

PARTIAL_BYTES = 2048
PARTIAL_SECONDS = 0.25
"""A streamed answer is logged every this many characters or seconds, whichever comes
first: what a kill mid-answer can lose at most. The seconds run from the first
character not logged yet, on a timer: a model that stalls mid-answer has what it streamed
logged all the same."""
PARTIAL = "partial_answer"
FINAL_AFTER = 1024
"""A streamed answer is masked whole each time a piece of it is logged; its text this far
behind the end (from a line's start, past any open key block, and only where masking
the rest alone gives the same) is final, and is not masked again."""

LOGGED_TEXT = 2000
"""Tool arguments and results are cut to this many characters in the timeline."""
TURN_START = "request"
"""The entry that opens a turn; it carries ``process``, the process running it."""
TURN_END = "finish"
"""The entry that closes a turn, however it ended."""


@dataclass
class TurnUsage:
    """What one turn (request) used, summed over its model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    """``None`` until a model call reports a cost."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": self.cost_usd, "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens,
                "reasoning_tokens": self.reasoning_tokens}


class Journal:
    """Writes one turn's index row and timeline entries into a project's stores.

    ``title`` and ``metadata`` (``conversation_key``, ``purpose``, ``cwd``, ...) go into
    a session's row when the row is created; an existing row keeps its own. Events logged
    before ``start`` are buffered, so the timeline of a session begins with the request
    that created it (and a turn that fails before it has a session leaves no trace).
    """

    def __init__(self, stores: ProjectStores, *, title: str = "",
                 metadata: Mapping[str, Any] | None = None) -> None:
        self.stores = stores
        self._given = (title, dict(metadata or {}))
        """The new session's title and metadata, masked when a row first needs them
        (``title``, ``metadata``): a turn that continues a session never does."""
        self._masked: tuple[str, dict[str, Any]] | None = None
        self.session_id: str | None = None
        self.usage = TurnUsage()
        self.model_finish: str | None = None
        """Why the model stopped its turn's last answer (``length``: cut at its output
        limit); ``None`` when no model answered in this turn (a stored answer re-used)."""
        self.entries: int | None = None
        self.model: str | None = None
        """The model of this turn's last call: the index row names it (a host may switch
        models within one session)."""
        """Conversation entries stored for the session, as of the last ``refresh``."""
        self._raw: list[str] = []
        """The answer being streamed as it came, from where its masked text is final."""
        self._fresh = 0
        """Characters streamed since the last ``partial_answer`` entry."""
        self._fresh_at = 0.0
        self._final: list[str] = []
        """The logged (masked) answer's final part."""
        self._final_length = 0
        self._logged = ""
        """What is logged of the answer after its final part."""
        self._lost = False
        """A piece could not be written: the next one writes the answer whole."""
        self._answer = 0
        """Counts the answers streamed, so a late failure is put on its own answer."""
        self._timer: asyncio.TimerHandle | None = None
        self._due_pieces: set[asyncio.Task[None]] = set()
        self._writing = asyncio.Lock()
        """One writer at a time: the turn, or a piece the timer writes."""
        self.latest: Session | None = None
        """The session as the turn's run last saved it, if the run returned one: the
        index row is brought up to date from it without reading the session again."""
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._appends: tuple[object, AppendsTogether | None] | None = None
        """The event log ``_together`` judged, and its verdict."""

    @property
    def title(self) -> str:
        return self._masked_given()[0]

    @property
    def metadata(self) -> dict[str, Any]:
        return self._masked_given()[1]

    def _masked_given(self) -> tuple[str, dict[str, Any]]:
        if self._masked is None:
            title, metadata = self._given
            self._masked = (redact_text(title), redact(metadata))
        return self._masked

    def start(self, session_id: str) -> None:
        """The turn runs in ``session_id``; what was held back is written with the next entry."""
        self.session_id = session_id

    # -- the timeline -----------------------------------------------------------------

    async def log(self, kind: str, data: dict[str, Any]) -> None:
        """Append to the session's timeline; held back until the session is known.

        Secrets are masked by the store on the way in (``nonoka.redact.redact``). The
        entry that opens a turn gets the process that runs it.
        """
        if kind == TURN_START and "process" not in data:
            data = {**data, "process": this_process()}
        self._pending.append((kind, data))
        await self._flush()

    def hold(self, kind: str, data: dict[str, Any]) -> None:
        """Log an entry with the next write instead of in a transaction of its own (one
        that tells how the turn went, just before ``finish``)."""
        self._pending.append((kind, data))

    async def _flush(self) -> None:
        if self.session_id is None:
            return
        async with self._writing:  # in the order they were logged
            pending, self._pending = self._pending, []
            if len(pending) > 1 and self._together() is not None:
                await self._write_together(pending, None)
                return
            for kind, data in pending:
                faults.point("event.append.before")
                await self.stores.events.append_event(self.session_id, kind, data)
                faults.point("event.append.after")

    def _together(self) -> AppendsTogether | None:
        """The log, when it is also the index and writes several entries at once (found
        once: checking a protocol costs more than the write it picks)."""
        events: object = self.stores.events
        known = self._appends
        if known is None or known[0] is not events:
            together = (events if events is self.stores.index
                        and isinstance(events, AppendsTogether) else None)
            known = self._appends = (events, together)
        return known[1]

    async def _write_together(self, pending: list[tuple[str, dict[str, Any]]],
                              record: SessionRecord | None) -> None:
        """``pending`` and the index row (when given) in one transaction."""
        together = self._together()
        assert together is not None and self.session_id is not None
        if record is not None:
            faults.point("index.update.before")
        for _ in pending:
            faults.point("event.append.before")
        await together.append_events(self.session_id, pending, record=record)
        if record is not None:
            faults.point("index.update.after")
        for _ in pending:
            faults.point("event.append.after")

    async def on_event(self, event: RunEvent) -> None:
        """Log a runtime event and add its usage to the turn's; streamed text is logged
        in pieces as it streams (``partial_answer``), so a turn killed mid-answer keeps
        what the person already saw, short of ``PARTIAL_BYTES`` or ``PARTIAL_SECONDS``
        at most (``_stream``)."""
        if isinstance(event, TextDelta):
            await self._stream(event.text)
            return
        if isinstance(event, ModelCalled):
            self._stream_reset()  # the answer is stored whole: nothing partial is left
        if isinstance(event, ToolCallRequested):
            call = event.call
            await self.log("tool_call", {"tool_call_id": call.id, "tool_name": call.name,
                                         "arguments": call.arguments[:LOGGED_TEXT],
                                         "executed_by": event.executed_by})
        elif isinstance(event, ToolCallFinished):
            call = event.call
            await self.log("tool_result", {"tool_call_id": call.id, "tool_name": call.name,
                                           "content": event.content[:LOGGED_TEXT],
                                           "is_error": event.is_error})
        elif isinstance(event, ModelCalled):
            usage = event.usage
            self.usage.input_tokens += usage.input_tokens
            self.usage.output_tokens += usage.output_tokens
            self.usage.cache_read_tokens += usage.cache_read_tokens
            self.usage.cache_write_tokens += usage.cache_write_tokens
            self.usage.reasoning_tokens += usage.reasoning_tokens
            if usage.cost_usd is not None:
                self.usage.cost_usd = (self.usage.cost_usd or 0.0) + usage.cost_usd
            details: dict[str, Any] = {name: value for name, value in (
                ("cache_read_tokens", usage.cache_read_tokens),
                ("cache_write_tokens", usage.cache_write_tokens),
                ("reasoning_tokens", usage.reasoning_tokens)) if value}
            self.model = event.model
            if event.finish is not None:
                self.model_finish = event.finish
                details["finish"] = event.finish
            await self.log("model_call", {
                "model": event.model, "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd or 0.0,
                **details})
        elif isinstance(event, RunWarning):
            await self.log("warning", {"code": event.code, "message": event.message})

    async def _stream(self, text: str) -> None:
        """Note a piece of streamed text; log the answer so far when ``PARTIAL_BYTES``
        came since the last piece, or ``PARTIAL_SECONDS`` passed since the first of them
        (a timer: a model that stalls does not hold it back).

        A piece is the answer so far masked whole (``redact_text``, ``open_end``: what it
        ends in may be the start of a credential), as what it adds to the logged text; or,
        when masking the longer text changes what was logged (the rest of a credential
        came), as ``from``: where the logged text is replaced (``nonoka.turn.partial``).
        Nothing is held back for masking's sake, and no piece holds what the whole answer
        masks."""
        self._raw.append(text)
        self._fresh += len(text)
        loop = asyncio.get_running_loop()
        if self._timer is None:
            self._fresh_at = loop.time()
            self._timer = loop.call_later(PARTIAL_SECONDS, self._due)
        if self._fresh >= PARTIAL_BYTES or loop.time() - self._fresh_at >= PARTIAL_SECONDS:
            await self._log_piece()

    def _due(self) -> None:
        """The window closed while nothing streamed: log what did (a stall)."""
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._log_piece())
        self._due_pieces.add(task)
        task.add_done_callback(self._due_pieces.discard)

    async def _log_piece(self) -> None:
        piece, answer = self._next_piece(), self._answer
        if piece is None:
            return
        try:
            await self.log(PARTIAL, piece)
        except Exception:  # the answer matters more than its copy
            if answer == self._answer:
                self._lost = True

    def _next_piece(self) -> dict[str, Any] | None:
        """The piece that brings the logged answer up to what streamed (``None``: it is
        up to date), as it will be stored; the answer's final part moves on."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._fresh and not self._lost:
            return None
        self._fresh = 0
        raw = "".join(self._raw)
        self._raw = [raw]
        masked = redact_text(raw, open_end=True)
        logged, self._logged = self._logged, masked
        piece: dict[str, Any]
        if self._lost:
            self._lost = False
            piece = {"from": 0, "text": "".join(self._final) + masked}
        elif masked.startswith(logged):
            if len(masked) == len(logged):
                return None
            piece = {"text": masked[len(logged):]}
        else:
            same = _common_prefix(logged, masked)
            piece = {"from": self._final_length + same, "text": masked[same:]}
        if len(piece["text"]) < len(masked) and redact_text(piece["text"]) != piece["text"]:
            piece = {"from": self._final_length, "text": masked}  # the store masks it alone
        self._settle(raw, masked)
        return piece

    def _settle(self, raw: str, masked: str) -> None:
        """Make final the masked text more than ``FINAL_AFTER`` behind the end, where
        masking the rest alone gives what masking it all did: no credential spans the
        cut, and none the later text completes can (they are all shorter)."""
        if len(raw) <= 2 * FINAL_AFTER:
            return
        cut = settled(raw[:len(raw) - FINAL_AFTER])
        if not cut:
            return
        rest = redact_text(raw[cut:], open_end=True)
        if not masked.endswith(rest):
            return
        kept = len(masked) - len(rest)
        self._final.append(masked[:kept])
        self._final_length += kept
        self._logged = rest
        self._raw = [raw[cut:]]

    def _stream_reset(self) -> None:
        """Forget the answer being streamed (stored whole, or logged to its end)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._raw, self._fresh, self._final, self._final_length = [], 0, [], 0
        self._logged, self._lost = "", False
        self._answer += 1

    async def _stream_ended(self) -> None:
        """Log what streamed since the last piece when the answer will not be stored:
        the turn ends here (an error, a cancel), so nothing more of it comes, and this
        process is alive to write it (masked as an answer cut short: what it ends in may
        be half a credential)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._due_pieces:  # a piece the timer is writing goes first
            await asyncio.gather(*self._due_pieces, return_exceptions=True)
        await self._log_piece()
        self._stream_reset()

    async def error(self, code: str, message: str) -> None:
        """Log an error (after the rest of an answer it cut short); a failing log must
        not hide the error itself."""
        await self._stream_ended()
        with contextlib.suppress(Exception):
            await self.log("error", {"code": code, "message": message})

    async def finish(self, reason: str, stopped: Mapping[str, Any] | None = None, *,
                     refresh: bool = True) -> None:
        """End the turn: bring the index row up to date (unless not ``refresh``: after a
        store failure, so a failed turn changes nothing) and log ``finish`` (never raises).

        ``stopped``: the limit that ended the turn (``limit``, ``detail``), so the timeline
        names it.
        """
        await self._stream_ended()
        entry = {"finish_reason": reason, **self.usage.as_dict(), **(stopped or {})}
        if self.session_id is not None and self._together() is not None:
            # The row, what was held back and ``finish``: one commit, all or nothing.
            record = await self._refreshed() if refresh else None
            pending, self._pending = [*self._pending, (TURN_END, entry)], []
            try:
                async with self._writing:
                    await self._write_together(pending, record)
                return
            except Exception:  # then apart, as far as they go (as ``refresh`` does)
                self._pending = pending[:-1]
            if record is not None:
                await self._write_row(record)
            with contextlib.suppress(Exception):  # the timeline must not stop the finish
                await self.log(TURN_END, entry)
            return
        if refresh:
            await self.refresh()
        with contextlib.suppress(Exception):  # the timeline must not stop the finish
            await self.log(TURN_END, entry)

    # -- the index row ----------------------------------------------------------------

    async def index(self, session: Session, *, model: str | None = None,
                    created: bool = False) -> None:
        """Write the session's row from its current state.

        A row that exists keeps its title, model (unless ``model`` is given), metadata
        and creation time; ``created=True`` skips the look-up for a brand-new session.
        """
        index = self.stores.index
        existing = None if created else await index.get_session(session.session_id)
        faults.point("index.update.before")
        await index.upsert_session(self._record(session, existing, model))
        faults.point("index.update.after")

    async def _refreshed(self) -> SessionRecord | None:
        """The session's row brought up to date with the stored session, not written yet;
        ``None`` (the failure reported) when it cannot be read."""
        assert self.session_id is not None
        try:
            session = await self._stored_session(self.session_id)
            if session is None:
                return None
            self.entries = len(session.memory.entries)
            existing = await self.stores.index.get_session(session.session_id)
            return self._record(session, existing, None)
        except Exception as exc:  # the run's outcome matters more than the index row
            _report(exc)
            return None

    async def create(self, session: Session, *, model: str | None = None) -> None:
        """Store a new session's first snapshot and its index row, in one transaction
        where the engine can: a process killed between the two would leave a snapshot
        no listing or recovery ever finds."""
        index = self.stores.index
        if not isinstance(index, CreatesIndexed):
            raise TypeError("this index cannot create sessions")  # callers check first
        faults.point("checkpoint.save.before")
        faults.point("index.update.before")
        session.revision = await index.create_session(session.to_state(),
                                                      self._record(session, None, model))
        faults.point("checkpoint.save.after")
        faults.point("index.update.after")

    def creates_indexed(self) -> bool:
        """Whether ``create`` can write a new session and its row at once."""
        return isinstance(self.stores.index, CreatesIndexed)

    def _record(self, session: Session, existing: SessionRecord | None,
                model: str | None) -> SessionRecord:
        usage = session.usage
        return SessionRecord(
            session_id=session.session_id,
            title=existing.title if existing is not None else self.title,
            model=model or self.model or (existing.model if existing is not None else ""),
            created_at=existing.created_at if existing is not None else time.time(),
            last_active=time.time(), status=str(session.status),
            turn_count=session.turn_count, message_count=len(session.memory),
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd,
            metadata=dict(existing.metadata) if existing is not None else dict(self.metadata))

    async def refresh(self) -> None:
        """Bring the row up to date with the stored session (never raises)."""
        if self.session_id is None:
            return
        record = await self._refreshed()
        if record is not None:
            await self._write_row(record)

    async def _write_row(self, record: SessionRecord) -> None:
        """Write the index row; a failure is reported, never raised."""
        try:
            faults.point("index.update.before")
            await self.stores.index.upsert_session(record)
            faults.point("index.update.after")
        except Exception as exc:  # the run's outcome matters more than the index row
            _report(exc)


    async def _stored_session(self, session_id: str) -> Session | None:
        """The session as stored: the run's own copy when nobody saved it since."""
        store, latest = self.stores.checkpoints, self.latest
        if (latest is not None and latest.session_id == session_id
                and isinstance(store, RevisionReader)
                and await store.stored_revision(session_id) == latest.revision):
            return latest
        state = await store.load_session(session_id)
        return None if state is None else Session.from_state(state)


def _report(exc: Exception) -> None:
    """A failed index write, on stderr: one line for nonoka's own errors, else the trace."""
    if isinstance(exc, NonokaError):
        print(f"nonoka: the session index was not updated: {exc}", file=sys.stderr)
    else:
        traceback.print_exception(exc, file=sys.stderr)


def _common_prefix(a: str, b: str) -> int:
    """The length of what ``a`` and ``b`` begin with alike (compared in C, not a
    character at a time)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if b.startswith(a[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low


def this_process() -> str:
    """This process as a turn's opening entry names it: ``host:pid:turn``, the form of a
    lease owner (``store.leases.owner_process`` reads both)."""
    return f"{lease_host()}:{os.getpid()}:turn"


def open_turn(events: list[EventRecord]) -> EventRecord | None:
    """The ``request`` entry of a turn that has not logged its ``finish``, if the newest
    of ``events`` (oldest first) end inside one; ``None`` when the last turn finished or
    no turn boundary is among them."""
    for event in reversed(events):
        if event.kind == TURN_END:
            return None
        if event.kind == TURN_START:
            return event
    return None


def title_from(text: str) -> str:
    """A one-line title from the first user message (80 characters at most), redacted
    before it is cut: a credential the cut would halve is still recognised whole."""
    line = " ".join(redact_text(text).split())
    return line if len(line) <= 80 else line[:77] + "..."
