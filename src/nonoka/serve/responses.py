"""The Responses API over nonoka's sessions: create, get, delete, input items.

A response is a point on a session line. Without ``previous_response_id`` its input is
the whole history (Codex, the AI SDK with ``store: false``), placed on a line by the
Chat Completions rules (``nonoka.serve.lines``): it continues the session it extends,
branches one it parts from, or starts a new one. With one, it continues from that
response's point: in the same session when the point is the session's tip, checked
under the session's lease; otherwise in a branch made there (nonoka's branches share
their parent's entries: nothing is copied), so the model is sent exactly the path from
the root to that point and nothing of its siblings. The turn itself is the turn
service's, as for every front end, so ``nonoka sessions`` and ``nonoka ui`` see every
response as the entries of a session.

``store: false`` with ``previous_response_id`` runs the turn in a memory store, seeded
with the path it continues: nothing is written. Without one, the exchange is kept on its
line like any other (nonoka's record of what the client did), but its response is not
found by its id (``GET`` 404, as OpenAI answers for an unstored response).

``DELETE`` takes a response out of the API (``GET``, ``input_items`` and
``previous_response_id`` no longer find it; the session index row lists it under
``serve_deleted``); its entries stay in the session, which other responses may
continue, until the session itself is deleted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from nonoka.errors import ConfigurationError, Failure
from nonoka.events import ModelCalled, ReasoningDelta, TextDelta, ToolCallFinished
from nonoka.llm.base import ChatModel
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.runtime.agent import Agent
from nonoka.runtime.runner import Runner
from nonoka.runtime.session import Session
from nonoka.serve import cancels
from nonoka.serve.additional import carried_tools
from nonoka.serve.as_functions import Calls
from nonoka.serve.compaction import PROMPT as COMPACT_PROMPT
from nonoka.serve.compaction import compaction_item, read_compaction
from nonoka.serve.conversations import Conversations, Found, hidden_entries
from nonoka.serve.errors import (
    SERVER,
    ApiError,
    api_error,
    failure_error,
    invalid,
    not_found,
    previous_not_found,
)
from nonoka.serve.hosted import Wired, host_tools, offered, refusal
from nonoka.serve.ids import ResponsePoint, new_point, parse_item_id, parse_response_id
from nonoka.serve.included import IMAGE_URLS, included, query_include, upstream
from nonoka.serve.inputs import (
    CreateRequest,
    messages_of,
    parse_create,
    plan,
    repeats,
    resent,
    resolved,
)
from nonoka.serve.items import entry_items
from nonoka.serve.journal import FINAL, Live, final_event, stored_events
from nonoka.serve.keys import LOCAL, OWNER_KEY, current_owner, owner_of_record
from nonoka.serve.lines import (
    LineDecision,
    answered_before,
    latest_of_line,
    line_host,
    line_lock,
    line_signal,
    proven_summaries,
)
from nonoka.serve.marks import marks_of
from nonoka.serve.model import Answering, KeptPasses, Models, StampedModel
from nonoka.serve.reasoning import INCLUDE as SEALED
from nonoka.serve.reasoning import wants_sealed
from nonoka.serve.record import (
    DELETED,
    INCOMPLETE,
    RESPONSE_EVENT,
    Asked,
    Located,
    input_end,
    left_of,
    locate,
    resource,
)
from nonoka.serve.stream import Emit, ResponseEvents
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message
from nonoka.state.prefix_memo import ConversationPasses
from nonoka.store.leases import (
    hold_lease,
    holder_is_dead,
    lease_wait_from_env,
    new_lease_owner,
)
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.turn.journal import title_from
from nonoka.turn.outcome import TurnOutcome
from nonoka.turn.service import (
    Chooser,
    Opening,
    SessionOpened,
    TurnEvent,
    TurnInput,
    TurnService,
)

FORK_REASON = "previous_response_id"
RECENT_EVENTS = 500
"""Timeline entries read first to find a response without an answer (its turn is usually
the session's last); the whole timeline when they do not name it."""
BRANCHED = "serve_branched"
"""A timeline entry naming a response made in a branch of this session, with its
request's digests: a retry finds it from the response it continues, after a restart."""
RETRIES_KEPT = 4096
"""Recent requests whose retry digests this process keeps in memory."""
RETRY_SESSIONS = 8
"""The owner's most recently active sessions whose timelines a retry of a request that
names no session (no ``previous_response_id``, no ``conversation``) is looked for in,
when this process does not know it (it restarted, or another process served it): a
client retries within seconds, while its first request's session is among the newest."""
RETRY_SESSIONS_LISTED = 64
"""Index rows read to find them (every owner's sessions share the index)."""
RETRY_PURPOSES = ("chat", "compaction")
"""The sessions a response is made in: a chat's, and a compaction's own (a Codex
thread's ``/v1/responses/compact``), whose retry is looked for there too."""
RETRY_SESSION_EVENTS = 16
"""The newest timeline rows of each of those sessions read: the response a retry repeats
is its session's last (a turn logs five or so rows), else the client went on without it
and its retry is no retry. A client sending a fresh ``Idempotency-Key`` with every
request pays this on each: reading whole timelines cost 41 ms a request with eight
500-row sessions, these rows well under one."""
ALL_EVENTS = 1 << 62
"""Why a branch was made: a response continued from a point that is not its tip."""


class SessionLocks:
    """One lock per session a request of this process runs or changes, so requests for
    one session wait for each other here instead of finding its lease taken."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


@dataclasses.dataclass
class _Request:
    """One create request on its way through."""

    given: CreateRequest
    asked: Asked
    seed: list[Message]
    turn_input: TurnInput
    agent: Agent
    run: Answering
    events: ResponseEvents | None
    previous: Located | None
    passes: ConversationPasses
    """Where the turn's passes over its conversation stopped (its model's too)."""
    retry: Retry | None = None
    again: ResponsePoint | None = None
    """The response a retry makes again in place (its turn failed or was cut short)."""
    conversation: Found | None = None
    """The conversation the response runs in."""
    line: LineDecision | None = None
    """How a whole-history request was placed on a session line (``nonoka.serve.lines``)."""
    compaction: bool = False
    """The request is a compaction (its answer is a summary, given as a ``compaction``
    item): of a whole history on a named line, it runs in a session of its own."""
    compactions: tuple[tuple[str, str], ...] = ()
    """The request's own ``compaction`` items, as ``(response id, summary)``."""


