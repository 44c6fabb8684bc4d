"""``Runner``: the entry points that create, continue, resume and cancel sessions.

Every method loads what it needs from the checkpoint store and writes back as it goes,
so any of them can be called from a process that has never seen the session before.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nonoka import faults
from nonoka.errors import (
    ConfigurationError,
    ModelError,
    SessionConflictError,
    ToolResultMismatchError,
)
from nonoka.events import EventSink
from nonoka.extensions.approval import apply_decision
from nonoka.runtime.agent import Agent
from nonoka.runtime.paradigms.env import LoopEnv, RunResult, result_of
from nonoka.runtime.paradigms.plan import PlanExecutor
from nonoka.runtime.paradigms.react import ReActAgent
from nonoka.runtime.session import INTENTS_NAMESPACE, Session
from nonoka.state.entries import MemoryEntry, dangling_tool_calls, user_entry
from nonoka.state.ids import validate_session_id
from nonoka.state.ledger import RuntimeLimits, RuntimeUsage, Termination
from nonoka.state.messages import Message, ToolResult
from nonoka.state.plan import Plan
from nonoka.state.prefix_memo import ConversationPasses
from nonoka.state.session_state import SessionState, SessionStatus
from nonoka.store.base import BranchingStore, CheckpointStore

FINISHED = (SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED)
_CONFLICT_RETRIES = 5


class _CancelledElsewhere(Exception):
    """Another process cancelled the session while this one was running it."""


class Runner:
    """Runs agents against sessions kept in a checkpoint store."""

    def __init__(self, store: CheckpointStore | None = None, *,
                 passes: ConversationPasses | None = None) -> None:
        """``passes``: where the passes over a conversation stopped last, when the
        process keeps them between runs (``ConversationPasses``: a long-lived bridge)."""
        if store is None:
            from nonoka.store.memory import MemoryCheckpointStore

            store = MemoryCheckpointStore()
        self.store = store
        self.passes = passes

    # -- running --------------------------------------------------------------------------

    async def run_react(
        self,
        agent: Agent,
        prompt: str | Message,
        deps: Any = None,
        session_id: str | Session | None = None,
        *,
        limits: RuntimeLimits | None = None,
        history: Sequence[Message] = (),
        on_event: EventSink | None = None,
    ) -> RunResult:
        """Send ``prompt`` in a new session, or continue ``session_id`` (memory restored).

        An id that does not exist yet names the new session. A ``Session`` this process
        loaded (under its lease) is continued as it is, without reading it again.
        ``history`` seeds a new session with earlier messages; ``limits`` raise or lower
        the stored limits.
        """
        agent.get_model()  # a configuration error surfaces before anything is stored
        session = await self.open_session(agent, session_id, limits=limits, history=history)
        env = self._env(agent, deps, on_event)
        return await self._guarded(session, lambda: ReActAgent(env).run(session, prompt))

    async def run_plan(
        self,
        agent: Agent,
        plan: Plan,
        deps: Any = None,
        session_id: str | None = None,
        *,
        limits: RuntimeLimits | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """Execute ``plan`` in a new session (or continue one); completed steps are skipped."""
        session = await self.open_session(agent, session_id, limits=limits)
        env = self._env(agent, deps, on_event)
        return await self._guarded(session, lambda: PlanExecutor(env).execute(session, plan))

    async def resume(
        self,
        agent: Agent,
        session_id: str | Session,
        deps: Any = None,
        *,
        limits: RuntimeLimits | None = None,
        on_event: EventSink | None = None,
        reopen: bool = False,
    ) -> RunResult:
        """Carry on a session from its checkpoint, repairing a turn cut by a crash.

        An unknown id gives a failed result that says so; a finished session returns at once
        — unless ``reopen`` is set, which retries a failed or cancelled turn (a host that
        resends the request of a turn that failed wants it tried again, not reported again).
        A loaded ``Session`` is carried on as it is.
        """
        session = await self._loaded(session_id)
        if session is None:
            assert isinstance(session_id, str)
            return RunResult(success=False, session_id=session_id, status=SessionStatus.FAILED,
                             error=f"session {session_id!r} was not found in the checkpoint store")
        has_plan = session.current_plan is not None and bool(session.current_plan.steps)
        retry = reopen and not has_plan and session.status != SessionStatus.COMPLETED
        if session.status in FINISHED and not retry:
            return result_of(session, output=_last_answer(session))
        session.apply_limits(limits)
        env = self._env(agent, deps, on_event)
        if has_plan:
            return await self._guarded(session, lambda: PlanExecutor(env).resume(session))
        return await self._guarded(session, lambda: ReActAgent(env).resume(session))

    async def submit_tool_results(
        self,
        agent: Agent,
        session_id: str | Session,
        results: Sequence[ToolResult],
        deps: Any = None,
        *,
        prompt: str | Message | None = None,
        limits: RuntimeLimits | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """Feed the host's results to the session's pending calls and continue the loop.

        ``prompt`` is a user message that arrived together with the results. Raises
        ``ToolResultMismatchError`` (storing nothing) when a result answers no pending
        call or answers one twice. A loaded ``Session`` is used as it is.
        """
        session = await self._loaded(session_id)
        if session is None:
            raise ToolResultMismatchError(f"session {session_id!r} does not exist")
        _, dangling = session.memory.dangling_tool_calls()
        pending = {c.id: c for c in dangling}
        seen: set[str] = set()
        for result in results:
            if result.tool_call_id not in pending or result.tool_call_id in seen:
                twice = result.tool_call_id in seen
                why = "answers it twice" if twice else "answers no pending call"
                raise ToolResultMismatchError(
                    f"tool result for {result.tool_call_id!r} {why}; the session is waiting "
                    f"for: {', '.join(pending) or 'nothing'}")
            seen.add(result.tool_call_id)
        session.apply_limits(limits)
        for result in results:
            call = pending[result.tool_call_id]
            session.memory.append(MemoryEntry.tool_result(call, result.content,
                                                          is_error=result.is_error,
                                                          parts=result.parts))
        env = self._env(agent, deps, on_event)

        async def go() -> RunResult:
            session.begin()
            if prompt is not None:
                session.memory.append(user_entry(prompt))
                session.turn_count += 1
            await self._save(session)
            return await ReActAgent(env).resume(session)

        return await self._guarded(session, go)

    # -- decisions from outside a run --------------------------------------------------------

    async def approve_tool_call(
        self, session_id: str, tool_call_id: str, approved: bool = True, note: str = ""
    ) -> None:
        """Record a decision for a call waiting for approval; ``resume`` then acts on it."""

        def decide(session: Session) -> bool:
            apply_decision(session.extension_state, tool_call_id, approved, note)
            return True

        if not await self._update(session_id, decide):
            raise ToolResultMismatchError(f"session {session_id!r} does not exist")

    async def cancel_session(self, session_id: str) -> bool:
        """Persist a cancellation; ``False`` when the session is unknown or already over."""

        def cancel(session: Session) -> bool:
            if session.status in FINISHED:
                return False
            _close_open_calls(session, "cancelled: the session was cancelled before this "
                                       "call finished")
            session.terminate(Termination(reason="cancelled", detail="cancelled on request"),
                              SessionStatus.CANCELLED)
            return True

        return await self._update(session_id, cancel)

    async def replace_memory(self, session_id: str | Session,
                             entries: Sequence[MemoryEntry]) -> bool:
        """Make ``entries`` the session's working memory (what the model sees from now on).

        For a host that edited the conversation it resends (pruned tool outputs, a summary
        in place of a prefix): the generation is bumped, so the stores rewrite the entries
        instead of appending. ``False`` when the session is unknown.
        """

        def replace(session: Session) -> bool:
            session.replace_memory(entries)
            return True

        return await self._update(session_id, replace)

    async def append_history(self, session_id: str | Session,
                             messages: Sequence[Message]) -> bool:
        """Add messages to the session's conversation as they are, one entry each.

        For what a host sends besides a turn's prompt: earlier user messages no answer
        followed, or turns it holds that the store lacks. ``False`` when the session is
        unknown.
        """

        def append(session: Session) -> bool:
            for message in messages:
                session.memory.append(MemoryEntry.from_message(message))
            return True

        return await self._update(session_id, append)

    # -- sessions ----------------------------------------------------------------------------

    async def fork_session(self, session_id: str, at: int | None = None, *,
                           new_session_id: str | None = None) -> str:
        """Branch a session: a new session whose conversation is the first ``at`` entries
        of ``session_id``'s (default: all of them); returns the branch's id.

        The parent is left as it is. Stores that can (``BranchingStore``: every engine
        nonoka ships) share those entries instead of copying them, and the fork reads
        only the snapshot and the entries near the fork point, so it costs the same for
        any length. The branch starts from the parent's ledger as it stands, so limits
        cannot be escaped by branching.
        """
        store = self.store
        child_id = validate_session_id(new_session_id or str(uuid.uuid4()))
        if isinstance(store, BranchingStore):
            found = await store.load_snapshot(validate_session_id(session_id))
            if found is None:
                raise _not_found(session_id)
            snapshot, count = found
            point = _fork_point(session_id, at, count)
            near = await _entries_to_settle(store, session_id, point)
            cut = [] if point == count else await store.load_entries(session_id, point, count)
            child = _branch(snapshot, child_id, session_id, point, near, cut)
            await store.fork_session(child, session_id, point, snapshot.memory_generation)
            return child_id
        parent = await self.store.load_session(validate_session_id(session_id))
        if parent is None:
            raise _not_found(session_id)
        entries = parent.memory_entries
        point = _fork_point(session_id, at, len(entries))
        child = _branch(parent, child_id, session_id, point, entries[:point], entries[point:])
        await store.save_session(child.model_copy(update={"memory_entries": entries[:point]}))
        return child_id

    async def rewind_session(self, session_id: str, to: int) -> str:
        """Go back to entry ``to``: a branch holding the first ``to`` entries, from which
        the conversation continues; the abandoned tail stays stored in ``session_id``."""
        return await self.fork_session(session_id, to)

    async def save_session(self, session: Session) -> None:
        """Checkpoint a session (e.g. a new one before announcing its id)."""
        await self._save(session)

    async def _loaded(self, session: str | Session) -> Session | None:
        return session if isinstance(session, Session) else await self.load_session(session)

    async def load_session(self, session_id: str) -> Session | None:
        state = await self.store.load_session(validate_session_id(session_id))
        return Session.from_state(state, self.passes) if state is not None else None

    async def open_session(
        self,
        agent: Agent,
        session_id: str | Session | None = None,
        *,
        limits: RuntimeLimits | None = None,
        history: Sequence[Message] = (),
    ) -> Session:
        """Load ``session_id`` (a loaded ``Session`` is taken as it is) or build a new
        session (not stored until its first save)."""
        if session_id is not None:
            existing = await self._loaded(session_id)
            if existing is not None:
                existing.apply_limits(limits)
                return existing
        assert not isinstance(session_id, Session)
        session = Session(session_id or str(uuid.uuid4()),
                          limits=agent.limits.merged(limits),
                          completion_contract=agent.completion_contract,
                          passes=self.passes)
        if agent.system_prompt:
            session.memory.append(MemoryEntry.make("system", agent.system_prompt))
        for message in history:
            session.memory.append(MemoryEntry.from_message(message))
        return session

    # -- internals ---------------------------------------------------------------------------

    def _env(self, agent: Agent, deps: Any, on_event: EventSink | None) -> LoopEnv:
        return LoopEnv(agent=agent, store=self.store, deps=deps, on_event=on_event,
                       save=self._save)

    async def _save(self, session: Session) -> None:
        faults.point("checkpoint.save.before")
        try:
            session.revision = await self.store.save_session(session.to_state())
        except SessionConflictError:
            stored = await self.store.load_session(session.session_id)
            if stored is not None and stored.status == SessionStatus.CANCELLED:
                raise _CancelledElsewhere from None
            raise
        faults.point("checkpoint.save.after")

    async def _guarded(
        self, session: Session, run: Callable[[], Awaitable[RunResult]]
    ) -> RunResult:
        """Run a paradigm; persist what a failure or a cancellation leaves behind."""
        try:
            return await run()
        except _CancelledElsewhere:
            stored = await self.load_session(session.session_id)
            return result_of(stored or session)
        except asyncio.CancelledError:
            await asyncio.shield(self._persist_cancel(session))
            raise
        except ModelError as exc:
            _close_open_calls(session, f"not run: the model call failed ({exc})")
            session.terminate(Termination(reason="error", detail=str(exc)), SessionStatus.FAILED)
            await self._save(session)
            result = result_of(session, error=str(exc))
            result.retryable = exc.retryable
            result.failure = exc
            return result

    async def _persist_cancel(self, session: Session) -> None:
        _close_open_calls(session, "cancelled: the run was cancelled before this call finished")
        session.terminate(Termination(reason="cancelled", detail="the run was cancelled"),
                          SessionStatus.CANCELLED)
        # If someone else wrote the session after us, theirs stands.
        with contextlib.suppress(SessionConflictError, _CancelledElsewhere):
            await self._save(session)

    async def _update(self, session_id: str | Session,
                      change: Callable[[Session], bool]) -> bool:
        """Load, change and save a session, retrying when another writer got there first.

        A loaded ``Session`` (held under this process's lease) is changed and saved as
        it is: nobody else writes it, so a conflict is an error, not a reason to retry."""
        if isinstance(session_id, Session):
            if not change(session_id):
                return False
            faults.point("checkpoint.save.before")
            session_id.revision = await self.store.save_session(session_id.to_state())
            faults.point("checkpoint.save.after")
            return True
        for _ in range(_CONFLICT_RETRIES):
            session = await self.load_session(session_id)
            if session is None or not change(session):
                return False
            faults.point("checkpoint.save.before")
            try:
                session.revision = await self.store.save_session(session.to_state())
                faults.point("checkpoint.save.after")
                return True
            except SessionConflictError:
                await asyncio.sleep(0.01)
        raise SessionConflictError(
            f"session {session_id!r} kept changing under this update; try again"
        )


async def _entries_to_settle(store: BranchingStore, session_id: str,
                             point: int) -> list[MemoryEntry]:
    """The entries before ``point`` that decide a branch's open tool calls.

    They are the calls of the last assistant entry that made calls, unless a user entry
    came after it (a valid history answers every call before the next prompt): so read
    backwards, a few entries at a time, until one of those two is found.
    """
    entries: list[MemoryEntry] = []
    stop = point
    while stop > 0:
        start = max(0, stop - 16)
        chunk = await store.load_entries(session_id, start, stop)
        entries[:0] = chunk
        if any(e.role == "user" or e.metadata.get("tool_calls") for e in chunk):
            break
        stop = start
    return entries


def _not_found(session_id: str) -> ConfigurationError:
    return ConfigurationError(f"session {session_id!r} was not found; nothing was forked")


def _fork_point(session_id: str, at: int | None, count: int) -> int:
    point = count if at is None else at
    if not 0 <= point <= count:
        raise ConfigurationError(f"fork point {point} is outside session {session_id}'s "
                                 f"{count} entries (0 to {count})")
    return point


def _branch(parent: SessionState, child_id: str, parent_id: str, point: int,
            near: Sequence[MemoryEntry], cut: Sequence[MemoryEntry]) -> SessionState:
    """The branch's snapshot: the parent's, with status and counters for what it holds.

    ``near`` are the entries just before the fork point, ``cut`` those after it.
    """
    _, dangling = dangling_tool_calls(near)
    extensions = dict(parent.extension_state)
    if cut:
        extensions.pop(INTENTS_NAMESPACE, None)  # intents of calls the branch does not hold
    status = (SessionStatus.PAUSED if dangling else
              SessionStatus.COMPLETED if point else SessionStatus.CREATED)
    users_cut = sum(1 for e in cut if e.role == "user")
    return parent.model_copy(update={
        "session_id": child_id, "revision": 0, "memory_entries": [], "trace": [],
        "status": status, "extension_state": extensions, "end_time": None,
        "turn_count": max(0, parent.turn_count - users_cut),
        "runtime_state": parent.runtime_state.model_copy(
            update={"termination": None, "cancelled_at": None,
                    "usage": inherited_usage(parent.runtime_state.usage, cut)}),
        "forked_from": parent_id, "fork_point": point})


def inherited_usage(usage: RuntimeUsage, cut: Sequence[MemoryEntry]) -> RuntimeUsage:
    """A branch's ledger at its fork point: the parent's, without what the entries after
    the fork point cost (each answer keeps its call's usage; tool results count one tool
    call each). One definition for every surface: listing, show, the ui, export and
    budgets all read the branch's ledger. Answers stored before answers kept their usage
    cannot be taken off: for those the parent's spending as it stood is kept."""
    spent: dict[str, float] = {}
    calls = tools = 0
    for entry in cut:
        if entry.role == "assistant" and "usage" in entry.metadata:
            calls += 1
            for name, value in entry.metadata["usage"].items():
                spent[name] = spent.get(name, 0) + value
        elif entry.role == "tool":
            tools += 1
    if not calls:
        return usage
    return usage.model_copy(update={
        "model_turns": max(0, usage.model_turns - calls),
        "tool_calls": max(0, usage.tool_calls - tools),
        **{name: max(0, getattr(usage, name) - int(spent.get(name, 0)))
           for name in ("input_tokens", "output_tokens", "cache_read_tokens",
                        "cache_write_tokens", "reasoning_tokens")},
        "cost_usd": max(0.0, usage.cost_usd - spent.get("cost_usd", 0.0))})


def _close_open_calls(session: Session, content: str) -> None:
    """Give every open tool call a result, so the stored history stays valid for any API."""
    _, dangling = session.memory.dangling_tool_calls()
    for call in dangling:
        session.memory.append(MemoryEntry.tool_result(call, content, is_error=True))
        session.clear_intent(call.id)


def _last_answer(session: Session) -> str | None:
    for entry in reversed(session.memory.entries):
        if entry.role == "assistant" and not entry.tool_calls:
            return entry.content
    return None
