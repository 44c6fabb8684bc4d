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
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonoka.agent import Agent
from nonoka.bridge import frames
from nonoka.bridge.history import matches_stored, plan_turn, split_for_new_session
from nonoka.bridge.protocol import (
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
from nonoka.config import configured_model
from nonoka.errors import (
    ConfigurationError,
    CorruptSessionError,
    NonokaError,
    SessionBusyError,
    SessionConflictError,
    StoreError,
    ToolResultMismatchError,
    UnsupportedVersionError,
)
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
from nonoka.paradigms.env import RunResult
from nonoka.runner import Runner
from nonoka.runtime import RuntimeLimits
from nonoka.session import Session
from nonoka.state import SessionStatus
from nonoka.store.project import ProjectStores, database_url_from_env, open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.tools import host_tool

Send = Callable[[BaseEvent], None]
LOGGED_TEXT = 2000


@dataclass
class Decision:
    """Which session a request runs in, and what to tell the provider about it."""

    session: Session | None = None
    recovery_reason: str | None = None
    warnings: list[WarningEvent] = field(default_factory=list)


class _Failure(Exception):
    def __init__(self, code: str, message: str, *, retryable: bool = False,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.retryable = code, message, retryable
        self.details = details or {}


class BridgeHandler:
    """Handles one ``chat`` request; every event goes through ``send``."""

    def __init__(self, request: ChatRequest, send: Send) -> None:
        self.request = request
        self._send = send
        self._usage = [0, 0, 0.0, False]  # input, output, cost, cost known
        self._stores: ProjectStores | None = None
        self._session_id: str | None = None
        self._log_buffer: list[tuple[str, dict[str, Any]]] = []

    def send(self, event: BaseEvent) -> None:
        self._send(event.model_copy(update={"request_id": self.request.request_id}))

    async def handle(self) -> None:
        """Run the request; always ends with exactly one ``finish`` event."""
        try:
            model = self._model()
            self._stores = open_project_stores(self._cwd(), database_url_from_env())
            try:
                await self._finish_run(await self._run(model))
            except asyncio.CancelledError:
                await self._finish(frames.FINISH_CANCELLED)
            except _Failure as failure:
                await self._fail(failure)
            except Exception as exc:  # the process must answer, whatever went wrong
                await self._fail(_classify(exc))
            finally:
                await self._stores.close()
        except _Failure as failure:
            await self._fail(failure)
        except Exception as exc:
            await self._fail(_classify(exc))

    # -- set-up ---------------------------------------------------------------------------

    def _cwd(self) -> Path:
        cwd = Path(self.request.cwd or os.getcwd())
        if not cwd.is_dir():
            raise _Failure(frames.ERROR_INVALID_CWD,
                           f"cwd {str(cwd)!r} is not a directory; send the workspace path")
        return cwd.resolve()

    def _model(self) -> ChatModel:
        try:
            return resolve_model(configured_model(self._cwd(), self.request.model))
        except ConfigurationError as exc:
            raise _Failure(frames.ERROR_MODEL_NOT_CONFIGURED, str(exc)) from exc

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
        agent = Agent(model=model, tools=tools)
        await self._log_event("request", {
            "purpose": request.purpose, "messages": len(request.messages),
            "tools": [t.name for t in request.tools], "request_id": request.request_id,
            "model": model.name})
        decision = await self._decide(runner)
        messages, limits = request.messages, self._limits()
        if decision.session is None:
            seed, prompt = split_for_new_session(messages)
            session = await runner.open_session(agent, limits=limits, history=seed)
            await runner.save_session(session)
            await self._index(session, model.name, created=True)
        else:
            session, prompt = decision.session, None
        self._session_id = session.session_id
        self.send(SessionInit(session_id=session.session_id,
                              recovered=decision.recovery_reason is not None,
                              recovery_reason=decision.recovery_reason))
        await self._log_event("session", {
            "new": decision.session is None, "recovery_reason": decision.recovery_reason})
        for warning in decision.warnings:
            self.send(warning)
            await self._log_event("warning", {"code": warning.code, "message": warning.message})
        sid, on_event = session.session_id, self._on_run_event
        if decision.session is None:
            if prompt is not None:
                return await runner.run_react(agent, prompt, session_id=sid, on_event=on_event)
            return await runner.resume(agent, sid, on_event=on_event)
        plan = plan_turn(session.memory.entries, messages)
        if plan.kind == "prompt" and plan.prompt is not None:
            return await runner.run_react(agent, plan.prompt, session_id=sid, limits=limits,
                                          on_event=on_event)
        if plan.kind == "tool_results":
            return await runner.submit_tool_results(agent, sid, plan.results, prompt=plan.prompt,
                                                    limits=limits, on_event=on_event)
        return await runner.resume(agent, sid, limits=limits, on_event=on_event)

    async def _decide(self, runner: Runner) -> Decision:
        request = self.request
        if request.purpose == frames.PURPOSE_TITLE:
            return await self._title_session(runner)
        if request.new_session:
            return Decision()
        continuation = frames.is_continuation(request.messages)
        if request.session_id:
            session = await self._load(runner, request.session_id)
            if session is not None and (
                    not continuation or matches_stored(session.memory.entries, request.messages)):
                return Decision(session=session)
            reason = (frames.RECOVERY_SESSION_NOT_FOUND if session is None
                      else frames.RECOVERY_SESSION_MISMATCH)
            found = await self._recover(runner, continuation)
            if found is not None:
                return Decision(session=found, recovery_reason=reason)
            code = (frames.WARNING_SESSION_NOT_FOUND_STARTING_NEW if session is None
                    else frames.WARNING_SESSION_MISMATCH_STARTING_NEW)
            return Decision(warnings=[WarningEvent(
                code=code, message=frames.WARNING_CODES[code],
                details={"requested_session_id": request.session_id})])
        found = await self._recover(runner, continuation)
        if found is not None:
            return Decision(session=found, recovery_reason=frames.RECOVERY_SESSION_ID_MISSING)
        if not continuation:
            return Decision()
        recent = await self.stores.index.list_sessions(limit=5)
        code = frames.WARNING_SESSION_ID_MISSING_STARTING_FRESH
        return Decision(warnings=[WarningEvent(code=code, message=frames.WARNING_CODES[code],
                                               details={"recent_sessions": [
                                                   {"session_id": r.session_id, "title": r.title,
                                                    "last_active": r.last_active}
                                                   for r in recent]})])

    async def _title_session(self, runner: Runner) -> Decision:
        if self.request.session_id:
            record = await self.stores.index.get_session(self.request.session_id)
            if record is not None and record.purpose == frames.PURPOSE_TITLE:
                session = await self._load(runner, record.session_id)
                if session is not None:
                    return Decision(session=session)
        return Decision()

    async def _load(self, runner: Runner, session_id: str) -> Session | None:
        try:
            return await runner.load_session(session_id)
        except ConfigurationError as exc:
            raise _Failure(frames.ERROR_INVALID_REQUEST, f"session_id: {exc}") from exc

    async def _recover(self, runner: Runner, continuation: bool) -> Session | None:
        key = self.request.conversation_key
        if not key or not continuation:
            return None
        for record in await self.stores.index.find_by_conversation_key(key):
            session = await runner.load_session(record.session_id)
            if session is not None and matches_stored(session.memory.entries,
                                                      self.request.messages):
                return session
        return None

    # -- events -----------------------------------------------------------------------------

    async def _on_run_event(self, event: RunEvent) -> None:
        if isinstance(event, RunTextDelta):
            self.send(TextDelta(text=event.text))
        elif isinstance(event, ToolCallRequested):
            call = event.call
            self.send(ToolCallEvent(tool_call_id=call.id, tool_name=call.name,
                                    arguments=call.arguments, executed_by=event.executed_by))
            await self._log_event("tool_call", {"tool_call_id": call.id, "tool_name": call.name,
                                                "arguments": call.arguments[:LOGGED_TEXT],
                                                "executed_by": event.executed_by})
        elif isinstance(event, ToolCallFinished):
            call = event.call
            self.send(ToolResultEvent(tool_call_id=call.id, tool_name=call.name,
                                      content=event.content, is_error=event.is_error))
            await self._log_event("tool_result", {"tool_call_id": call.id, "tool_name": call.name,
                                                  "content": event.content[:LOGGED_TEXT],
                                                  "is_error": event.is_error})
        elif isinstance(event, ModelCalled):
            usage = event.usage
            self._usage[0] += usage.input_tokens
            self._usage[1] += usage.output_tokens
            if usage.cost_usd is not None:
                self._usage[2] += usage.cost_usd
                self._usage[3] = True
            self.send(UsageEvent(input_tokens=usage.input_tokens,
                                 output_tokens=usage.output_tokens, cost_usd=usage.cost_usd))
            await self._log_event("model_call", {
                "model": event.model, "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd or 0.0})
        elif isinstance(event, RunWarning):
            self.send(WarningEvent(code=event.code, message=event.message,
                                   details=event.details))
            await self._log_event("warning", {"code": event.code, "message": event.message})

    async def _log_event(self, kind: str, data: dict[str, Any]) -> None:
        """Append to the session's timeline; held back until the session is known."""
        self._log_buffer.append((kind, data))
        if self._stores is None or self._session_id is None:
            return
        pending, self._log_buffer = self._log_buffer, []
        for pending_kind, pending_data in pending:
            await self.stores.events.append_event(self._session_id, pending_kind, pending_data)

    # -- finishing --------------------------------------------------------------------------

    def _totals(self) -> UsageTotals:
        return UsageTotals(input_tokens=self._usage[0], output_tokens=self._usage[1],
                           cost_usd=self._usage[2] if self._usage[3] else None)

    async def _finish(self, reason: str, termination: FinishTermination | None = None) -> None:
        totals = self._totals()
        await self._record_finish_state()
        with contextlib.suppress(Exception):  # the timeline must not stop the finish
            await self._log_event("finish", {"finish_reason": reason, **totals.model_dump()})
        self.send(Finish(finish_reason=reason, usage=totals,
                         termination=termination))

    async def _fail(self, failure: _Failure) -> None:
        with contextlib.suppress(Exception):
            await self._log_event("error", {"code": failure.code, "message": failure.message})
        self.send(ErrorEvent(code=failure.code, message=failure.message,
                             retryable=failure.retryable, details=failure.details))
        await self._finish(frames.FINISH_ERROR)

    async def _finish_run(self, result: RunResult) -> None:
        term = result.termination
        termination = (FinishTermination(reason=term.reason, detail=term.detail, limit=term.limit)
                       if term is not None else None)
        if result.status == SessionStatus.COMPLETED:
            await self._finish(frames.FINISH_STOP, termination)
        elif result.status == SessionStatus.PAUSED:
            await self._finish(frames.FINISH_TOOL_CALLS if result.pending_tool_calls
                               else frames.FINISH_STOP, termination)
        elif result.status == SessionStatus.CANCELLED:
            await self._finish(frames.FINISH_CANCELLED, termination)
        elif term is not None and term.reason == "limit":
            await self._finish(frames.FINISH_LIMIT, termination)
        else:
            failure = _Failure(frames.ERROR_MODEL_ERROR, result.error or "the run failed",
                               retryable=result.retryable)
            with contextlib.suppress(Exception):
                await self._log_event("error", {"code": failure.code, "message": failure.message})
            self.send(ErrorEvent(code=failure.code, message=failure.message,
                                 retryable=failure.retryable))
            await self._finish(frames.FINISH_ERROR, termination)

    async def _record_finish_state(self) -> None:
        """Bring the index row up to date with the stored session (never raises)."""
        if self._stores is None or self._session_id is None:
            return
        try:
            state = await self.stores.checkpoints.load_session(self._session_id)
            if state is not None:
                await self._index(Session.from_state(state), None, created=False)
        except Exception:  # the run's outcome matters more than the index row
            traceback.print_exc(file=sys.stderr)

    async def _index(self, session: Session, model: str | None, *, created: bool) -> None:
        index = self.stores.index
        existing = None if created else await index.get_session(session.session_id)
        usage = session.usage
        title = existing.title if existing is not None else _title(self.request)
        metadata = dict(existing.metadata) if existing is not None else {
            "conversation_key": self.request.conversation_key,
            "purpose": self.request.purpose, "cwd": str(self._cwd())}
        await index.upsert_session(SessionRecord(
            session_id=session.session_id, title=title,
            model=model or (existing.model if existing is not None else ""),
            created_at=existing.created_at if existing is not None else time.time(),
            last_active=time.time(), status=str(session.status),
            turn_count=session.turn_count, message_count=len(session.memory),
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd, metadata=metadata))


def _title(request: ChatRequest) -> str:
    for message in request.messages:
        if message.role == "user" and message.content.strip():
            text = " ".join(message.content.split())
            return text if len(text) <= 80 else text[:77] + "..."
    return ""


def _classify(exc: Exception) -> _Failure:
    """Map an exception to the protocol's error codes."""
    if isinstance(exc, ToolResultMismatchError):
        return _Failure(frames.ERROR_TOOL_RESULT_MISMATCH, str(exc))
    if isinstance(exc, SessionBusyError):
        return _Failure(frames.ERROR_SESSION_BUSY, str(exc), retryable=True)
    if isinstance(exc, SessionConflictError):
        return _Failure(frames.ERROR_SESSION_CONFLICT, str(exc), retryable=True)
    if isinstance(exc, CorruptSessionError | UnsupportedVersionError):
        return _Failure(frames.ERROR_SESSION_CORRUPT, str(exc))
    if isinstance(exc, StoreError):
        return _Failure(frames.ERROR_STORE_ERROR, str(exc))
    if isinstance(exc, ConfigurationError):
        return _Failure(frames.ERROR_INVALID_REQUEST, str(exc))
    if isinstance(exc, NonokaError):
        return _Failure(frames.ERROR_INTERNAL_ERROR, str(exc))
    traceback.print_exc(file=sys.stderr)
    return _Failure(frames.ERROR_INTERNAL_ERROR,
                    f"{type(exc).__name__}: {exc} (a bug in nonoka; stderr has the traceback)")
