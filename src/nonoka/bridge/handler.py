"""One chat request, start to finish: pick the session, run the turn, report events.

The session decision chain (SPEC §2.3) reads only the request's fields:

1. ``new_session`` → a new session;
2. ``session_id`` found and its stored conversation matches the history → continue it;
3. ``session_id`` not found (or it belongs to another conversation) → recover by
   ``conversation_key``, else a new session with a warning;
4. no ``session_id`` → recover by ``conversation_key``; else, if the history shows a
   continuation, a new session with a warning that lists recent sessions; else new.

Recovery only considers continuations, takes the most recently active session with the
key whose stored conversation the history continues, and a new session started for a
continuation is seeded with the request's history, so nothing the user said is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nonoka import faults
from nonoka.agent import Agent
from nonoka.bookkeeping import Failure, SessionBook, failure_of, finish_reason_of, title_from
from nonoka.bridge.early import Dispatched
from nonoka.bridge.history import matches_stored, plan_turn, split_for_new_session
from nonoka.config import configured_model
from nonoka.errors import ConfigurationError, UnsupportedVersionError
from nonoka.events import (
    ModelCalled,
    RunEvent,
    RunWarning,
    ToolCallFinished,
    ToolCallRequested,
)
from nonoka.events import TextDelta as RunTextDelta
from nonoka.llm import resolve_model
from nonoka.llm.base import ChatModel
from nonoka.messages import dangling_tool_calls
from nonoka.paradigms.env import RunResult
from nonoka.protocol.frames import Purpose, is_continuation
from nonoka.protocol.models import (
    BaseEvent,
    ChatRequest,
    ErrorEvent,
    Finish,
    FinishTermination,
    SessionInit,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UsageTotals,
    WarningEvent,
)
from nonoka.protocol.values import (
    WARNING_CODES,
    ErrorCode,
    ExecutedBy,
    FinishReason,
    RecoveryReason,
    WarningCode,
)
from nonoka.runner import Runner
from nonoka.runtime import RuntimeLimits
from nonoka.session import Session, validate_session_id
from nonoka.state import SessionStatus
from nonoka.store.project import ProjectStores, database_url_from_env, open_project_stores
from nonoka.tools import host_tool

Send = Callable[[BaseEvent], None]


@dataclass
class Decision:
    """Which session a request runs in, and what to tell the provider about it."""

    session: Session | None = None
    recovery_reason: str | None = None
    warnings: list[WarningEvent] = field(default_factory=list)


class _Failure(Exception):
    """Stops a request with a protocol error the handler chose itself."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.failure = Failure(code, message)


