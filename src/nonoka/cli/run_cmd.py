"""``nonoka run``: one turn in this process, recorded like a bridge turn.

No bridge and no provider: the turn runs here, with the model configured for the project
and nonoka's read-only built-in tools. The turn goes through the same turn service the
bridge uses (``nonoka.turn``), so the session, its index row and its timeline land in the
project database in one format: the session shows up in ``nonoka sessions`` and can be
continued by ``run`` or by a provider later. This module only picks the session and
shapes what the terminal shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonoka.cli.common import Place, find_session, open_stores
from nonoka.cli.damage import refuse_if_damaged
from nonoka.cli.tools import builtin_tools
from nonoka.cli.voice import EXIT_BUSY, EXIT_FAILURE, EXIT_USAGE, CliError
from nonoka.errors import ConfigurationError, Failure, NonokaError
from nonoka.events import EventSink, emit
from nonoka.llm.base import ChatModel
from nonoka.protocol.frames import Purpose, conversation_key
from nonoka.runtime.agent import Agent
from nonoka.runtime.session import Session
from nonoka.state.messages import Message
from nonoka.state.session_state import SessionStatus
from nonoka.turn.journal import TurnUsage, title_from
from nonoka.turn.outcome import (
    FINISH_CANCELLED,
    FINISH_LIMIT,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
)
from nonoka.turn.service import Opening, SessionOpened, TurnEvent, TurnInput, TurnService

SYSTEM_PROMPT = (
    "You are a helpful assistant working in a project directory. Your tools read files, "
    "list directories and search text in it (paths are relative to the project); use them "
    "when the question is about the project's files. Answer concisely."
)


_STORE_CODES = frozenset({"store_error", "session_corrupt", "session_conflict",
                          "session_busy"})
"""Failures of the database: the index row is left as it is (writing it would fail too,
or change a row the failed turn must leave alone)."""


@dataclass(frozen=True)
class TurnError:
    """How a turn that ran went wrong: the one line ``nonoka run`` prints, its code for
    ``--json`` and the exit code."""

    code: str
    message: str
    exit_code: int = EXIT_FAILURE

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass
class TurnOutcome:
    """What ``nonoka run`` reports: the session, the answer, the turn's usage, how it ended."""

    session_id: str
    new_session: bool
    output: str
    finish: str
    usage: TurnUsage = field(default_factory=TurnUsage)
    error: TurnError | None = None
    model_finish: str | None = None
    """Why the model stopped its last answer (``length``: it was cut at the output limit)."""

    def as_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "new_session": self.new_session,
                "output": self.output, "usage": self.usage.as_dict(), "finish": self.finish,
                "model_finish": self.model_finish,
                "error": self.error.as_json() if self.error is not None else None}


def model_for(project: Path, explicit: str | None) -> ChatModel:
    """The model to run, or a ``CliError`` (exit 2) that says how to configure one."""
    from nonoka.config import RUN_ASK, configured_model
    from nonoka.llm import resolve_model
    from nonoka.llm.wire import provider_choices
    from nonoka.turn.project import described

    try:
        spec = configured_model(project, explicit, ask=RUN_ASK, providers=provider_choices())
        return resolve_model(spec, known=described(project, spec), project=project)
    except ConfigurationError as exc:
        raise CliError(_see_run_help(str(exc)), exit_code=EXIT_USAGE,
                       code="model_not_configured") from None


def _see_run_help(message: str) -> str:
    return message if "nonoka help models" in message else (
        f"{message}; `nonoka help models` lists the providers and their variables")