@dataclasses.dataclass(frozen=True)
class Retry:
    """How a create request may repeat an earlier one: its body's digest, its
    ``Idempotency-Key``'s, and whether the client says it is a retry
    (``x-stainless-retry-count`` above 0). Digests include the owner."""

    body: str
    key: str | None = None
    retried: bool = False
    signal: str | None = None
    """The client's name for its conversation (``nonoka.serve.lines.line_signal``),
    which places a request without ``previous_response_id`` on a session line."""

    @property
    def wanted(self) -> str | None:
        """The digest an earlier response must have logged to be this request's."""
        return self.key if self.key is not None else (self.body if self.retried else None)


def retry_of(body: Any, headers: Mapping[str, str]) -> Retry:
    """The retry identity of a create request (``headers``: lower-case names)."""
    owner = current_owner()
    shown = {k: v for k, v in body.items() if k != "stream"} if isinstance(body, dict) \
        else body
    canonical = json.dumps(shown, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    key = headers.get("idempotency-key", "").strip()
    count = headers.get("x-stainless-retry-count", "").strip()
    return Retry(_digest(owner, "body", canonical),
                 _digest(owner, "key", key) if key else None,
                 count.isdigit() and int(count) > 0, line_signal(headers, body))


def _answering(body: Any, given: CreateRequest, asked: Asked, model: ChatModel,
               carried: Sequence[dict[str, Any]] = ()) -> Answering:
    """The turn's shared state: with the request's hosted, custom and namespace tools and
    its ``include`` for an ``openai-responses:`` model, which alone takes them (another
    model refuses hosted tools: ``nonoka.serve.hosted.refusal``, and is given custom and
    namespace tools as functions: ``nonoka.serve.as_functions``). ``carried``: the tools
    of the conversation's ``additional_tools`` items (``nonoka.serve.additional``)."""
    responses_api = isinstance(model, OpenAIResponsesModel)
    refused = refusal(given.tools, asked.model, responses_api) or \
        refusal(carried, asked.model, responses_api, "additional tools")
    if refused is not None:
        raise refused
    run = Answering(asked, sealed_reasoning=wants_sealed(body))
    if responses_api:
        run.wired = Wired.of(given.tools, carried)
        run.include = tuple(upstream(given.include))
    else:
        run.calls = Calls.of([*given.tools, *carried])
    return run


def _triggers_compaction(body: Any) -> bool:
    """Whether a create request's input ends with a ``compaction_trigger`` item."""
    items = body.get("input") if isinstance(body, dict) else None
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) and \
        items[-1].get("type") == "compaction_trigger"


def _digest(owner: str, kind: str, text: str) -> str:
    return hashlib.sha256(f"{owner}\0{kind}\0{text}".encode()).hexdigest()[:32]