class BridgeHandler:
    """Handles one ``chat`` request; every event goes through ``send``."""

    def __init__(self, request: ChatRequest, send: Send,
                 raw: dict[str, object] | None = None,
                 early: Dispatched | None = None) -> None:
        self.request = request
        self._send = send
        self._raw = raw
        """The request as it arrived (decoded JSON); its early dispatch is judged on it."""
        self._early = early
        """What the early dispatch sent for this request, if anything."""
        self._agent: Agent | None = None
        self._answered: Session | None = None
        """The session as the answered turn left it."""
        self._stores: ProjectStores | None = None
        self.book = SessionBook(title=_title(request))
        """The session's index row and timeline, written as ``nonoka run`` writes them."""
        self._session: Session | None = None
        self._streamed = False
        """Whether this request has sent the host any text or tool call yet."""
        self.key, self._warnings = _checked_key(request.conversation_key)
        """The request's conversation key, or ``None`` when it was missing or malformed."""

    def send(self, event: BaseEvent) -> None:
        self._send(event.model_copy(update={"request_id": self.request.request_id}))
        faults.point("bridge.send")

    async def handle(self) -> None:
        """Run the request; always ends with exactly one ``finish`` event."""
        try:
            cwd = self._cwd()
            model = self._model(cwd)
            if self._early is not None:
                self._early.offer(model)
            self._stores = _open_stores(cwd)
            self.book.attach(self._stores, metadata={
                "conversation_key": self.key,
                "purpose": self.request.purpose, "cwd": str(cwd)})
            try:
                result = await self._run(model)
                await self._finish_run(result)
                self._answered = result.session
            except asyncio.CancelledError:
                await self._finish(FinishReason.CANCELLED)
            except _Failure as refused:
                await self._fail(refused.failure)
            except Exception as exc:  # the process must answer, whatever went wrong
                await self._fail(failure_of(exc))
            finally:
                await self._after_answer(model)
                await _close(self._stores)
        except _Failure as refused:
            await self._fail(refused.failure)
        except Exception as exc:
            await self._fail(failure_of(exc))

    # -- set-up ---------------------------------------------------------------------------

    def _cwd(self) -> Path:
        cwd = Path(self.request.cwd or os.getcwd())
        if not cwd.is_dir():
            raise _Failure(ErrorCode.INVALID_CWD,
                           f"cwd {str(cwd)!r} is not a directory; send the workspace path")
        return cwd.resolve()

    def _model(self, cwd: Path) -> ChatModel:
        try:
            return resolve_model(configured_model(cwd, self.request.model))
        except ConfigurationError as exc:
            raise _Failure(ErrorCode.MODEL_NOT_CONFIGURED, str(exc)) from exc

    def _limits(self) -> RuntimeLimits | None:
        limits = self.request.limits
        if limits is None:
            return None
        return RuntimeLimits(**limits.model_dump(exclude_none=True))

    @property
    def stores(self) -> ProjectStores:
        assert self._stores is not None
        return self._stores

    # -- the run ----------------------------------------------------------------------------

    async def _run(self, model: ChatModel) -> RunResult:
        request = self.request
        runner = Runner(self.stores.checkpoints)
        tools = [host_tool(t.name, t.description, t.parameters) for t in request.tools]
        agent = self._agent = Agent(model=model, tools=tools)
        await self.book.log("request", {
            "purpose": request.purpose, "messages": len(request.messages),
            "tools": [t.name for t in request.tools], "request_id": request.request_id,
            "model": model.name})
        decision = await self._decide(runner)
        messages, limits = request.messages, self._limits()
        if decision.session is None:
            seed, prompt = split_for_new_session(messages)
            session = await runner.open_session(agent, limits=limits, history=seed)
            await runner.save_session(session)
            await self.book.index(session, model=model.name, created=True)
        else:
            session, prompt = decision.session, None
        self.book.start(session.session_id)
        self.send(SessionInit(session_id=session.session_id,
                              recovered=decision.recovery_reason is not None,
                              recovery_reason=decision.recovery_reason))
        await self.book.log("session", {
            "new": decision.session is None, "recovery_reason": decision.recovery_reason})
        for warning in decision.warnings:
            self.send(warning)
            await self.book.log("warning", {"code": warning.code, "message": warning.message})
        early = self._early.lease_owner(session.session_id) if self._early else None
        async with self.stores.hold(session.session_id, early):
            return await self._run_turn(runner, agent, session, prompt,
                                        new=decision.session is None)

    async def _run_turn(self, runner: Runner, agent: Agent, session: Session,
                        prompt: str | None, *, new: bool) -> RunResult:
        """Run the turn while holding the session's lease."""
        sid, on_event = session.session_id, self._on_run_event
        messages, limits = self.request.messages, self._limits()
        if new:
            if prompt is not None:
                return await runner.run_react(agent, prompt, session_id=sid, on_event=on_event)
            return await runner.resume(agent, sid, on_event=on_event)
        # Read the session again now that it is ours: another process may have just
        # finished a turn of it between the decision and the lease.
        session = await runner.load_session(sid) or session
        self._session = session
        plan = plan_turn(session.memory.entries, messages)
        if plan.kind == "prompt" and plan.prompt is not None:
            return await runner.run_react(agent, plan.prompt, session_id=sid, limits=limits,
                                          on_event=on_event)
        if plan.kind == "tool_results":
            names = {c.id: c.name for c in dangling_tool_calls(session.memory.entries)[1]}
            for result in plan.results:
                await self.book.log("tool_result", {
                    "tool_call_id": result.tool_call_id,
                    "tool_name": names.get(result.tool_call_id, "?"),
                    "content": result.content[:2000], "is_error": result.is_error,
                    "executed_by": "host"})
            return await runner.submit_tool_results(agent, sid, plan.results, prompt=plan.prompt,
                                                    limits=limits, on_event=on_event)
        # Nothing new, or what is new was stored by a process that died: carry the turn on
        # (retrying it if it failed) or, if it was answered, replay the answer.
        awaiting = messages[-1].role != "assistant"
        return await runner.resume(agent, sid, limits=limits, on_event=on_event,
                                   reopen=awaiting)

    async def _decide(self, runner: Runner) -> Decision:
        decision = await self._pick(runner)
        decision.warnings[:0] = self._warnings
        return decision

    async def _pick(self, runner: Runner) -> Decision:
        request = self.request
        if request.session_id:
            try:
                validate_session_id(request.session_id)
            except ConfigurationError as exc:
                raise _Failure(ErrorCode.INVALID_REQUEST, f"session_id: {exc}") from None
        if request.purpose == Purpose.TITLE:
            return await self._title_session(runner)
        if request.new_session:
            return Decision()
        continuation = is_continuation(request.messages)
        if request.session_id:
            session = await self._load(runner, request.session_id)
            if session is not None and (
                    not continuation or matches_stored(session.memory.entries, request.messages)):
                return Decision(session=session)
            reason = (RecoveryReason.SESSION_NOT_FOUND if session is None
                      else RecoveryReason.SESSION_MISMATCH)
            found = await self._recover(runner, continuation)
            if found is not None:
                return Decision(session=found, recovery_reason=reason)
            code = (WarningCode.SESSION_NOT_FOUND_STARTING_NEW if session is None
                    else WarningCode.SESSION_MISMATCH_STARTING_NEW)
            return Decision(warnings=[WarningEvent(
                code=code, message=WARNING_CODES[code],
                details={"requested_session_id": request.session_id})])
        found = await self._recover(runner, continuation)
        if found is not None:
            return Decision(session=found, recovery_reason=RecoveryReason.SESSION_ID_MISSING)
        if not continuation:
            return Decision()
        recent = await self.stores.index.list_sessions(limit=5)
        code = WarningCode.SESSION_ID_MISSING_STARTING_FRESH
        return Decision(warnings=[WarningEvent(code=code, message=WARNING_CODES[code],
                                               details={"recent_sessions": [
                                                   {"session_id": r.session_id, "title": r.title,
                                                    "last_active": r.last_active}
                                                   for r in recent]})])

    async def _title_session(self, runner: Runner) -> Decision:
        if self.request.session_id:
            record = await self.stores.index.get_session(self.request.session_id)
            if record is not None and record.purpose == Purpose.TITLE:
                session = await self._load(runner, record.session_id)
                if session is not None:
                    return Decision(session=session)
        return Decision()

    async def _load(self, runner: Runner, session_id: str) -> Session | None:
        try:
            return await runner.load_session(session_id)
        except ConfigurationError as exc:
            raise _Failure(ErrorCode.INVALID_REQUEST, f"session_id: {exc}") from exc

    async def _recover(self, runner: Runner, continuation: bool) -> Session | None:
        key = self.key
        if not key or not continuation:
            return None
        for record in await self.stores.index.find_by_conversation_key(key):
            session = await runner.load_session(record.session_id)
            if session is not None and matches_stored(session.memory.entries,
                                                      self.request.messages):
                return session
        return None

    async def _after_answer(self, model: ChatModel) -> None:
        """Give back the early dispatch's lease, and store the next turn's template.

        The host has its answer by now; a failure here is only reported.
        """
        from nonoka.bridge import early

        try:
            if self._early is not None:
                await self._early.release_lease(self.stores.leases)
            session = self._answered
            if session is not None and self._raw is not None and self._agent is not None:
                await early.remember_next_call(self.stores, session, model,
                                               list(self._agent.tool_map.values()), self._raw)
        except Exception as exc:
            print(f"nonoka: after answering: {exc}", file=sys.stderr)

    # -- events -----------------------------------------------------------------------------

    async def _on_run_event(self, event: RunEvent) -> None:
        """Tell the provider first, then record it in the timeline."""
        if isinstance(event, RunTextDelta | ToolCallRequested):
            self._streamed = True
        if isinstance(event, RunTextDelta):
            self.send(TextDelta(text=event.text))
        elif isinstance(event, ToolCallRequested):
            call = event.call
            self.send(ToolCallEvent(tool_call_id=call.id, tool_name=call.name,
                                    arguments=call.arguments, executed_by=event.executed_by))
        elif isinstance(event, ToolCallFinished):
            call = event.call
            self.send(ToolResultEvent(tool_call_id=call.id, tool_name=call.name,
                                      content=event.content, is_error=event.is_error))
        elif isinstance(event, ModelCalled):
            usage = event.usage
            self.send(UsageEvent(input_tokens=usage.input_tokens,
                                 output_tokens=usage.output_tokens, cost_usd=usage.cost_usd))
        elif isinstance(event, RunWarning):
            self.send(WarningEvent(code=event.code, message=event.message,
                                   details=event.details))
        await self.book.on_event(event)

    # -- finishing --------------------------------------------------------------------------

    async def _finish(self, reason: str, termination: FinishTermination | None = None) -> None:
        # The turn is over: nothing claims the early request any more.
        outcome = self._early.settle() if self._early is not None else None
        if outcome is not None:
            with contextlib.suppress(Exception):  # the timeline must not stop the finish
                await self.book.log("early_request", {"outcome": outcome})
        await self.book.finish(reason)
        self.send(Finish(finish_reason=reason, usage=UsageTotals(**self.book.usage.as_dict()),
                         termination=termination))

    async def _fail(self, failure: Failure, termination: FinishTermination | None = None,
                    ) -> None:
        await self.book.error(failure.code, failure.message)
        self.send(ErrorEvent(code=failure.code, message=failure.message,
                             retryable=failure.retryable))
        await self._finish(FinishReason.ERROR, termination)

    async def _replay(self, result: RunResult) -> None:
        """Send the host a stored answer it never received.

        A process that died after storing the turn's answer (text, or host tool calls)
        but before the host read ``finish`` leaves the host retrying the same request. The
        turn is not run again: the host gets what the session already holds.
        """
        if self._streamed or self._session is None or self.request.messages[-1].role == \
                "assistant":
            return
        entries = self._session.memory.entries
        start = max((i for i, e in enumerate(entries) if e.role in ("user", "tool")),
                    default=-1) + 1
        answers = [e for e in entries[start:] if e.role == "assistant"]
        pending = {c.id for c in result.pending_tool_calls}
        if result.status != SessionStatus.COMPLETED and not pending:
            return
        replayed = 0
        for entry in answers:
            if entry.content:
                self.send(TextDelta(text=entry.content))
            for call in entry.tool_calls:
                if call.id in pending:
                    self.send(ToolCallEvent(tool_call_id=call.id, tool_name=call.name,
                                            arguments=call.arguments,
                                            executed_by=ExecutedBy.HOST))
                    replayed += 1
        if answers:
            await self.book.log("replay", {"entries": len(answers), "tool_calls": replayed})

    async def _finish_run(self, result: RunResult) -> None:
        await self._replay(result)
        term = result.termination
        termination = (FinishTermination(reason=term.reason, detail=term.detail, limit=term.limit)
                       if term is not None else None)
        reason = finish_reason_of(result)
        if reason == FinishReason.ERROR:
            await self._fail(Failure(ErrorCode.MODEL_ERROR, result.error or "the run failed",
                                     retryable=result.retryable), termination)
        else:
            await self._finish(reason, termination)


