"""``nonoka run``: one turn in this process, recorded like a bridge turn.

No bridge and no provider: the turn runs here, with the model configured for the project
and nonoka's read-only built-in tools. The session, its index row and its timeline go to
the project database through the same ``SessionBook`` the bridge uses, so the session shows
up in ``nonoka sessions`` and can be continued by ``run`` or by a provider later.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonoka.agent import Agent
from nonoka.bookkeeping import SessionBook, TurnUsage, failure_of, finish_reason_of, title_from
from nonoka.cli.common import CliError, find_session, open_stores
from nonoka.cli.tools import builtin_tools
from nonoka.config import configured_model
from nonoka.errors import ConfigurationError
from nonoka.events import EventSink, RunEvent, emit
from nonoka.llm import resolve_model
from nonoka.llm.base import ChatModel
from nonoka.messages import Message
from nonoka.protocol.frames import Purpose, conversation_key
from nonoka.protocol.values import ErrorCode, FinishReason
from nonoka.runner import Runner
from nonoka.store.project import ProjectStores

SYSTEM_PROMPT = (
    "You are a helpful assistant working in a project directory. Your tools read files, "
    "list directories and search text in it (paths are relative to the project); use them "
    "when the question is about the project's files. Answer concisely."
)


@dataclass
class TurnOutcome:
    """What ``nonoka run`` reports: the session, the answer, the turn's usage, how it ended."""

    session_id: str
    new_session: bool
    output: str
    finish: str
    usage: TurnUsage = field(default_factory=TurnUsage)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "new_session": self.new_session,
                "output": self.output, "usage": self.usage.as_dict(), "finish": self.finish,
                "error": self.error}


def model_for(project: Path, explicit: str | None) -> ChatModel:
    """The model to run, or a ``CliError`` (exit 2) that says how to configure one."""
    try:
        return resolve_model(configured_model(project, explicit))
    except ConfigurationError as exc:
        raise CliError(str(exc), exit_code=2) from None


async def run_turn(project: Path, message: str, model: ChatModel, *,
                   session_ref: str | None = None, continue_latest: bool = False,
                   on_event: EventSink | None = None) -> TurnOutcome:
    """Send ``message`` in a new session, the latest one (``continue_latest``) or
    ``session_ref`` (an id or an unambiguous prefix); ``on_event`` sees the run's events."""
    async with open_stores(project) as stores:
        session_id = await _pick(stores, session_ref, continue_latest)
        book = SessionBook(stores, title=title_from(message), metadata={
            "conversation_key": conversation_key([Message(role="user",
                                                                 content=message)]),
            "purpose": Purpose.CHAT, "cwd": str(project), "source": "nonoka run"})
        return await _run(stores, book, project, message, model, session_id, on_event)


async def _pick(stores: ProjectStores, ref: str | None, latest: bool) -> str | None:
    """The id of the session to continue, or ``None`` for a new one."""
    if ref is not None:
        try:
            return (await find_session(stores.index, ref)).session_id
        except CliError:
            runner = Runner(stores.checkpoints)  # a session the index never saw (library use)
            try:
                if await runner.load_session(ref.strip()) is not None:
                    return ref.strip()
            except ConfigurationError:
                pass
            raise
    if latest:
        recent = await stores.index.list_sessions(limit=1)
        if not recent:
            raise CliError("there is no session to continue in this project yet; start one "
                           "with: nonoka run \"your message\"")
        return recent[0].session_id
    return None


async def _run(stores: ProjectStores, book: SessionBook, project: Path, message: str,
               model: ChatModel, session_id: str | None,
               on_event: EventSink | None) -> TurnOutcome:
    runner = Runner(stores.checkpoints)
    agent = Agent(model=model, tools=builtin_tools(project), system_prompt=SYSTEM_PROMPT)
    await book.log("request", {"source": "nonoka run", "purpose": Purpose.CHAT,
                               "messages": 1, "tools": list(agent.tool_map),
                               "model": model.name})
    new = session_id is None
    if session_id is None:
        session = await runner.open_session(agent)
        await runner.save_session(session)
        await book.index(session, model=model.name, created=True)
        session_id = session.session_id
    book.start(session_id)
    await book.log("session", {"new": new, "recovery_reason": None})

    async def sink(event: RunEvent) -> None:
        await emit(on_event, event)
        await book.on_event(event)

    try:
        async with stores.hold(session_id):
            result = await runner.run_react(agent, message, session_id=session_id,
                                            on_event=sink)
    except asyncio.CancelledError:
        await asyncio.shield(book.finish(FinishReason.CANCELLED))
        raise
    except Exception as exc:
        failure = failure_of(exc)
        await book.error(failure.code, failure.message)
        await book.finish(FinishReason.ERROR)
        raise CliError(f"{failure.message} (session {session_id})") from exc
    reason = finish_reason_of(result)
    error = None
    if reason == FinishReason.ERROR:
        error = result.error or "the run failed"
        await book.error(ErrorCode.MODEL_ERROR, error)
    elif reason == FinishReason.LIMIT and result.termination is not None:
        error = f"stopped by a limit: {result.termination.detail or result.termination.limit}"
    await book.finish(reason)
    output = result.output if isinstance(result.output, str) else ""
    return TurnOutcome(session_id=session_id, new_session=new, output=output, finish=reason,
                       usage=book.usage, error=error)

