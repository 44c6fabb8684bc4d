"""One turn of a session, done the same way for the bridge and for ``nonoka run``.

A front end opens the service on a project (its stores) and says which session the turn
runs in and what the turn brings to it (an ``Opening``, or a coroutine that decides one;
what it brings is a ``TurnInput``, or a function that works it out from the session as
stored once the lease is held). The service creates or loads the session, holds its lease, runs the
``Runner``, records the index row, the timeline and the usage, and hands every event to
the front end's sink: first ``SessionOpened``, then the runtime's events. It never
raises: the ``TurnOutcome`` says how the turn ended, with the ``Failure`` a host is told.
The front end reports the outcome, then calls ``finish`` and ``close``.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nonoka.errors import Failure, ModelError, StoreError, failure_of
from nonoka.events import RunEvent, RunWarning
from nonoka.protocol.values import WarningCode
from nonoka.runtime.agent import Agent
from nonoka.runtime.paradigms.env import RunResult
from nonoka.runtime.runner import Runner
from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.ledger import RuntimeLimits
from nonoka.state.messages import Message, ToolResult
from nonoka.state.prefix_memo import ConversationPasses
from nonoka.store.base import RevisionReader
from nonoka.store.kept import KeptStores
from nonoka.store.next_calls import NextCallStore
from nonoka.store.project import ProjectStores
from nonoka.store.records import EventRecord, HostSessions, SessionIndex
from nonoka.store.reuse import StoreReuse
from nonoka.turn.journal import LOGGED_TEXT, Journal
from nonoka.turn.outcome import FINISH_CANCELLED, FINISH_ERROR, TurnOutcome, finish_reason_of
from nonoka.turn.project import open_stores, project_database


@dataclass(frozen=True)
class SessionOpened:
    """The turn's session is known; sent before any runtime event of the turn."""

    session_id: str
    new: bool
    """Whether the turn created it."""
    recovery_reason: str | None = None
    """Why the front end continued a session other than the one asked for, if it did."""
    forked_from: str | None = None
    """The session a branch made for this turn shares its first ``fork_point`` entries with."""
    fork_point: int | None = None


TurnEvent = SessionOpened | RunEvent
TurnSink = Callable[[TurnEvent], Awaitable[None] | None]


@dataclass(frozen=True)
class TurnInput:
    """What a turn brings to its session.

    ``prompt``: a new user message; ``tool_results``: results of the host tool calls the
    session paused on (with ``prompt``, a user message that came along); ``resume``:
    nothing new — carry the session on (``reopen`` retries a failed or cancelled turn).
    Before any of these, ``replace`` (when set) becomes the session's working memory —
    the host edited the conversation; ``edit`` is what the timeline records of it — and
    ``seed`` is appended, one entry per message (messages that came before the prompt).
    """

    kind: Literal["prompt", "tool_results", "resume"] = "resume"
    prompt: str | None = None
    results: Sequence[ToolResult] = ()
    reopen: bool = False
    seed: Sequence[Message] = ()
    replace: Sequence[MemoryEntry] | None = None
    edit: Mapping[str, Any] | None = None
    prompt_message: Message | None = None
    """The prompt as the host sent it, when it carries more than text (files): stored as
    it is, in place of ``prompt``."""


Planner = Callable[[Session], TurnInput]
"""Works out a turn's input from its session as stored once the lease is held."""


@dataclass(frozen=True)
class Opening:
    """Which session a turn runs in, as its front end chose it."""

    session: Session | str | None = None
    """The session to continue (loaded, or only its id), or ``None`` for a new one."""
    plan: TurnInput | Planner = TurnInput()
    """What the turn brings: known now, or worked out from the session under the lease."""
    seed: Sequence[Message] = ()
    """The history a new session starts with."""
    recovery_reason: str | None = None
    forked_from: str | None = None
    """Set when ``session`` is a branch made for this turn: the session it came from."""
    fork_point: int | None = None
    warnings: Sequence[RunWarning] = field(default_factory=tuple)
    """Said to the front end and logged once the session is known."""
    revision_seen: int | None = None
    """The most entries the front end saw stored for the session; fewer now is a warning."""


Chooser = Callable[[], Awaitable[Opening]]