def _title(request: ChatRequest) -> str:
    for message in request.messages:
        if message.role == "user" and message.content.strip():
            return title_from(message.content)
    return ""


def _checked_key(key: str | None) -> tuple[str | None, list[WarningEvent]]:
    """The conversation key if it is one (64 hex digits, SPEC §2.2), else ``None`` and a
    warning: anything else is a provider bug, and must not become a lookup key."""
    if key is None or (len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
        return key, []
    code = WarningCode.CONVERSATION_KEY_IGNORED
    return None, [WarningEvent(code=code, message=WARNING_CODES[code],
                               details={"length": len(key)})]


def _open_stores(cwd: Path) -> ProjectStores:
    """The project's stores, with failures a person can fix named as such."""
    try:
        return open_project_stores(cwd, database_url_from_env())
    except UnsupportedVersionError as exc:  # the whole database, not one session
        raise _Failure(ErrorCode.STORE_ERROR, str(exc)) from None
    except OSError as exc:  # .nonoka/ cannot be created in the workspace
        raise _Failure(ErrorCode.INVALID_CWD, (
            f"cannot create {cwd / '.nonoka'}: {exc.strerror or exc}; make the workspace "
            "writable for this user, or point NONOKA_DATABASE_URL at a writable place"),
        ) from None


async def _close(stores: ProjectStores) -> None:
    """Close the stores; the request has been answered, so a failure is only reported.

    Whatever a failed close leaves (a write-ahead log not folded back) the next opener
    recovers, so it must not turn into a second answer to the request.
    """
    try:
        await stores.close()
    except Exception as exc:
        print(f"nonoka: closing the project database failed: {exc}", file=sys.stderr)