async def run_turn(where: Place | Path, message: str, model: ChatModel, *,
                   session_ref: str | None = None, continue_latest: bool = False,
                   at: int | None = None,
                   on_event: EventSink | None = None) -> TurnOutcome:
    """Send ``message`` in a new session, the latest one (``continue_latest``) or
    ``session_ref`` (an id or an unambiguous prefix); ``on_event`` sees the run's events.

    ``at`` runs the turn in a branch of that session holding its first ``at`` entries.
    A damaged database is refused before anything is written to it.
    """
    place = Place.of(where)
    project = place.project
    refuse_if_damaged(place)
    turn = TurnService(open_stores(place), title=title_from(message), metadata={
        "conversation_key": conversation_key([Message(role="user", content=message)]),
        "purpose": Purpose.CHAT, "cwd": str(project), "source": "nonoka run"})
    try:
        session_id = await _pick(turn, session_ref, continue_latest)
        if session_id is not None:
            session_id = await _branch_or_check(turn, session_id, at)
        elif at is not None:
            raise CliError("--at needs the session to branch; add --session ID or -c",
                           exit_code=EXIT_USAGE, code="usage_error")
        return await _run(turn, project, message, model, session_id, on_event)
    finally:
        await turn.close()


async def _pick(turn: TurnService, ref: str | None, latest: bool) -> str | None:
    """The id of the session to continue, or ``None`` for a new one."""
    if ref is not None:
        try:
            return (await find_session(turn.index, ref)).session_id
        except CliError:
            try:  # a session the index never saw (library use)
                if await turn.load(ref.strip()) is not None:
                    return ref.strip()
            except ConfigurationError:
                pass
            raise
    if latest:
        recent = await turn.index.list_sessions(limit=1)
        if not recent:
            raise CliError("there is no session to continue in this project yet; start one "
                           "with: nonoka run \"your message\"", code="not_found")
        return recent[0].session_id
    return None


async def _branch_or_check(turn: TurnService, session_id: str, at: int | None) -> str:
    """The session to run in: a branch at ``at``, or ``session_id`` itself unless its host
    is waiting on tool calls (a turn here would answer them in its stead)."""
    if at is not None:
        try:
            return await turn.fork(session_id, at, reason="nonoka run --at")
        except ConfigurationError as exc:
            raise CliError(f"{exc}; `nonoka sessions show {session_id[:8]}` numbers its "
                           "entries", exit_code=EXIT_USAGE, code="usage_error") from None
    try:
        session = await turn.load(session_id)
    except NonokaError:
        return session_id  # the turn reports it, as for any session it cannot load
    if session is not None and session.status == SessionStatus.PAUSED:
        index, dangling = session.memory.dangling_tool_calls()
        if dangling:
            names = ", ".join(sorted({c.name for c in dangling}))
            short = session_id[:8]
            raise CliError(
                f"session {short} is waiting for the results of tool calls its host made "
                f"({names}); continue it from that host (e.g. OpenCode), or branch it before "
                f"those calls: nonoka run --session {short} --at {index} \"...\"",
                code="session_waiting")
    return session_id


def _prompt_after(message: str) -> Callable[[Session], TurnInput]:
    """What ``message`` brings to a continued session, decided under its lease: a turn
    that failed or was stopped left its message unanswered, and the new message takes
    its place (the person retried, perhaps in other words), so the model never sees two
    in a row. A turn whose process was killed (still ``running``) keeps its question:
    nobody saw it fail, and the new message may well build on it; the model gets both,
    unless the new one only repeats it."""

    def plan(session: Session) -> TurnInput:
        entries = list(session.memory.entries)
        killed = session.status == SessionStatus.RUNNING
        if (entries and entries[-1].role == "user" and session.status in _UNANSWERED
                and (not killed or entries[-1].content == message)):
            return TurnInput("prompt", message, replace=entries[:-1], edit={
                "reason": "unanswered_replaced", "positions": [len(entries) - 1],
                "original": [{"index": len(entries) - 1, "role": "user",
                              "content": entries[-1].content[:2000]}]})
        return TurnInput("prompt", message)

    return plan


_UNANSWERED = frozenset({SessionStatus.FAILED, SessionStatus.CANCELLED,
                         SessionStatus.RUNNING})
