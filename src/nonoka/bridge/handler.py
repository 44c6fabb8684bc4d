"""One chat request: pick the session, hand the turn to the turn service, report events.

The turn itself (stores, lease, session, runner, index row and timeline) is
``nonoka.turn.service.TurnService``'s; this module adds what only the bridge knows: the
session decision chain, how the host's history maps onto the stored conversation, and
the protocol's events.

The session decision chain (docs/protocol.md §7, "Which session a request runs in" and
"Session lineage"):

1. a title or compaction request → its own session;
2. the host's own conversation id (``host_session_id``) → that conversation's line of
   sessions (``_host_line``), before anything is judged by content;
3. a history with no answer yet that a stored first turn of this project holds
   unanswered, every part of every message alike → that session (a host retrying a
   failed first turn); else ``new_session`` → a new session;
4. the candidates — the session ``session_id`` names, then the project's sessions with
   the ``conversation_key`` (and those whose recorded compaction summary the history
   carries), most recently active first — are classified (``nonoka.bridge.choose``):
   the first the history continues or edits wins; else the one sharing the longest
   prefix gets a branch at the point where the histories part (warning
   ``session_branched``);
5. nothing relates: a new session, seeded with the history, with a warning when the
   request looked like a continuation.

Every rule that finds a session by what a history says (2's first sight of a host
conversation, 3, 4) looks only at the sessions of the request's project (its ``cwd``,
``choose.in_project``): projects sharing one database never reach each other's data.
The history is the request's messages less a final assistant message the host adds for
this step (``nonoka.bridge.host_step``), which goes to the model, not into the session.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nonoka import faults
from nonoka.bridge.choose import (
    OWNER_SCOPE_KEY,
    Match,
    Verdict,
    compacted_sessions,
    in_project,
    judge,
    remember_summary,
    summaries_of,
    unanswered_first_turn,
)
from nonoka.bridge.early import Dispatched
from nonoka.bridge.history import split_for_new_session, turn_input, whole_prompt
from nonoka.bridge.host_step import StepModel, host_step
from nonoka.bridge.reconcile import Reconciliation, classify
from nonoka.bridge.reuse import BridgeReuse
from nonoka.errors import (
    ConfigurationError,
    Failure,
    ToolResultMismatchError,
    WorkspaceError,
    failure_of,
)
from nonoka.events import (
    ModelCalled,
    ReasoningDelta,
    RunWarning,
    ToolCallFinished,
    ToolCallRequested,
)
from nonoka.events import TextDelta as RunTextDelta
from nonoka.llm.base import CallOptions, ChatModel
from nonoka.protocol.frames import Purpose, is_continuation
from nonoka.protocol.models import (
    AssistantMetadata,
    BaseEvent,
    ChatRequest,
    ErrorEvent,
    Finish,
    FinishTermination,
    ReasoningDeltaEvent,
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
    ExecutedBy,
    FinishReason,
    RecoveryReason,
    WarningCode,
)
from nonoka.runtime.agent import Agent
from nonoka.runtime.paradigms.env import RunResult
from nonoka.runtime.session import Session
from nonoka.runtime.tools import host_tool
from nonoka.state.ids import validate_session_id
from nonoka.state.ledger import RuntimeLimits
from nonoka.state.messages import Message
from nonoka.state.session_state import SessionStatus
from nonoka.store.records import SessionRecord
from nonoka.turn.journal import TurnUsage, title_from
from nonoka.turn.outcome import TurnOutcome
from nonoka.turn.project import configured
from nonoka.turn.service import Opening, SessionOpened, TurnEvent, TurnInput, TurnService

Send = Callable[[BaseEvent], None]


class BridgeHandler:
    """Handles one ``chat`` request; every event goes through ``send``."""

    def __init__(self, request: ChatRequest, send: Send,
                 raw: dict[str, object] | None = None,
                 early: Dispatched | None = None, reuse: BridgeReuse | None = None,
                 owner_scope: str | None = None) -> None:
        self.request = request
        self._owner_scope = owner_scope
        """Whose requests these are, when a server serves several owners (``nonoka
        serve``'s keys): recorded with a new session, and the only owner whose sessions
        a rule on the history's content may find (``None``: the local owner)."""
        self._reuse = reuse if reuse is not None else BridgeReuse()
        """What the process keeps between requests (a new one: nothing kept)."""
        self._send = send
        self._raw = raw
        """The request as it arrived (decoded JSON); its early dispatch is judged on it."""
        self._early = early
        """What the early dispatch sent for this request, if anything."""
        self._agent: Agent | None = None
        self._answered: Session | None = None
        """The session as the answered turn left it."""
        self._turn: TurnService | None = None
        self._session: Session | None = None
        """A continued session as stored when the turn took its lease."""
        self._streamed = False
        """Whether this request has sent the host any text or tool call yet."""
        self._reasoning = "reasoning" in (request.protocol.features or ())
        """Whether the provider asked for reasoning events."""
        self.key, self._warnings = _checked_key(request.conversation_key)
        """The request's conversation key, or ``None`` when it was missing or malformed."""
        self.history: list[Message] = list(request.messages)
        """The host's history as compared with the stored conversation: the request's
        messages less ``step``."""
        self.step: Message | None = None
        """The final assistant message the host sent for this step only (``host_step``)."""
        self._project = ""
        """The request's project: its resolved working directory."""
        self._summaries: list[str] = []
        """Digests of the compaction summaries recorded for the chosen conversation."""
        self._summaries_by_id: dict[str, list[str]] = {}
        self._considered: set[str] = set()
        self._judged: tuple[str, int, Reconciliation] | None = None
        """The chosen session's id and revision when the decision chain classified the
        history against it, and that classification (reused under the lease when the
        session has not changed since)."""

    def send(self, event: BaseEvent) -> None:
        self._send(event.model_copy(update={"request_id": self.request.request_id}))
        faults.point("bridge.send")

    async def handle(self) -> None:
        """Run the request; always ends with exactly one ``finish`` event."""
        try:
            cwd = self._cwd()
            self._project = str(cwd)
            self.history, self.step = host_step(self.request.messages)
            reuse = self._reuse
            model = configured(cwd, self.request.model, passes=reuse.passes,
                               headers=self.request.headers, workers=reuse.workers,
                               host_retries="host_retries" in (
                                   self.request.protocol.features or ()))
            if self._early is not None:
                self._early.offer(model)
            turn = self._turn = await TurnService.open_kept(
                cwd, reuse.kept, title=_title(self.request), metadata=self._metadata(cwd),
                reuse=reuse.store, passes=reuse.passes)
        except Exception as exc:  # the process must answer, whatever went wrong
            await self._fail(failure_of(exc))
            return
        try:
            outcome = await self._run(turn, model)
            if self.request.purpose == Purpose.COMPACTION:
                await self._remember_compaction(outcome)
            elif self.request.purpose == Purpose.TITLE:
                await self._name_title_session(outcome)
            await self._report(outcome)
            if outcome.result is not None:
                self._answered = outcome.result.session
        except asyncio.CancelledError:
            await self._finish(FinishReason.CANCELLED)
        except Exception as exc:
            await self._fail(failure_of(exc))
        finally:
            await self._after_answer(model)
            await turn.close()

    # -- set-up ---------------------------------------------------------------------------

    def _metadata(self, cwd: Path) -> dict[str, object]:
        """What a new session's index row records of the request."""
        request = self.request
        metadata: dict[str, object] = {"conversation_key": self.key,
                                       "purpose": request.purpose, "cwd": str(cwd)}
        if request.host_session_id and request.purpose == Purpose.CHAT:
            metadata["host_session_id"] = request.host_session_id
        if request.host_parent_session_id and request.purpose == Purpose.CHAT:
            metadata["host_parent_session_id"] = request.host_parent_session_id
        if request.purpose == Purpose.COMPACTION and request.session_id:
            metadata["compaction_of"] = request.session_id  # never the chat's own session
        if self._owner_scope is not None:
            metadata[OWNER_SCOPE_KEY] = self._owner_scope
        return metadata

    def _cwd(self) -> Path:
        cwd = Path(self.request.cwd or os.getcwd())
        if not cwd.is_dir():
            raise WorkspaceError(f"cwd {str(cwd)!r} is not a directory; send the workspace path")
        return cwd.resolve()

    def _limits(self) -> RuntimeLimits | None:
        limits = self.request.limits
        if limits is None:
            return None
        return RuntimeLimits(**limits.model_dump(exclude_none=True))

    @property
    def turn(self) -> TurnService:
        assert self._turn is not None
        return self._turn

    # -- the run ----------------------------------------------------------------------------

    async def _run(self, turn: TurnService, model: ChatModel) -> TurnOutcome:
        request = self.request
        tools = [host_tool(t.name, t.description, t.parameters) for t in request.tools]
        step = self.step
        agent = self._agent = Agent(model=model if step is None else StepModel(model, step),
                                    tools=tools, call_options=_call_options(request))
        early = self._early
        logged: dict[str, object] = {
            "purpose": request.purpose, "messages": len(request.messages),
            "tools": [t.name for t in request.tools],
            "request_id": request.request_id, "model": model.name}
        if step is not None:  # what the model is sent last, and the session does not keep
            logged["host_step"] = {"role": "assistant", "content": step.content[:2000]}
        return await turn.run(
            agent, self._decide, limits=self._limits(), request=logged,
            lease_owner=early.lease_owner if early else None, on_event=self._on_turn_event)

    def _plan(self, session: Session) -> TurnInput:
        """What the host's history brings to the session, as stored under the lease."""
        self._session = session
        if self._early is not None:
            self._early.share_text(session, self._reuse.passes.wire)
        messages = self.history
        judged = self._judged
        if judged is not None and judged[:2] == (session.session_id, session.revision):
            rec = judged[2]
        else:
            rec = classify(session.memory.entries, messages, self._summaries,
                           self._reuse.comparison)
        return turn_input(rec, session.memory.entries, messages)

    async def _decide(self) -> Opening:
        """The decision chain's answer, with what the turn brings to the chosen session."""
        choice = await self._pick()
        warnings = [*self._warnings, *choice.warnings]
        if choice.session is not None:
            return Opening(choice.session, self._plan, recovery_reason=choice.reason,
                           forked_from=choice.forked_from, fork_point=choice.fork_point,
                           warnings=warnings,
                           revision_seen=self._revision_seen(choice.session))
        seed, prompt = split_for_new_session(self.history)
        last = self.history[-1]
        plan = TurnInput("prompt", prompt, prompt_message=whole_prompt(last)
                         ) if prompt is not None else TurnInput()
        return Opening(None, plan, seed=seed, warnings=warnings)

    def _revision_seen(self, session: Session | str) -> int | None:
        """The request's ``revision``, when it speaks of this very session."""
        request = self.request
        sid = session if isinstance(session, str) else session.session_id
        return request.revision if request.session_id == sid else None

    async def _pick(self) -> _Choice:
        """The session the turn runs in (``None``: a new one), and why."""
        request = self.request
        if request.session_id:
            try:
                validate_session_id(request.session_id)
            except ConfigurationError as exc:
                raise ConfigurationError(f"session_id: {exc}") from None
        if request.purpose == Purpose.TITLE:
            return _Choice(await self._title_session())
        if request.purpose == Purpose.COMPACTION:
            # Its own session, never the chat's: the provider must not adopt its id.
            return _Choice()
        continuation = is_continuation(self.history)
        if request.host_session_id:  # the host's own id first, before any rule on content
            return await self._host_line(request.host_session_id, continuation)
        if not continuation:
            retried = await self._unanswered_first_turn()
            if retried is not None:
                return _Choice(retried)
        if request.new_session:
            return _Choice()
        named = await self._load(request.session_id) if request.session_id else None
        if not continuation:  # a history that holds no answer continues nothing stored
            return _Choice(named)
        verdict = await self._verdict(named)
        if verdict.found is not None:
            found = verdict.found.session
            self._judged = (found.session_id, found.revision, verdict.found.rec)
            self._summaries = self._summaries_by_id.get(found.session_id, [])
            return _Choice(found, None if found is named else self._recovery(named))
        if verdict.branch is not None:
            return await self._branch(verdict.branch)
        return await self._unrelated(named, continuation)

    async def _host_line(self, host: str, continuation: bool) -> _Choice:
        """The session of the host's own conversation ``host``: identity first, content
        second. A host conversation's sessions are judged first (it goes on in one, or
        branches from it); one seen for the first time that shares its history with a
        stored conversation is a fork of it — a branch at the point where they part,
        never a continuation of another host conversation's session."""
        memo = self._reuse.comparison
        mine = await self.turn.host_sessions(host)
        if mine:
            verdict = judge(await self._candidates(None, mine), self.history, memo)
            if verdict.found is not None:
                return self._found(verdict.found, None)
            if verdict.branch is not None:
                return await self._branch(verdict.branch, host)
            return _Choice()  # its history no longer relates to what is stored: anew
        if not continuation:
            return _Choice()
        named = await self._load(self.request.session_id) if self.request.session_id else None
        verdict = await self._verdict(named)
        match = verdict.found or verdict.branch
        if match is None:
            return await self._unrelated(named, continuation)
        record = await self.turn.index.get_session(match.session.session_id)
        owner = record.host_session_id if record is not None else None
        if verdict.found is not None and owner is None:
            await self.turn.tag_host_session(match.session.session_id, host)
            return self._found(verdict.found, named)  # made before the host said its id
        return await self._branch(match, host, reason="host_fork")

    def _found(self, found: Match, named: Session | None) -> _Choice:
        session = found.session
        self._judged = (session.session_id, session.revision, found.rec)
        self._summaries = self._summaries_by_id.get(session.session_id, [])
        reason = None if named is None or session is named else self._recovery(named)
        return _Choice(session, reason)

    async def _verdict(self, named: Session | None) -> Verdict:
        """Judge the named session and the conversation key's sessions; failing those,
        the sessions whose recorded compaction summary the history carries (a history
        that starts from a summary no longer has the conversation's key)."""
        index, messages = self.turn.index, self.history
        named_id = named.session_id if named is not None else None
        keyed = [r.session_id for r in await index.find_by_conversation_key(self.key)
                 if r.session_id == named_id or (
                     in_project(r, self._project) and not _made_by_hand(r))] if self.key else []
        memo = self._reuse.comparison
        verdict = judge(await self._candidates(named, keyed), messages, memo)
        if verdict.found is not None:
            return verdict
        compacted = await compacted_sessions(index, messages, self._project,
                                             owner_scope=self._owner_scope)
        later = judge(await self._candidates(None, compacted), messages, memo)
        return later if later.found is not None or verdict.branch is None else verdict

    async def _candidates(self, named: Session | None,
                          ids: list[str]) -> list[tuple[Session, list[str]]]:
        """The sessions this history may belong to (``named`` first), each considered once
        per request, with the compaction summaries recorded for it."""
        index = self.turn.index
        out: list[tuple[Session, list[str]]] = []
        seen = self._considered
        for session_id in ids if named is None else [named.session_id, *ids]:
            if session_id in seen:
                continue
            seen.add(session_id)
            session = named if named is not None and session_id == named.session_id else (
                await self.turn.load(session_id))
            if session is None:
                continue
            summaries = summaries_of(await index.get_session(session_id))
            self._summaries_by_id[session_id] = summaries
            out.append((session, summaries))
        return out

    def _recovery(self, named: Session | None) -> str:
        if not self.request.session_id:
            return RecoveryReason.SESSION_ID_MISSING
        return (RecoveryReason.SESSION_NOT_FOUND if named is None
                else RecoveryReason.SESSION_MISMATCH)

    async def _branch(self, match: Match, host: str | None = None,
                      reason: str | None = None) -> _Choice:
        """A branch of ``match``'s session at the point where the histories part (for
        a host conversation ``host``, the branch is its line)."""
        parent, point = match.session.session_id, match.rec.point
        why = reason or ("turns_the_host_never_saw" if not match.rec.new
                         else "history_diverged")
        branch = await self.turn.fork(parent, point, reason=why, host_session_id=host)
        self._summaries = self._summaries_by_id.get(parent, [])
        code = WarningCode.SESSION_BRANCHED
        warning = RunWarning(code, WARNING_CODES[code], {
            "forked_from": parent, "fork_point": point, "reason": why,
            "requested_session_id": self.request.session_id})
        return _Choice(branch, forked_from=parent, fork_point=point, warnings=[warning])

    async def _unrelated(self, named: Session | None, continuation: bool) -> _Choice:
        """No stored conversation relates to the history: a new session."""
        request = self.request
        if request.session_id:
            code = (WarningCode.SESSION_NOT_FOUND_STARTING_NEW if named is None
                    else WarningCode.SESSION_MISMATCH_STARTING_NEW)
            return _Choice(warnings=[RunWarning(code, WARNING_CODES[code], {
                "requested_session_id": request.session_id})])
        if not continuation:
            return _Choice()
        recent = [r for r in await self.turn.index.list_sessions(limit=50)
                  if in_project(r, self._project)][:5]
        code = WarningCode.SESSION_ID_MISSING_STARTING_FRESH
        return _Choice(warnings=[RunWarning(code, WARNING_CODES[code], {"recent_sessions": [
            {"session_id": r.session_id, "title": r.title, "last_active": r.last_active}
            for r in recent]})])

    async def _unanswered_first_turn(self) -> Session | None:
        """A stored first turn of this very history that never got an answer (a host
        retrying a failed first turn gets the same session back, not one per retry):
        one of this project's, that no host conversation holds (a host that says its
        id finds its own sessions by it), with every part of every message alike."""
        if not self.key:
            return None
        for record in await self.turn.index.find_by_conversation_key(self.key):
            if record.host_session_id or not in_project(record, self._project):
                continue
            session = await self.turn.load(record.session_id)
            if session is not None and unanswered_first_turn(session, self.history):
                return session
        return None

    async def _title_session(self) -> Session | None:
        if self.request.session_id:
            record = await self.turn.index.get_session(self.request.session_id)
            if record is not None and record.purpose == Purpose.TITLE:
                return await self._load(record.session_id)
        return None

    async def _load(self, session_id: str) -> Session | None:
        try:
            return await self.turn.load(session_id)
        except ConfigurationError as exc:
            raise ConfigurationError(f"session_id: {exc}") from exc

    async def _name_title_session(self, outcome: TurnOutcome) -> None:
        """A title session is listed by the title it made, not by the request's text."""
        result = outcome.result
        if outcome.session_id is None or result is None or not result.success or not \
                isinstance(result.output, str) or not result.output.strip():
            return
        try:
            await self.turn.retitle(outcome.session_id, title_from(result.output))
        except Exception as exc:  # the host still gets its title
            print(f"nonoka: recording the title: {exc}", file=sys.stderr)

    async def _remember_compaction(self, outcome: TurnOutcome) -> None:
        """Record a compaction's summary with the chat session it summarises, so the chat
        request that starts from it continues that session (edited, not a new one)."""
        chat_id = self.request.session_id
        result = outcome.result
        if not chat_id or result is None or not result.success or not isinstance(
                result.output, str) or not result.output.strip():
            return
        try:
            if await remember_summary(self.turn.index, chat_id, result.output):
                await self.turn.note(chat_id, "compaction", {
                    "session_id": outcome.session_id})
        except Exception as exc:  # the host still gets its summary
            print(f"nonoka: recording the compaction: {exc}", file=sys.stderr)

    async def _after_answer(self, model: ChatModel) -> None:
        """Give back the early dispatch's lease, and store the next turn's template.

        The host has its answer by now; a failure here is only reported.
        """
        from nonoka.bridge.next_call import remember_next_call

        try:
            if self._early is not None:
                await self._early.release_lease(self.turn)
            session = self._answered
            if session is not None and self._raw is not None and self._agent is not None:
                reuse = self._reuse
                await remember_next_call(self.turn.next_calls, session, model,
                                         list(self._agent.tool_map.values()),
                                         self._agent.call_options, self._raw,
                                         self._early, memo=reuse.template,
                                         wire=reuse.passes.wire)
        except Exception as exc:
            print(f"nonoka: after answering: {exc}", file=sys.stderr)

    # -- events -----------------------------------------------------------------------------

    def _on_turn_event(self, event: TurnEvent) -> None:
        """Tell the provider (the turn service records the event once it is told)."""
        if isinstance(event, RunTextDelta | ToolCallRequested):
            self._streamed = True
        if isinstance(event, SessionOpened):
            self.send(SessionInit(session_id=event.session_id,
                                  recovered=event.recovery_reason is not None,
                                  recovery_reason=event.recovery_reason,
                                  forked_from=event.forked_from, fork_point=event.fork_point))
        elif isinstance(event, RunTextDelta):
            self.send(TextDelta(text=event.text))
        elif isinstance(event, ReasoningDelta):
            if self._reasoning:
                self.send(ReasoningDeltaEvent(text=event.text))
        elif isinstance(event, ToolCallRequested):
            call = event.call
            self.send(ToolCallEvent(tool_call_id=call.id, tool_name=call.name,
                                    arguments=call.arguments, executed_by=event.executed_by,
                                    provider_metadata=call.provider_metadata))
        elif isinstance(event, ToolCallFinished):
            call = event.call
            self.send(ToolResultEvent(tool_call_id=call.id, tool_name=call.name,
                                      content=event.content, is_error=event.is_error))
        elif isinstance(event, ModelCalled):
            usage = event.usage
            self.send(UsageEvent(input_tokens=usage.input_tokens,
                                 output_tokens=usage.output_tokens, cost_usd=usage.cost_usd,
                                 cache_read_tokens=usage.cache_read_tokens or None,
                                 cache_write_tokens=usage.cache_write_tokens or None,
                                 reasoning_tokens=usage.reasoning_tokens or None))
            if self._reasoning and (event.reasoning or event.provider_metadata):
                self.send(AssistantMetadata(reasoning=list(event.reasoning),
                                            provider_metadata=event.provider_metadata))
        elif isinstance(event, RunWarning):
            self.send(WarningEvent(code=event.code, message=event.message,
                                   details=event.details))

    # -- finishing --------------------------------------------------------------------------

    async def _report(self, outcome: TurnOutcome) -> None:
        """Tell the host how the turn ended (the service has logged any failure)."""
        termination = None
        if outcome.result is not None:
            await self._replay(outcome.result)
            term = outcome.result.termination
            termination = (FinishTermination(reason=term.reason, detail=term.detail,
                                             limit=term.limit) if term is not None else None)
        if outcome.failure is not None:
            self._send_error(outcome.failure)
        await self._finish(outcome.finish_reason, termination, outcome.model_finish)

    async def _finish(self, reason: str, termination: FinishTermination | None = None,
                      model_finish: str | None = None) -> None:
        # The turn is over: nothing claims the early request any more.
        outcome = self._early.settle() if self._early is not None else None
        usage = TurnUsage()
        if self._turn is not None:
            if outcome is not None:  # written with ``finish``
                self._turn.journal.hold("early_request", {"outcome": outcome})
            await self._turn.finish(reason, *((termination.limit, termination.detail)
                                              if termination is not None else ()))
            usage = self._turn.journal.usage
        revision = self._turn.journal.entries if self._turn is not None else None
        totals = {name: value or None if name.endswith(("read_tokens", "write_tokens",
                                                            "reasoning_tokens")) else value
                  for name, value in usage.as_dict().items()}
        self.send(Finish(finish_reason=reason, usage=UsageTotals(**totals),
                         termination=termination, model_finish=model_finish,
                         revision=revision))

    async def _fail(self, failure: Failure) -> None:
        """End the request with an error the turn service did not see."""
        if self._turn is not None:
            await self._turn.journal.error(failure.code, failure.message)
        self._send_error(failure)
        await self._finish(FinishReason.ERROR)

    def _send_error(self, failure: Failure) -> None:
        details = {"provider": failure.provider} if failure.provider else {}
        self.send(ErrorEvent(code=failure.code, message=failure.message,
                             retryable=failure.retryable, details=details))

    async def _replay(self, result: RunResult) -> None:
        """Send the host a stored answer it never received.

        A process that died after storing the turn's answer (text, or host tool calls)
        but before the host read ``finish`` leaves the host retrying the same request. The
        turn is not run again: the host gets what the session already holds.
        """
        if self._streamed or self._session is None or self.history[-1].role == "assistant":
            return
        entries = self._session.memory.entries
        start = max((i for i, e in enumerate(entries) if e.role in ("user", "tool")),
                    default=-1) + 1
        answers = [e for e in entries[start:] if e.role == "assistant"]
        pending = {c.id for c in result.pending_tool_calls}
        if result.status != SessionStatus.COMPLETED and not pending:
            return
        stored = len(entries)
        if answers and await self._replayed_before(stored):
            raise ToolResultMismatchError(
                f"the host sent again the request whose stored answer was already replayed "
                f"to it (session {self._session.session_id}, {stored} entries), and nothing "
                "was added since: the answer is not sent again; send the tool results it "
                "asks for, or a new message")
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
            await self.turn.journal.log("replay", {"entries": len(answers),
                                                   "tool_calls": replayed,
                                                   "stored": stored})

    async def _replayed_before(self, stored: int) -> bool:
        """Whether this session's last replay was made with as many entries stored as
        now: a host that answers a replay by sending the same request again, nothing
        added, would be answered from storage forever."""
        assert self._session is not None
        for event in reversed(await self.turn.recent_events(self._session.session_id, 20)):
            if event.kind == "replay":
                return event.data.get("stored") == stored
        return False


@dataclass(frozen=True)
class _Choice:
    """What the decision chain chose: a session to continue (``None``: a new one)."""

    session: Session | str | None = None
    reason: str | None = None
    forked_from: str | None = None
    fork_point: int | None = None
    warnings: list[RunWarning] = field(default_factory=list)


HAND_MADE = frozenset({"nonoka sessions fork", "nonoka run --at", "nonoka ui"})
"""The fork reasons of branches a person made: such a branch belongs to the person, and
a host's history lands in it only when the request names it."""


def _made_by_hand(record: SessionRecord) -> bool:
    return record.metadata.get("fork_reason") in HAND_MADE


def _title(request: ChatRequest) -> str:
    for message in request.messages:
        if message.role == "user" and message.content.strip():
            return title_from(message.content)
    return ""


def _checked_key(key: str | None) -> tuple[str | None, list[RunWarning]]:
    """The conversation key if it is one (64 lower-case hex digits, docs/protocol.md §7),
    else ``None`` and a warning: anything else is a provider bug, and must not become a
    lookup key."""
    if key is None or (len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
        return key, []
    code = WarningCode.CONVERSATION_KEY_IGNORED
    return None, [RunWarning(code, WARNING_CODES[code], {"length": len(key)})]


def _call_options(request: ChatRequest) -> CallOptions | None:
    """The request's call options as the model port takes them."""
    spec = request.options
    if spec is None:
        return None
    return CallOptions(**spec.model_dump(exclude={"extra"}), extra=dict(spec.extra))