class Responses:
    """The Responses API of one project's stores."""

    def __init__(self, stores: ProjectStores, models: Models, project: Path,
                 locks: SessionLocks | None = None) -> None:
        self.stores = stores
        self.models = models
        self.project = project
        self.locks = locks if locks is not None else SessionLocks()
        self.runner = Runner(stores.checkpoints)
        self.passes = KeptPasses()
        self.conversations = Conversations(self)
        self.retries: OrderedDict[str, str] = OrderedDict()
        """Recent requests' retry digests (``Retry``), and the response each made."""
        self.streams: dict[str, Live] = {}
        """The streams of the background responses this process is making."""
        self.background: dict[str, asyncio.Task[Any]] = {}
        """The background responses this process is making, by id (``cancel``)."""
        self.running: dict[str, tuple[asyncio.Event, dict[str, Any], str]] = {}
        """The responses this process is making: when each ends, its first form (``GET``
        gives it meanwhile; a continuation of it waits for its end), and its owner."""
        self.watchers: dict[str, asyncio.Task[None]] = {}
        """The background responses this process is making, each watched for a cancel
        asked in another process (``nonoka.serve.cancels``)."""

    # -- create ------------------------------------------------------------------------------

    async def create(self, body: Any, emit: Emit | None = None,
                     retry: Retry | None = None, *, compaction: bool = False
                     ) -> dict[str, Any]:
        """Run a response; its events go to ``emit`` (a stream) as they happen. A request
        that repeats an earlier one (``retry``) gets that response: as it was stored, or
        made again in place when its turn failed or was cut short. ``compaction``: the
        response is a compaction's summary (``compact``).

        Raises ``ApiError`` for a request that cannot start; once ``response.created`` is
        emitted, a failure ends the stream with ``response.failed`` instead (without a
        stream, it is raised).
        """
        if _triggers_compaction(body):
            return await self._compact_in_turn(body, emit, retry)
        given = parse_create(body)
        spec = self.models.pick(given.model)
        asked = Asked(model=spec, created_at=int(time.time()),
                      previous_response_id=given.previous_response_id,
                      instructions=given.instructions, tools=given.tools, params=given.params,
                      stored=given.store)
        sessions: dict[str, Session | None] = {}

        async def resolve(ident: str, param: str) -> dict[str, Any]:
            return await self._item(ident, param, sessions)

        items = await resolved(given.input, resolve)
        messages = messages_of(items)
        compactions = tuple(found for found in (
            read_compaction(item) for item, _ in items
            if item.get("type") in ("compaction", "compaction_summary")) if found is not None)
        previous = None
        if given.previous_response_id is not None:
            making = self.running.get(given.previous_response_id)
            if making is not None and making[2] == current_owner():
                await making[0].wait()
            previous = await self._stored(given.previous_response_id, sessions)
            if previous is None:
                raise previous_not_found(given.previous_response_id)
        pending = previous.pending() if previous is not None else []
        conversation = None
        before: Sequence[MemoryEntry] = previous.entries[:previous.end] \
            if previous is not None else ()
        if given.conversation is not None:
            conversation = await self.conversations.find(given.conversation)
            held = await self.runner.load_session(conversation.session_id)
            before = held.memory.entries if held is not None else ()
            pending = held.memory.dangling_tool_calls()[1] if held is not None else []
            stored = held.memory.entries if held is not None and pending else ()
            messages = messages[resent(messages, stored):]  # the turn's, sent again
        seed, turn_input = plan(messages, pending)
        passes = self.passes.take(previous.point.session_id if previous is not None
                                  and given.store else None)
        try:
            model = self.models.resolve(spec, passes)
        except ConfigurationError as exc:
            raise invalid(str(exc), "model", code="model_not_found") from None
        carried = offered(given.tools, carried_tools(
            [*marks_of(before, passes.marks).carriers, *messages]))
        run = _answering(body, given, asked, model, carried)
        run.marks = passes.marks
        if previous is not None and given.store and given.tools and \
                previous.tools() == list(given.tools):
            run.tools_at = previous.tools_at()
        agent = Agent(model=StampedModel(model, run),
                      call_options=given.call_options(isinstance(model, OpenAIResponsesModel)),
                      tools=host_tools([*given.tools, *carried]))
        events = ResponseEvents(emit, run) if emit is not None else None
        request = _Request(given, asked, seed, turn_input, agent, run, events, previous, passes,
                           retry, conversation=conversation, compaction=compaction,
                           compactions=compactions)
        try:
            earlier = await self._earlier(request) if given.store else None
            if earlier is not None:
                return await self._again(request, earlier)
            return await self._run(request, messages)
        except Exception as exc:
            if events is None or not events.sequence:
                raise
            error = api_error(exc)  # the stream has begun: it ends with an error event
            events.event("error", error={"type": error.type, "code": error.code,
                                         "message": error.message, "param": error.param})
            return {}

    async def _run(self, request: _Request, messages: list[Message]) -> dict[str, Any]:
        if request.conversation is not None:
            return await self._in_conversation(request, request.conversation)
        if request.previous is None:
            return await self._on_line(request, messages)
        if not request.given.store:
            return await self._unstored(request)
        return await self._continue(request, request.previous)

    async def _on_line(self, request: _Request, messages: list[Message]) -> dict[str, Any]:
        """A request without ``previous_response_id`` brings its whole history: it lands
        on a session line by the Chat Completions rules (``nonoka.serve.lines``), with or
        without ``store`` (a ``store: false`` exchange is kept there too; only its
        response is not found by id)."""
        owner = current_owner()
        signal = request.retry.signal if request.retry is not None else None
        spec, host = request.asked.model, line_host(signal, owner)
        compacted = await latest_of_line(self.stores.index, host) \
            if request.compaction and host is not None else None
        line = LineDecision(messages, signal, self.project, spec, owner,
                            compaction_of=compacted)
        title = next((title_from(m.content) for m in reversed(messages)
                      if m.role == "user" and m.content.strip()), "")
        service = line.service(self.stores, request.passes, title, {
            "source": "nonoka serve", **({OWNER_KEY: owner} if owner != LOCAL else {})})
        if request.compactions and compacted is None:
            line.proven = await proven_summaries(service, request.compactions, host, owner)
        held = False  # the line's lock, for a new session (``line_lock``)
        async with AsyncExitStack() as first:
            while True:
                request.line = line
                opening = await line.choose()
                chosen = opening.session
                if not isinstance(chosen, Session):  # a new session: no other turn has it
                    if host is not None and not held:
                        # one new session of a named line at a time: decided again
                        # under the line's lock, another first request's is found
                        await first.enter_async_context(self._taken(line_lock(host)))
                        held = True
                        line = line.again()
                        continue
                    made = await self._answer(request, service, opening, start=0)
                    if compacted is not None:
                        await self._compacted(request, made, compacted)
                    return made
                sid = chosen.session_id
                async with self._taken(sid) as lease:
                    # Where the response starts was worked out from the session as the
                    # decision read it; the turn runs on that only if no other turn ran
                    # there since (two clients sending on one thread at once).
                    if (await service.current(sid, chosen)).revision == chosen.revision:
                        return await self._answer(request, service, opening,
                                                  start=line.start, owner=lease)
                line = line.again()  # decided again, on the line as it is now

    async def _compacted(self, request: _Request, made: dict[str, Any], line: str) -> None:
        """Note a whole-history compaction on the timeline of the line it compacted (its
        own session names the line in its index row, ``compaction_of``)."""
        point = request.run.point
        if point is not None and made.get("status") == "completed":
            await self.stores.events.append_event(line, "compaction", {
                "session_id": point.session_id, "response": point.id})

    async def _continue(self, request: _Request, previous: Located) -> dict[str, Any]:
        """Continue from ``previous``, after the entries the input repeats (``repeats``):
        in its session at its tip, else in a branch.

        A line only grows past its tip, so a response behind the tip as ``previous``
        was read stays behind it: it is branched at once, without waiting for a turn
        running on the line. Only a continuation of the tip is decided again under the
        session's lock and lease."""
        sid = previous.point.session_id
        service = self._service([], request.passes)
        end, turn_input = self._after(request, previous)
        if end == len(previous.entries):
            async with self._taken(sid) as owner:
                session = await service.load(sid)
                found = await self._locate(previous.point, session) if session else None
                if session is None or found is None:
                    raise previous_not_found(previous.point.id)
                end, turn_input = self._after(request, found)
                if end == len(found.entries):
                    return await self._answer(request, service, Opening(session, turn_input),
                                              start=end, owner=owner)
        branch = await service.fork(sid, end, reason=FORK_REASON)
        async with self.locks.hold(branch):
            return await self._answer(request, service, Opening(
                branch, turn_input, forked_from=sid, fork_point=end), start=end)

    @staticmethod
    def _after(request: _Request, found: Located) -> tuple[int, TurnInput]:
        """Where a continuation of ``found`` starts (after the entries its input repeats),
        and what its turn then brings."""
        end = found.end + repeats(request.seed, found.entries[found.end:])
        return end, dataclasses.replace(request.turn_input,
                                        seed=request.seed[end - found.end:])

    async def _earlier(self, request: _Request) -> Located | None:
        """The stored response this request repeats, if the client says it repeats one:
        by this process's recent requests, else by the timelines where it would have
        logged its request's digests: the session it continues (``previous_response_id``
        or ``conversation``), else its owner's most recently active sessions
        (``RETRY_SESSIONS``). A request without a retry signal reads nothing."""
        wanted = request.retry.wanted if request.retry is not None else None
        if wanted is None:
            return None
        known = self.retries.get(wanted)
        if known is None:
            named = request.previous is not None or request.conversation is not None
            for sid in await self._retry_sessions(request):
                known = await self._logged(
                    sid, wanted, RECENT_EVENTS if named else RETRY_SESSION_EVENTS)
                if known is not None:
                    break
        if not isinstance(known, str):
            return None
        making = self.running.get(known)
        if making is not None and making[2] == current_owner():
            await making[0].wait()
        return await self._stored(known)

    async def _retry_sessions(self, request: _Request) -> list[str]:
        """The sessions whose timelines may name the response a retry repeats."""
        if request.previous is not None:
            return [request.previous.point.session_id]
        if request.conversation is not None:
            return [request.conversation.session_id]
        owner = current_owner()
        rows = await self.stores.index.list_sessions(limit=RETRY_SESSIONS_LISTED,
                                                     purpose=None)
        return [row.session_id for row in rows if row.purpose in RETRY_PURPOSES
                and owner_of_record(row.metadata) == owner][:RETRY_SESSIONS]

    async def _logged(self, session_id: str, wanted: str, rows: int) -> str | None:
        """The newest response among the session's last ``rows`` timeline rows logged
        with ``wanted``."""
        recent = await self.stores.events.list_events(session_id, limit=rows)
        found = next((e.data.get("id") for e in reversed(recent)
                      if e.kind in (RESPONSE_EVENT, BRANCHED) and isinstance(e.data, dict)
                      and wanted in (e.data.get("request"), e.data.get("idempotency"))),
                     None)
        return found if isinstance(found, str) else None

    async def _again(self, request: _Request, earlier: Located) -> dict[str, Any]:
        """A retry: the earlier response as stored; made again in its place when its
        turn failed or its process died and nothing came after it."""
        left = earlier.left
        if left is None or left.status not in ("failed", "incomplete"):
            return self._replayed(request, earlier)
        sid = earlier.point.session_id
        service = self._service([], request.passes)
        async with self._taken(sid) as owner:
            session = await service.load(sid)
            found = await self._locate(earlier.point, session) if session else None
            if session is None or found is None:
                return self._replayed(request, earlier)
            if found.left is None or found.end != len(session.memory.entries):
                return self._replayed(request, found)
            request.again = earlier.point
            request.run.tools_at = found.tools_at()
            return await self._answer(request, service, Opening(
                session, TurnInput(kind="resume", reopen=True)), start=earlier.point.start,
                owner=owner)

    def _replayed(self, request: _Request, located: Located) -> dict[str, Any]:
        made = self._resource(located)
        if request.events is not None:
            request.events.replay(made, resource(located.point.id, located.asked(),
                                                 status="in_progress", output=[],
                                                 usage=None))
        return made

    async def _in_conversation(self, request: _Request, found: Found) -> dict[str, Any]:
        """A response at the end of its conversation's session, less the deleted items."""
        sid = found.session_id
        service = self._service([], request.passes)
        turn_input = dataclasses.replace(request.turn_input, seed=request.seed)
        async with self._taken(sid) as owner:
            found = await self.conversations.find(found.id)
            session = await service.load(sid)
            if session is None:
                raise not_found("Conversation", found.id)
            entries = session.memory.entries
            request.run.hidden = frozenset(hidden_entries(
                entries, sid, found.data["nonce"], found.deleted_items))
            return await self._answer(request, service, Opening(session, turn_input),
                                      start=len(entries), owner=owner)

    async def _unstored(self, request: _Request) -> dict[str, Any]:
        """``store: false``: the turn in a memory store, seeded with the path it continues."""
        path: list[Message] = []
        if request.previous is not None:
            located = request.previous
            path = [e.to_message() for e in located.entries[:located.end]]
        stores = open_project_stores(self.project, "memory:")
        try:
            service = TurnService(stores, title="", metadata={"purpose": "chat"})
            return await self._answer(request, service, Opening(
                None, request.turn_input, seed=[*path, *request.seed]), start=len(path))
        finally:
            await stores.close()

    @asynccontextmanager
    async def _taken(self, session_id: str) -> AsyncIterator[str]:
        """The session held for one turn: this process's lock, then the lease that keeps
        other processes out; gives the lease's owner, which the turn runs as."""
        owner = new_lease_owner()
        async with self.locks.hold(session_id), hold_lease(
                self.stores.leases, session_id, owner, wait=lease_wait_from_env()):
            yield owner

    def _service(self, messages: list[Message], passes: ConversationPasses) -> TurnService:
        title = next((title_from(m.content) for m in messages
                      if m.role == "user" and m.content.strip()), "")
        owner = current_owner()
        return TurnService(self.stores, title=title, passes=passes, metadata={
            "purpose": "chat", "cwd": str(self.project), "source": "nonoka serve",
            **({OWNER_KEY: owner} if owner != LOCAL else {})})

    async def _answer(self, request: _Request, service: TurnService,
                      opening: Opening | Chooser, *,
                      start: int, owner: str | None = None) -> dict[str, Any]:
        """Run the turn and give the response it made."""
        run, events, given = request.run, request.events, request.given
        answered = 0

        async def sink(event: TurnEvent) -> None:
            nonlocal answered
            if isinstance(event, SessionOpened):
                await self._opened(request, service, event.session_id, start)
            elif events is None:
                return
            elif isinstance(event, TextDelta):
                events.text(event.text)
            elif isinstance(event, ReasoningDelta):
                events.reasoning(event.text)
            elif isinstance(event, ModelCalled) and len(run.answers) > answered:
                answered = len(run.answers)
                events.answered()
            elif isinstance(event, ToolCallFinished):
                run.announce()  # a tool result, stored before the model is asked
                events.tool_output(event.call, event.content)

        logged: dict[str, Any] = {"source": "serve /v1/responses",
                                  "messages": len(given.input), "model": request.asked.model,
                                  "stream": given.stream, "store": given.store,
                                  "previous_response_id": given.previous_response_id,
                                  "tools": [t.get("name") or t["type"] for t in given.tools]}
        try:
            outcome = await service.run(request.agent, opening, request=logged,
                                        lease_owner=(lambda _sid: owner) if owner else None,
                                        on_event=sink)
            term = outcome.result.termination if outcome.result is not None else None
            await service.finish(outcome.finish_reason, *(
                (term.limit, term.detail) if term is not None and term.limit else ()))
            run.announce()
            return self._made(request, outcome)
        except Exception:
            run.announce()  # the stream, once begun, ends with the error
            raise
        finally:
            self._ended(request)

    def _ended(self, request: _Request) -> None:
        """The response is no longer being made here: whoever waits for it is told."""
        point = request.run.point
        if point is None:
            return
        making = self.running.pop(point.id, None)
        self.background.pop(point.id, None)
        watcher = self.watchers.pop(point.id, None)
        if watcher is not None:
            watcher.cancel()
        if making is not None:
            making[0].set()
        if request.given.store:
            self.passes.give(point.session_id, request.passes)

    async def _opened(self, request: _Request, service: TurnService, session_id: str,
                      start: int) -> None:
        """The response's session is known: its id, its timeline entry, its first event."""
        run, given = request.run, request.given
        if request.line is not None:
            start = request.line.start
        run.point = request.again or new_point(session_id, start)
        first = resource(run.point.id, request.asked, status="in_progress", output=[],
                         usage=None, store=given.store)
        logged: dict[str, Any] = {"id": run.point.id,
                                  "record": request.asked.logged(run.tools_at)}
        if given.store:
            self.running[run.point.id] = (asyncio.Event(), first, current_owner())
            task = asyncio.current_task()
            if given.params.get("background") is True and task is not None:
                self.background[run.point.id] = task
            self._remember(request.retry, run.point.id, logged)
        await service.journal.log(RESPONSE_EVENT, logged)
        if run.point.id in self.background:  # before any client learns its id
            self.watchers[run.point.id] = asyncio.create_task(self._watch(
                run.point.id, await cancels.newest_seq(self.stores.events, session_id)))
        continued = request.previous.point.session_id if request.previous else None
        if "request" in logged and request.again is None and \
                continued not in (None, session_id):
            await self.stores.events.append_event(continued, BRANCHED, {
                key: logged[key] for key in ("id", "request", "idempotency")
                if key in logged})
        events = request.events
        if events is not None:
            def announce() -> None:
                """The client learns the id only once the turn's input is stored: a
                server killed before then leaves nothing the client was told of."""
                if not events.sequence:
                    events.started(first)
            run.announce = announce

    def _remember(self, retry: Retry | None, response_id: str,
                  logged: dict[str, Any]) -> None:
        """Note the request's retry digests, here and on its timeline entry."""
        if retry is None:
            return
        logged["request"] = retry.body
        if retry.key is not None:
            logged["idempotency"] = retry.key
        for digest in (retry.body, retry.key):
            if digest is not None:
                self.retries[digest] = response_id
                self.retries.move_to_end(digest)
        while len(self.retries) > RETRIES_KEPT:
            self.retries.popitem(last=False)

    def _made(self, request: _Request, outcome: TurnOutcome) -> dict[str, Any]:
        """The response a finished turn made (or the error, without a stream)."""
        run, events = request.run, request.events
        session = outcome.result.session if outcome.result is not None else None
        located = None
        if run.point is not None and session is not None:
            located = locate(session.memory.entries, run.point)
        if located is None and request.line is not None and session is not None and \
                outcome.failure is None:
            earlier = answered_before(session.memory.entries)  # a retry: answered already
            if earlier is not None and run.point is not None:
                made = {**self._resource(earlier, store=request.given.store,
                                         sealed_reasoning=run.sealed_reasoning),
                        "id": run.point.id}
                if events is not None:
                    events.given(made)
                return made
        if located is not None:
            made = self._resource(located, store=request.given.store,
                                  sealed_reasoning=run.sealed_reasoning)
            if events is not None:
                events.finished(made)
            return made
        failure = outcome.failure or Failure(
            "model_error", f"the turn ended ({outcome.finish_reason}) without an answer")
        if events is None or run.point is None:
            raise failure_error(failure)
        error = failure_error(failure)
        made = resource(run.point.id, request.asked, status="failed", output=[], usage=None,
                        error={"code": error.code or "server_error", "message": error.message},
                        store=request.given.store)
        events.finished(made)
        return made

    @staticmethod
    def _resource(located: Located, *, store: bool = True,
                  sealed_reasoning: bool = False) -> dict[str, Any]:
        left = located.left
        if left is not None:  # no answer stored: it failed, or its process died
            return resource(located.point.id, located.asked(), status=left.status,
                            output=located.output(), usage=None, error=left.error,
                            incomplete="interrupted" if left.status == "incomplete"
                            else None)
        last = located.last
        incomplete = INCOMPLETE.get(str(last.get("finish")))
        return resource(located.point.id, located.asked(),
                        status="incomplete" if incomplete else "completed",
                        output=located.output(sealed_reasoning), usage=located.usage(),
                        completed_at=last.get("completed_at"), incomplete=incomplete,
                        store=store)

    # -- compact -----------------------------------------------------------------------------

    async def compact(self, body: Any, retry: Retry | None = None) -> dict[str, Any]:
        """``POST /v1/responses/compact``: a stored response whose input is the whole
        conversation and whose answer is its summary; the client gets exactly one
        ``compaction`` item carrying it (``nonoka.serve.compaction``)."""
        if not isinstance(body, dict):
            raise invalid("the request body must be a JSON object")
        given = body.get("input", [])
        items = [{"type": "message", "role": "user", "content": given}] \
            if isinstance(given, str) else given
        if not isinstance(items, list):
            raise invalid("input must be a string or a list of items", "input")
        if not items and not body.get("previous_response_id"):
            raise invalid("nothing to compact: send the conversation as input, or "
                          "previous_response_id", "input")
        asked = {"model": body.get("model"), "store": True,
                 "input": [*items, {"type": "message", "role": "user",
                                    "content": COMPACT_PROMPT}]}
        for name in ("instructions", "previous_response_id"):
            if body.get(name) is not None:
                asked[name] = body[name]
        made = await self.create(asked, retry=retry, compaction=True)
        summary = self._summary(made)
        usage = made.get("usage") or {
            "input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}
        return {"id": made["id"], "object": "response.compaction",
                "output": [compaction_item(made["id"], summary)],
                "created_at": made["created_at"], "usage": usage}

    async def _compact_in_turn(self, body: dict[str, Any], emit: Emit | None,
                               retry: Retry | None) -> dict[str, Any]:
        """A create request whose input ends with ``compaction_trigger`` (Codex's remote
        compaction, second form): the compaction's response, whose output is exactly
        one ``compaction`` item (streamed as one item when the request streams)."""
        items = list(body["input"][:-1])
        asked = {k: v for k, v in body.items()
                 if k not in ("input", "stream", "tools", "tool_choice")}
        asked["input"] = [*items, {"type": "message", "role": "user",
                                   "content": COMPACT_PROMPT}]
        made = await self.create(asked, retry=retry, compaction=True)
        item = compaction_item(made["id"], self._summary(made))
        done = {**made, "output": [item]}
        if emit is not None:
            first = {**made, "status": "in_progress", "output": [], "usage": None,
                     "completed_at": None}
            ResponseEvents(emit, Answering(Asked(model=str(made.get("model")),
                                                 created_at=made["created_at"]))
                           ).replay(done, first)
        return done

    @staticmethod
    def _summary(made: dict[str, Any]) -> str:
        """The summary a compaction's response answered with (a 502 when it has none:
        a cut or failed summary never stands in for a conversation)."""
        summary = "".join(part.get("text", "") for item in made.get("output", ())
                          if item.get("type") == "message"
                          for part in item.get("content", ()))
        if made.get("status") != "completed" or not summary.strip():
            raise ApiError(502, "the model gave no summary to compact the conversation into "
                                f"(response {made.get('id')} is {made.get('status')})",
                           type=SERVER, code="compaction_failed")
        return summary

    # -- reading -----------------------------------------------------------------------------

    async def _stored(self, response_id: str,
                      sessions: dict[str, Session | None] | None = None) -> Located | None:
        """The stored response ``response_id`` names, or ``None``."""
        point = parse_response_id(response_id)
        if point is None:
            return None
        record = await self.stores.index.get_session(point.session_id)
        metadata = record.metadata if record is not None else {}
        if owner_of_record(metadata) != current_owner() or \
                response_id in (metadata.get(DELETED) or ()):
            return None  # another owner's response is one that does not exist
        session = await self.loaded(point.session_id,
                                    sessions if sessions is not None else {})
        if session is None:
            return None
        found = await self._locate(point, session)
        if found is not None and not found.asked().stored:
            return None  # a store: false exchange: kept in its session, not by its id
        return found

    async def _locate(self, point: ResponsePoint, session: Session) -> Located | None:
        """The response in its session: by its answers, else by its timeline (a response
        whose turn failed or whose process died has no answer, only its input)."""
        entries = session.memory.entries
        found = locate(entries, point)
        if found is not None:
            return found
        events = self.stores.events
        recent = await events.list_events(point.session_id, limit=RECENT_EVENTS)
        if len(recent) == RECENT_EVENTS and not any(
                e.kind == RESPONSE_EVENT and e.data.get("id") == point.id for e in recent):
            recent = await events.list_events(point.session_id, limit=ALL_EVENTS)
        left = left_of(recent, point.id, await self._held(point.session_id))
        if left is None:
            return None
        end = input_end(entries, point)
        return Located(point, entries, end, end, left)

    async def _held(self, session_id: str) -> bool:
        """Whether a live process holds the session (a dead one's lease does not count)."""
        lease = await self.stores.leases.get_lease(session_id)
        return lease is not None and not holder_is_dead(lease.owner)

    async def loaded(self, session_id: str,
                     sessions: dict[str, Session | None]) -> Session | None:
        """The session ``session_id``, loaded once per request (``sessions``: the ones
        this request loaded, by id)."""
        if session_id not in sessions:
            sessions[session_id] = await self.runner.load_session(session_id)
        return sessions[session_id]

    async def _item(self, ident: str, param: str,
                    sessions: dict[str, Session | None]) -> dict[str, Any]:
        """The stored item ``ident`` names (an ``item_reference``): a response's, or a
        conversation's own (added before its first response)."""
        place = parse_item_id(ident)
        located = await self._stored(place.response.id, sessions) if place else None
        if place is not None and located is not None and place.entry < len(located.entries):
            for item in entry_items(located.entries[place.entry], place.response,
                                    place.offset):
                if item["id"] == ident:
                    return item
        own = await self.conversations.own_item(place, sessions) \
            if place is not None and located is None else None
        if own is not None:
            return own
        raise invalid(f"Item with id '{ident}' not found.", param)

    async def get(self, response_id: str, include: Sequence[str] = ()) -> dict[str, Any]:
        """``GET /v1/responses/{id}``; ``include``: its values, checked
        (``nonoka.serve.included``): the reasoning's ``encrypted_content`` when asked,
        the hosted tools' items as the upstream gave them."""
        asked = included(list(include), "include")
        making = self.running.get(response_id)
        if making is not None and making[2] == current_owner():
            return making[1]
        return self._resource(await self._found(response_id),
                              sealed_reasoning=SEALED in asked)

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """``POST /v1/responses/{id}/cancel``: a background response is stopped (its
        turn saved as cancelled, what it streamed kept), by this process when it is
        making it, else by the one that is (``nonoka.serve.cancels``); a finished one is
        given as it is; a response made without ``background`` cannot be."""
        making = self.running.get(response_id)
        if making is None or making[2] != current_owner():
            point = parse_response_id(response_id)
            log = self.stores.events
            seen = await cancels.newest_seq(log, point.session_id) if point else 0
            made = self._resource(await self._found(response_id))
            if made.get("background") is not True:
                raise invalid("Cannot cancel a synchronous response.")
            if made["status"] != "in_progress" or point is None:
                return made
            await cancels.ask(log, response_id)
            await cancels.ended(log, self.stores.leases, point.session_id, seen)
            return self._resource(await self._found(response_id))
        if making[1].get("background") is not True:
            raise invalid("Cannot cancel a synchronous response.")
        task = self.background.get(response_id)
        if task is not None:
            task.cancel()
        await making[0].wait()
        return self._resource(await self._found(response_id))

    async def _watch(self, response_id: str, after: int) -> None:
        """Cancel the background response once another process asks to."""
        await cancels.watch(self.stores.events, response_id, after)
        task = self.background.get(response_id)
        if task is not None:
            task.cancel()

    async def reattach(self, response_id: str, query: Mapping[str, str]
                       ) -> AsyncIterator[dict[str, Any]]:
        """``GET /v1/responses/{id}?stream=true&starting_after=N``: a background
        response's events after ``N`` (``nonoka.serve.journal``)."""
        raw = query.get("starting_after", "-1")
        try:
            after = int(raw)
        except ValueError:
            raise invalid("starting_after must be an integer", "starting_after") from None
        live = self.streams.get(response_id)
        if live is not None:
            making = self.running.get(response_id)
            if making is None:
                await self._found(response_id)  # its owner's, and not deleted
            elif making[2] != current_owner():
                raise not_found("Response", response_id)
            return live.follow(after)
        made = self._resource(await self._found(response_id))
        if made.get("background") is not True:
            raise invalid("only a background response can be streamed again", "stream")
        events = await stored_events(self.stores.events, response_id)
        if not events or events[-1].get("type") not in FINAL:
            events.append(final_event(made, events[-1]["sequence_number"] + 1 if events
                                      else 0))

        async def replayed() -> AsyncIterator[dict[str, Any]]:
            for event in events:
                if event["sequence_number"] > after:
                    yield event

        return replayed()

    async def _found(self, response_id: str) -> Located:
        located = await self._stored(response_id)
        if located is None:
            raise not_found("Response", response_id)
        return located

    async def delete(self, response_id: str) -> dict[str, Any]:
        located = await self._found(response_id)
        sid = located.point.session_id
        index = self.stores.index
        async with self.locks.hold(sid):
            record = await index.get_session(sid)
            if record is None:
                raise not_found("Response", response_id)
            deleted = [*(record.metadata.get(DELETED) or ()), response_id]
            await index.upsert_session(record.model_copy(
                update={"metadata": {**record.metadata, DELETED: deleted}}))
        return {"id": response_id, "object": "response", "deleted": True}

    async def input_items(self, response_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        """``GET /v1/responses/{id}/input_items``: ``limit`` (1-100, 20), ``order``
        (``desc`` by default, as OpenAI's), ``after`` (an item id), ``include`` (checked;
        ``message.input_image.image_url`` fills an image sent by ``file_id``)."""
        asked = included(query_include(query), "include")
        items = (await self._found(response_id)).input_items(image_urls=IMAGE_URLS in asked)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid("order must be asc or desc", "order")
        if order == "desc":
            items.reverse()
        after = query.get("after")
        if after:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        try:
            limit = int(query.get("limit", "20"))
        except ValueError:
            raise invalid("limit must be an integer", "limit") from None
        if not 1 <= limit <= 100:
            raise invalid("limit must be between 1 and 100", "limit")
        page = items[:limit]
        return {"object": "list", "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(items) > limit}