class TurnService:
    """Does turns against one project's stores, recording them in one journal."""

    def __init__(self, stores: ProjectStores, *, title: str = "",
                 metadata: Mapping[str, Any] | None = None,
                 passes: ConversationPasses | None = None) -> None:
        """``passes``: where the passes over a conversation stopped last, when the
        process keeps them between turns (``nonoka.state.prefix_memo``)."""
        self.stores = stores
        self._kept: tuple[KeptStores, str] | None = None
        """Where ``close`` gives the stores back, and under which key (``open_kept``)."""
        self.runner = Runner(stores.checkpoints, passes=passes)
        self.journal = Journal(stores, title=title, metadata=metadata)
        """The index row and the timeline; ``title`` and ``metadata`` go into a new row."""

    @classmethod
    def open(cls, project: Path, *, title: str = "",
             metadata: Mapping[str, Any] | None = None, reuse: StoreReuse | None = None,
             passes: ConversationPasses | None = None) -> TurnService:
        """Open the project's stores (``turn.project.open_stores`` says what may fail).
        ``reuse`` and ``passes``: what the process keeps between turns, if it does."""
        return cls(open_stores(project, reuse), title=title, metadata=metadata,
                   passes=passes)

    @classmethod
    async def open_kept(cls, project: Path, kept: KeptStores, *, title: str = "",
                        metadata: Mapping[str, Any] | None = None,
                        reuse: StoreReuse | None = None,
                        passes: ConversationPasses | None = None) -> TurnService:
        """``open``, taking the project's stores from ``kept`` while they are still
        current (``nonoka.store.kept``); ``close`` gives them back instead of closing."""
        key = project_database(project)
        stores = await kept.take(key, lambda: open_stores(project, reuse))
        service = cls(stores, title=title, metadata=metadata, passes=passes)
        service._kept = (kept, key)
        return service

    # -- the seam: what a front end reads of the project to choose a session -------------

    async def load(self, session_id: str) -> Session | None:
        """A session as stored (``None`` when unknown), for a front end to judge; the
        turn that then runs in it does not read it again unless it changed meanwhile."""
        return await self.runner.load_session(session_id)

    @property
    def index(self) -> SessionIndex:
        """The project's session index: what a front end searches to choose a session,
        and where it records what it learns of one (a compaction's summary)."""
        return self.stores.index

    @property
    def next_calls(self) -> NextCallStore | None:
        """Where the project keeps next-call templates, if its engine does."""
        store = self.stores.checkpoints
        return store if isinstance(store, NextCallStore) else None

    async def fork(self, parent_id: str, at: int | None, *, reason: str,
                   host_session_id: str | None = None) -> str:
        """A branch of ``parent_id`` at entry ``at``; its id (``nonoka.turn.lineage``).
        ``host_session_id``: the host conversation the branch belongs to."""
        from nonoka.turn.lineage import fork_session

        extra = {"host_session_id": host_session_id} if host_session_id else None
        return await fork_session(self.stores, parent_id, at, reason=reason, metadata=extra)

    async def host_sessions(self, host_session_id: str) -> list[str]:
        """The sessions a host's conversation id maps to, most recently active first."""
        index = self.stores.index
        if not isinstance(index, HostSessions):
            return []
        return [r.session_id for r in await index.find_by_host_session(host_session_id)]

    async def retitle(self, session_id: str, title: str) -> None:
        """Give a session's index row the title it should be listed by."""
        from nonoka.redact import redact_text

        record = await self.stores.index.get_session(session_id)
        if record is not None:
            await self.stores.index.upsert_session(
                record.model_copy(update={"title": redact_text(title)}))

    async def tag_host_session(self, session_id: str, host_session_id: str) -> None:
        """Record that ``session_id`` holds the host's conversation ``host_session_id``
        (a session made before the host said its id, adopted now)."""
        index = self.stores.index
        record = await index.get_session(session_id)
        if record is None or record.host_session_id == host_session_id:
            return
        await index.upsert_session(record.model_copy(update={"metadata": {
            **record.metadata, "host_session_id": host_session_id}}))

    async def note(self, session_id: str, kind: str, data: dict[str, Any]) -> None:
        """Add an entry to another session's timeline than the turn's own."""
        await self.stores.events.append_event(session_id, kind, data)

    async def recent_events(self, session_id: str, limit: int) -> list[EventRecord]:
        """The session's last ``limit`` timeline entries, oldest first."""
        return await self.stores.events.list_events(session_id, limit=limit)

    async def release_lease(self, session_id: str, owner: str) -> None:
        """Give back a lease this process took before the turn (early dispatch's)."""
        await self.stores.leases.release_lease(session_id, owner)

    async def current(self, session_id: str, loaded: Session | str | None) -> Session:
        """``session_id`` as stored now, under the turn's lease: ``loaded`` itself when
        the front end loaded it and nobody saved it since (its stored revision is the
        same, and no plan's steps write apart from the snapshot), else read once."""
        store = self.stores.checkpoints
        if (isinstance(loaded, Session) and loaded.current_plan is None
                and isinstance(store, RevisionReader)
                and await store.stored_revision(session_id) == loaded.revision):
            return loaded
        found = await self.runner.load_session(session_id)
        if found is None:
            raise StoreError(f"session {session_id!r} is no longer stored")
        return found

    async def run(self, agent: Agent, opening: Opening | Chooser, *,
                  limits: RuntimeLimits | None = None,
                  request: Mapping[str, Any] | None = None,
                  lease_owner: Callable[[str], str | None] | None = None,
                  on_event: TurnSink | None = None) -> TurnOutcome:
        """Run one turn; a failure or a cancellation ends up in the outcome, not raised.

        ``limits`` apply to a new session when it is created and to a continued one for
        this turn; ``request`` is the timeline's ``request`` entry; ``lease_owner`` gives
        the token of a lease this process already holds on a session (it is renewed).
        """
        turn = _Turn(self, agent, on_event)
        journal = self.journal
        try:
            if request is not None:
                await journal.log("request", dict(request))
            chosen = opening if isinstance(opening, Opening) else await opening()
            result = await turn.run(chosen, limits, lease_owner)
        except asyncio.CancelledError:
            return TurnOutcome(FINISH_CANCELLED, turn.session_id, turn.new, usage=journal.usage)
        except Exception as exc:  # whatever went wrong, the turn must be answered
            raised = failure_of(exc)
            if await turn.answer_stored(exc):
                raised = _answered_anyway(exc, turn.session_id)
            await journal.error(raised.code, raised.message)
            return TurnOutcome(FINISH_ERROR, turn.session_id, turn.new, failure=raised,
                               usage=journal.usage)
        reason = finish_reason_of(result)
        failure: Failure | None = None
        if reason == FINISH_ERROR:
            failure = failure_of(result.failure or ModelError(
                result.error or "the run failed", retryable=result.retryable))
            await journal.error(failure.code, failure.message)
        return TurnOutcome(reason, turn.session_id, turn.new, result, failure, journal.usage,
                           journal.model_finish)

    async def finish(self, reason: str, limit: str | None = None, detail: str = "", *,
                     refresh: bool = True) -> None:
        """End the turn in the journal: the index row brought up to date (unless not
        ``refresh``: after a store failure, so a failed turn changes nothing), ``finish``
        logged (with the limit that stopped the run, when one did, so the timeline names
        it)."""
        await self.journal.finish(reason, {"limit": limit, "detail": detail} if limit else None,
                                  refresh=refresh)

    async def close(self) -> None:
        """Close the stores; the turn has been answered, so a failure is only reported.

        Whatever a failed close leaves (a write-ahead log not folded back) the next opener
        recovers, so it must not turn into a second answer.
        """
        try:
            if self._kept is not None:
                kept, key = self._kept
                await kept.give_back(key, self.stores)
            else:
                await self.stores.close()
        except Exception as exc:
            print(f"nonoka: closing the project database failed: {exc}", file=sys.stderr)