"""The statuses a turn that ended without an answer leaves (a killed one: running)."""


async def _run(turn: TurnService, project: Path, message: str, model: ChatModel,
               session_id: str | None, on_event: EventSink | None) -> TurnOutcome:
    agent = Agent(model=model, tools=builtin_tools(project), system_prompt=SYSTEM_PROMPT)

    async def show(event: TurnEvent) -> None:
        if not isinstance(event, SessionOpened):
            await emit(on_event, event)

    plan = TurnInput("prompt", message) if session_id is None else _prompt_after(message)
    outcome = await turn.run(
        agent, Opening(session_id, plan),
        request={"source": "nonoka run", "purpose": Purpose.CHAT, "messages": 1,
                 "tools": list(agent.tool_map), "model": model.name},
        on_event=show)
    reason, result = outcome.finish_reason, outcome.result
    if reason == FINISH_CANCELLED:
        await asyncio.shield(turn.finish(reason))
        raise asyncio.CancelledError
    stopped = result.termination if result is not None else None
    failed_store = outcome.failure is not None and outcome.failure.code in _STORE_CODES
    await turn.finish(reason, *((stopped.limit, stopped.detail) if stopped else ()),
                      refresh=not failed_store)
    sid = outcome.session_id
    if result is None:  # the turn raised: one line, no traceback
        failure = outcome.failure or Failure("failed", "the turn failed")
        raised = _turn_error(failure, model.name, sid)
        raise CliError(raised.message, raised.exit_code, raised.code)
    error: TurnError | None = None
    if outcome.failure is not None:
        error = _turn_error(outcome.failure, model.name, sid)
    elif reason == FINISH_LIMIT and result.termination is not None:
        limit = result.termination.detail or result.termination.limit
        error = TurnError("limit", f"the turn was stopped by a limit: {limit}; continue with: "
                          f"nonoka run --session {result.session_id[:8]} ... (the session "
                          "keeps what it spent)")
    elif reason not in (FINISH_STOP, FINISH_TOOL_CALLS):
        error = TurnError(reason, f"the turn ended with {reason!r}; nonoka sessions show "
                          f"{result.session_id[:8]} has its timeline")
    output = result.output if isinstance(result.output, str) else ""
    return TurnOutcome(session_id=result.session_id, new_session=outcome.new, output=output,
                       finish=reason, usage=outcome.usage, error=error,
                       model_finish=outcome.model_finish)


def _turn_error(failure: Failure, spec: str, sid: str | None) -> TurnError:
    """The failure of a turn in ``nonoka run``'s voice: what to check, by its kind."""
    from nonoka.cli.voice import complaint_of
    from nonoka.errors import StoreError

    where = f" (session {sid[:8]})" if sid else ""
    if failure.code == "model_error":
        from nonoka.llm.wire import provider_advice

        status = _http_status(failure.message)
        advice = ("try again in a while" if failure.retryable and status is None
                  else provider_advice(spec, status))
        again = f"; then continue with: nonoka run --session {sid[:8]} ..." if sid else ""
        return TurnError(failure.code, f"{failure.message.rstrip('. ')}{where}; {advice}"
                         f"{again}", EXIT_BUSY if failure.retryable else EXIT_FAILURE)
    if failure.code in _STORE_CODES:
        complaint = complaint_of(StoreError(failure.message, retryable=failure.retryable))
        if complaint is not None and complaint.code == "database_damaged":
            return TurnError(complaint.code, complaint.message, complaint.exit_code)
    return TurnError(failure.code, f"{failure.message}{where}",
                     EXIT_BUSY if failure.retryable else EXIT_FAILURE)


def _http_status(message: str) -> int | None:
    """The HTTP status a model error names (``... failed HTTP 401: ...``), if any."""
    import re

    found = re.search(r"\bHTTP (\d{3})\b", message)
    return int(found.group(1)) if found else None