_RESEND = re.compile(r";\s*(?:nothing was written:\s*)?send the request again")
"""The store's own advice in a failure's text, dropped once the answer is stored."""


def _answered_anyway(exc: Exception, session_id: str | None) -> Failure:
    """A write that failed after the turn's answer was stored: the answer stands, so the
    advice is not the store's usual "send the request again" (a resent prompt would be
    answered, and stored, a second time), even when the failure itself would pass."""
    cause = _RESEND.sub("", str(exc)).rstrip(". ")
    remedy = "free some space; " if "full" in cause else ""
    return Failure(StoreError.code,
                   f"{cause}; the answer was stored (session {session_id}), only the rest "
                   "of the turn's record (its log entry or final status) could not be "
                   f"written: {remedy}there is no need to resend the request, the answer "
                   "is kept", retryable=False)


class _Turn:
    """One run of ``TurnService.run``: the session it landed in and the event stream."""

    def __init__(self, service: TurnService, agent: Agent, sink: TurnSink | None) -> None:
        self.service = service
        self.agent = agent
        self.sink = sink
        self.session_id: str | None = None
        self.new = False
        self.entries_before: int | None = None
        """Entries the session held when the turn started to run in it."""

    async def answer_stored(self, exc: Exception) -> bool:
        """Whether ``exc``, a store failure (a full disk, a read-only file, a lock held
        too long), came after this turn's final answer was stored: the stored session
        has grown in this turn and ends with an answer that calls no tool."""
        if (type(exc) is not StoreError or self.session_id is None
                or self.entries_before is None):
            return False
        try:
            stored = await self.service.runner.load_session(self.session_id)
        except Exception:  # cannot tell: the failure is reported as it is
            return False
        if stored is None:
            return False
        entries = stored.memory.entries
        return (len(entries) > self.entries_before and entries[-1].role == "assistant"
                and not entries[-1].tool_calls)

    async def run(self, chosen: Opening, limits: RuntimeLimits | None,
                  lease_owner: Callable[[str], str | None] | None) -> RunResult:
        service, journal = self.service, self.service.journal
        runner, target = service.runner, chosen.session
        created: Session | None = None
        if target is None:
            created = await runner.open_session(self.agent, limits=limits, history=chosen.seed)
            model = self.agent.get_model().name
            if journal.creates_indexed():  # one transaction: never a snapshot without a row
                await journal.create(created, model=model)
            else:
                await runner.save_session(created)
                await journal.index(created, model=model, created=True)
            self.session_id, self.new = created.session_id, True
        else:
            self.session_id = target if isinstance(target, str) else target.session_id
        sid = self.session_id
        journal.start(sid)
        await self._tell(SessionOpened(sid, self.new, chosen.recovery_reason,
                                       chosen.forked_from, chosen.fork_point))
        opened: dict[str, Any] = {"new": self.new, "recovery_reason": chosen.recovery_reason}
        if chosen.forked_from is not None:
            opened.update(forked_from=chosen.forked_from, fork_point=chosen.fork_point)
        await journal.log("session", opened)
        for warning in chosen.warnings:
            await self.deliver(warning)
        owner = lease_owner(sid) if lease_owner is not None else None
        async with service.stores.hold(sid, owner):
            loaded = created or await service.current(sid, target)
            plan = chosen.plan if isinstance(chosen.plan, TurnInput) else chosen.plan(loaded)
            await self._check_revision(loaded, chosen.revision_seen)
            self.entries_before = len(loaded.memory.entries)
            # A new session got its limits when it was created.
            result = await self._feed(plan, loaded, None if self.new else limits)
            journal.latest = result.session
            return result

    async def _feed(self, given: TurnInput, session: Session,
                    limits: RuntimeLimits | None) -> RunResult:
        """Run the turn on ``session``, the one read of it under the lease."""
        runner, agent = self.service.runner, self.agent
        if given.replace is not None:
            await runner.replace_memory(session, given.replace)
            await self.service.journal.log("history_edited", dict(given.edit or {}))
        if given.seed:
            await runner.append_history(session, given.seed)
        if given.kind == "prompt" and (given.prompt is not None
                                       or given.prompt_message is not None):
            prompt = given.prompt_message or given.prompt or ""
            return await runner.run_react(agent, prompt, session_id=session,
                                          limits=limits, on_event=self.deliver)
        if given.kind == "tool_results":
            pending = session.memory.dangling_tool_calls()[1]
            names = {c.id: c.name for c in pending}
            for result in given.results:
                await self.service.journal.log("tool_result", {
                    "tool_call_id": result.tool_call_id,
                    "tool_name": names.get(result.tool_call_id, "?"),
                    "content": result.content[:LOGGED_TEXT], "is_error": result.is_error,
                    "executed_by": "host"})
            return await runner.submit_tool_results(agent, session, list(given.results),
                                                    prompt=given.prompt_message or given.prompt,
                                                    limits=limits,
                                                    on_event=self.deliver)
        return await runner.resume(agent, session, limits=limits, on_event=self.deliver,
                                   reopen=given.reopen)

    async def _check_revision(self, session: Session, seen: int | None) -> None:
        """Warn when the store holds fewer entries than the front end saw it hold before."""
        if seen is None or len(session.memory.entries) >= seen:
            return
        stored = len(session.memory.entries)
        await self.deliver(RunWarning(
            WarningCode.STORE_REGRESSED,
            f"the database holds {stored} entries of session {session.session_id}, fewer "
            f"than the {seen} an earlier turn ended with: it went back in time (restored "
            "from a backup or a snapshot?); this turn goes on from what is stored",
            {"stored": stored, "seen": seen}))

    async def deliver(self, event: RunEvent) -> None:
        """Hand a runtime event to the front end first, then record it."""
        await self._tell(event)
        await self.service.journal.on_event(event)

    async def _tell(self, event: TurnEvent) -> None:
        if self.sink is None:
            return
        outcome = self.sink(event)
        if inspect.isawaitable(outcome):
            await outcome
