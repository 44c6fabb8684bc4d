"""``NonokaProvider``: the Python twin of the OpenCode provider.

A host calls the provider once per model step with the full history it holds. The
provider decides what the request looks like (a new conversation or a continuation, and
the conversation key: docs/protocol.md §7), spawns a fresh ``nonoka bridge`` for it,
streams the events back and remembers the session id the bridge reports — in memory and
in ``<cwd>/.nonoka/provider-session.id`` — so the next process, and the next run of the
host, continue the same session. The bridge has the final say on which session
a request runs in; the provider only has to send honest hints.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from nonoka.errors import ConfigurationError
from nonoka.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    ProtocolError,
    Purpose,
    conversation_key,
    is_continuation,
)
from nonoka.protocol.models import (
    CancelRequest,
    ChatRequest,
    ErrorEvent,
    Event,
    Finish,
    HostToolSpec,
    ProtocolSpec,
    RequestLimits,
    SessionInit,
    WarningEvent,
    decode_event,
    encode_request,
)
from nonoka.protocol.values import ErrorCode, FinishReason
from nonoka.provider.idfile import (
    clear_session_id,
    id_file_path,
    is_plausible_session_id,
    read_session_id,
    write_session_id,
)
from nonoka.provider.process import (
    BridgeError,
    BridgeProcess,
    BridgeTimeoutError,
    describe_exit,
    merged_env,
)
from nonoka.provider.result import ProviderResult
from nonoka.state.messages import Message

__all__ = ("DEFAULT_CANCEL_GRACE", "DEFAULT_TIMEOUT", "EventCallback", "MessageLike",
           "NonokaProvider", "ProviderStream", "ToolLike", "default_command")

logger = logging.getLogger("nonoka.provider")

DEFAULT_TIMEOUT = 600.0
"""Seconds one call may take, model calls and nonoka's own tools included."""
DEFAULT_CANCEL_GRACE = 5.0
"""Seconds a bridge gets at each step of stopping (cancel line, SIGTERM) before the next."""
_PURPOSES = tuple(Purpose)
_KNOWN_CONVERSATIONS = 64
"""How many conversation-key -> session-id pairs one provider remembers."""

MessageLike = Message | Mapping[str, Any]
ToolLike = HostToolSpec | Mapping[str, Any]
EventCallback = Callable[[Event], Awaitable[None] | None]


def default_command() -> list[str]:
    """``nonoka bridge`` run by this very interpreter, so it sees the same installation."""
    return [sys.executable, "-m", "nonoka", "bridge"]


class _Call:
    """One request in flight: its process, its result so far, and how it is ending."""

    def __init__(self, request: ChatRequest) -> None:
        self.request = request
        self.result = ProviderResult(request=request)
        self.process: BridgeProcess | None = None
        self.deadline: float | None = None
        self.finished = False
        """``finish`` was received."""
        self.cancel_requested = False
        self.cancel_sent = False
        self.done = asyncio.Event()
        """Set once the process is reaped, whatever happened."""


class ProviderStream:
    """The events of one request as they arrive; ``result`` fills in alongside them.

    The bridge is spawned on the first iteration. Iterate to the end, or use the stream
    as an async context manager: leaving early cancels the request and reaps the bridge.
    """

    def __init__(self, events: AsyncGenerator[Event, None], result: ProviderResult) -> None:
        self._events = events
        self.result = result

    def __aiter__(self) -> ProviderStream:
        return self

    async def __anext__(self) -> Event:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Stop the request if it is still running and reap the bridge."""
        await self._events.aclose()

    async def __aenter__(self) -> ProviderStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


class NonokaProvider:
    """Drives ``nonoka bridge`` for one workspace, one process per call.

    ``cwd`` is the workspace (its ``.nonoka/`` holds the project database and the id
    file). ``command`` runs the bridge (default: ``default_command()``); ``env`` adds
    variables to the inherited environment; ``model`` and ``limits`` go into every
    request. ``timeout`` bounds one call in seconds (``None``: no bound);
    ``cancel_grace`` is how long a stopping bridge gets before the next, firmer step.
    """

    def __init__(
        self,
        cwd: str | os.PathLike[str],
        *,
        command: Sequence[str] | None = None,
        model: str | None = None,
        env: Mapping[str, str] | None = None,
        limits: RequestLimits | Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        required_capabilities: Iterable[str] = (),
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.cwd = Path(os.path.abspath(cwd))
        self.command = list(command) if command is not None else default_command()
        if not self.command:
            raise ConfigurationError("command is empty; give the program that runs the bridge")
        if timeout is not None and timeout <= 0:
            raise ConfigurationError(f"timeout must be positive or None, not {timeout!r}")
        if cancel_grace < 0:
            raise ConfigurationError(f"cancel_grace must be >= 0, not {cancel_grace!r}")
        self.model = model
        self.env = dict(env) if env is not None else None
        try:
            self.limits = (RequestLimits.model_validate(dict(limits))
                           if isinstance(limits, Mapping) else limits)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid limits: {exc}") from None
        self.timeout = timeout
        self.cancel_grace = cancel_grace
        self.required_capabilities = list(required_capabilities)
        self.max_frame_bytes = max_frame_bytes
        self.id_file = id_file_path(self.cwd)
        self._session_id = read_session_id(self.id_file)
        self._session_key: str | None = None
        """Conversation key of the request that reported ``_session_id`` (``None``: unknown,
        e.g. read from the file)."""
        self._known: OrderedDict[str, str] = OrderedDict()
        self._title_session_id: str | None = None
        self._revisions: dict[str, int] = {}
        self._calls: set[_Call] = set()

    # -- state -------------------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        """The chat session id held now (persisted in ``id_file``)."""
        return self._session_id

    @property
    def title_session_id(self) -> str | None:
        """The session of title requests; kept apart from the chat session, never on disk."""
        return self._title_session_id

    # -- calls -------------------------------------------------------------------------

    async def chat(
        self,
        messages: Sequence[MessageLike],
        tools: Sequence[ToolLike] = (),
        *,
        purpose: Purpose | str = Purpose.CHAT,
        request_id: str | None = None,
        on_event: EventCallback | None = None,
        new_session: bool | None = None,
    ) -> ProviderResult:
        """Run one model step and return what it produced.

        ``new_session`` overrides the decision read from the history (``None``: a history
        without an assistant or tool message is a new conversation). ``on_event`` (sync or
        async) sees every event as it arrives. A failed turn is a result
        (``finish_reason == "error"``, ``errors``); a broken or silent bridge raises
        ``BridgeError``. Cancelling the task cancels the request cleanly.
        """
        stream = self.stream(messages, tools, purpose=purpose, request_id=request_id,
                             new_session=new_session)
        async with stream:
            async for event in stream:
                if on_event is not None:
                    outcome = on_event(event)
                    if inspect.isawaitable(outcome):
                        await outcome
        return stream.result

    def stream(
        self,
        messages: Sequence[MessageLike],
        tools: Sequence[ToolLike] = (),
        *,
        purpose: Purpose | str = Purpose.CHAT,
        request_id: str | None = None,
        new_session: bool | None = None,
    ) -> ProviderStream:
        """Like ``chat``, but yields the typed events; ``.result`` summarises them.

        The request (and the session decision) is made now; invalid input raises
        ``ConfigurationError`` here rather than mid-iteration.
        """
        call = _Call(self._prepare(messages, tools, purpose=purpose, request_id=request_id,
                                   new_session=new_session))
        return ProviderStream(self._run(call), call.result)

    async def cancel(self) -> None:
        """Cancel every request in flight and wait until their bridges are gone.

        Each bridge gets a ``cancel`` line, then SIGTERM, then SIGKILL, ``cancel_grace``
        seconds apart. The ``chat()`` calls return with ``finish_reason == "cancelled"``.
        """
        calls = [c for c in self._calls if not c.finished and not c.done.is_set()]
        await asyncio.gather(*(self._escalate(c, c.done.wait) for c in calls))

    # -- building the request ----------------------------------------------------------

    def _prepare(self, messages: Sequence[MessageLike], tools: Sequence[ToolLike], *,
                 purpose: Purpose | str, request_id: str | None, new_session: bool | None,
                 ) -> ChatRequest:
        if purpose not in _PURPOSES:
            raise ConfigurationError(
                f"purpose must be one of {', '.join(map(repr, _PURPOSES))}, not {purpose!r}")
        purpose = Purpose(purpose)
        history = [_as_message(m, i) for i, m in enumerate(messages)]
        specs = [_as_tool(t, i) for i, t in enumerate(tools)]
        if purpose == Purpose.COMPACTION:
            # The host summarising a chat: a lone user message that is no new conversation.
            # It names the chat (and its key); the chat's key changes after it (the history
            # then starts from the summary), so the held id's key becomes unknown.
            fresh, key, session_id = False, self._session_key, self._session_id
            self._session_key = None
        else:
            fresh = not is_continuation(history) if new_session is None else new_session
            # Title requests get no key: their first user message may well be the chat's,
            # and the bridge must never recover a chat into a title session (or the reverse).
            key = conversation_key(history) if purpose == Purpose.CHAT else None
            session_id = None if fresh else self._session_for(purpose, key)
        try:
            request = ChatRequest(
                protocol=ProtocolSpec(required_capabilities=self.required_capabilities),
                request_id=request_id or f"req-{uuid.uuid4().hex[:16]}",
                purpose=purpose,
                messages=history,
                tools=specs,
                session_id=session_id,
                new_session=fresh,
                conversation_key=key,
                cwd=str(self.cwd),
                model=self.model,
                limits=self.limits,
                revision=self._revisions.get(session_id) if session_id else None,
            )
        except ValidationError as exc:
            raise ConfigurationError(f"invalid chat request: {exc}") from None
        if fresh:
            self._forget(purpose, key)
        return request

    def _session_for(self, purpose: str, key: str | None) -> str | None:
        """The id a continuation sends.

        Normally the held id. But when this provider knows the held id belongs to another
        conversation (two conversations alternating through one provider), it sends that
        conversation's own id, or none and lets the bridge recover by ``conversation_key``
        — never the other conversation's session.
        """
        if purpose == Purpose.TITLE:
            return self._title_session_id
        if key is not None and key in self._known:
            return self._known[key]
        if self._session_key is None or key is None or self._session_key == key:
            return self._session_id
        return None

    def _forget(self, purpose: str, key: str | None) -> None:
        """A new conversation: drop the held id, and its on-disk copy with it."""
        if purpose == Purpose.TITLE:
            self._title_session_id = None
            return
        if key is not None:
            self._known.pop(key, None)
        self._session_id = None
        self._session_key = None
        try:
            clear_session_id(self.id_file)
        except OSError as exc:
            logger.warning("could not remove the stale session id file %s: %s",
                           self.id_file, exc)

    def _adopt(self, call: _Call, event: SessionInit) -> None:
        """Hold the id the bridge reports; chat ids also go to disk, title ids never do.

        A compaction's report changes nothing held: it summarises the chat, it does not
        replace it. A branch (``forked_from``) becomes the chat session.
        """
        request = call.request
        if event.recovered:
            logger.warning("the bridge recovered session %s for request %s (reason: %s)",
                           event.session_id, request.request_id,
                           event.recovery_reason or "unspecified")
        if not is_plausible_session_id(event.session_id):
            logger.warning("ignoring the session id %r from the bridge: it is not a "
                           "plausible session id", event.session_id[:80])
            return
        if request.purpose == Purpose.TITLE:
            self._title_session_id = event.session_id
            return
        if request.purpose == Purpose.COMPACTION:
            logger.info("compaction request %s ran in session %s; the chat session stays %s",
                        request.request_id, event.session_id, self._session_id)
            return
        if event.forked_from is not None:
            logger.warning("the conversation continues in branch %s of session %s "
                           "(shared entries: %s)", event.session_id, event.forked_from,
                           event.fork_point)
        self._session_id = event.session_id
        self._session_key = request.conversation_key
        if request.conversation_key is not None:
            self._known[request.conversation_key] = event.session_id
            self._known.move_to_end(request.conversation_key)
            while len(self._known) > _KNOWN_CONVERSATIONS:
                self._known.popitem(last=False)
        try:
            write_session_id(self.id_file, event.session_id)
        except OSError as exc:
            logger.warning("could not save the session id to %s (%s); it is held in memory "
                           "only, and the bridge can still recover it by conversation key",
                           self.id_file, exc)

    def _note_revision(self, session_id: str | None, revision: int | None) -> None:
        """Remember the most entries a turn of ``session_id`` ended with (``finish``); the
        next request naming the session sends it, and a bridge holding fewer warns."""
        if session_id is None or revision is None:
            return
        if revision > self._revisions.get(session_id, -1):
            self._revisions[session_id] = revision

    # -- running the request -----------------------------------------------------------

    async def _run(self, call: _Call) -> AsyncGenerator[Event, None]:
        """Spawn the bridge, send the request, yield events until ``finish``, reap."""
        process = await BridgeProcess.spawn(self.command, env=merged_env(self.env),
                                            max_frame_bytes=self.max_frame_bytes)
        call.process = process
        if self.timeout is not None:
            call.deadline = asyncio.get_running_loop().time() + self.timeout
        self._calls.add(call)
        try:
            await self._send_request(call, process)
            while not call.finished:
                line = await self._next_line(call, process)
                if not line:
                    await self._ended_early(call, process)
                    return
                event = await self._accept(call, process, line)
                if event is not None:
                    yield event
            await self._wind_down(process)
        except (asyncio.CancelledError, GeneratorExit):
            if call.finished:
                await self._wind_down(process)
            elif process.returncode is None:
                await self._escalate(call, lambda: self._drain(call, process))
            raise
        finally:
            self._calls.discard(call)
            try:
                await asyncio.shield(process.aclose())
            finally:
                call.result.exit_code = process.returncode
                call.result.stderr_tail = process.tail.text()
                call.done.set()

    async def _send_request(self, call: _Call, process: BridgeProcess) -> None:
        """Write the request line, within the deadline: a bridge that never reads its input
        would otherwise block a large request forever once the pipe is full."""
        try:
            sent = await asyncio.wait_for(process.write_line(encode_request(call.request)),
                                          self._remaining(call))
        except TimeoutError:
            raise await self._timed_out(call, process) from None
        if not sent:
            logger.debug("the bridge closed its input before reading the request")

    async def _next_line(self, call: _Call, process: BridgeProcess) -> bytes:
        try:
            return await asyncio.wait_for(process.read_line(), self._remaining(call))
        except TimeoutError:
            raise await self._timed_out(call, process) from None
        except ProtocolError as exc:
            raise await self._bad_line(process, exc, b"") from None

    @staticmethod
    def _remaining(call: _Call) -> float | None:
        if call.deadline is None:
            return None
        return max(0.0, call.deadline - asyncio.get_running_loop().time())

    async def _timed_out(self, call: _Call, process: BridgeProcess) -> BridgeError:
        if process.returncode is None:
            call.result.killed = True
        return await process.failure(
            f"the bridge did not finish the request within {self.timeout:g} s and was "
            "stopped (raise the provider's timeout if turns legitimately take longer)",
            grace=self.cancel_grace, signal_first=True, error_type=BridgeTimeoutError,
        )

    async def _accept(self, call: _Call, process: BridgeProcess, line: bytes,
                      ) -> Event | None:
        """Decode one line and fold it into the call; ``None`` for lines to skip."""
        try:
            event = decode_event(line, max_frame_bytes=self.max_frame_bytes)
        except ProtocolError as exc:
            if exc.code == ErrorCode.UNKNOWN_EVENT_TYPE:  # a newer bridge: skip, per protocol
                logger.debug("skipping an event of unknown type: %s", exc.message)
                return None
            raise await self._bad_line(process, exc, line) from None
        if event.request_id is not None and event.request_id != call.request.request_id:
            logger.warning("skipping an event for request %r while running %r",
                           event.request_id, call.request.request_id)
            return None
        call.result.record(event)
        if isinstance(event, SessionInit):
            self._adopt(call, event)
        elif isinstance(event, WarningEvent):
            logger.warning("bridge warning %s: %s", event.code, event.message)
        elif isinstance(event, ErrorEvent):
            logger.info("bridge error %s: %s", event.code, event.message)
        elif isinstance(event, Finish):
            call.finished = True
            self._note_revision(call.result.session_id, event.revision)
        return event

    async def _bad_line(self, process: BridgeProcess, exc: ProtocolError, line: bytes,
                        ) -> BridgeError:
        shown = line[:200].decode("utf-8", "replace").rstrip("\r\n")
        more = "..." if len(line) > 200 else ""
        what = f"the bridge wrote a line that is not a protocol event ({exc.code}: {exc.message})"
        if line:
            what += f": {shown!r}{more}"
        return await process.failure(what, grace=min(self.cancel_grace, 1.0))

    async def _ended_early(self, call: _Call, process: BridgeProcess) -> None:
        """Output ended before ``finish``: expected after a cancel, a failure otherwise."""
        if call.cancel_requested:
            await process.stop(self.cancel_grace)
            if call.result.finish_reason is None:
                call.result.finish_reason = FinishReason.CANCELLED
            logger.warning("the bridge for request %s ended without a finish event after "
                           "being cancelled (%s)", call.request.request_id,
                           describe_exit(process.returncode))
            return
        raise await process.failure("the bridge closed its output before finishing the request",
                                    grace=self.cancel_grace)

    async def _wind_down(self, process: BridgeProcess) -> None:
        """After ``finish``: end input and let the bridge exit on its own."""
        await process.close_stdin()
        if not await process.wait(self.cancel_grace):
            logger.warning("the bridge was still running %g s after finishing; stopping it",
                           self.cancel_grace)
            await process.stop(self.cancel_grace, signal_first=True)
        if process.returncode:
            logger.warning("the bridge exited with %s after finishing the request",
                           describe_exit(process.returncode))

    async def _escalate(self, call: _Call, until: Callable[[], Awaitable[object]]) -> None:
        """Stop a running request: ``cancel`` line, then SIGTERM, then SIGKILL.

        Each step waits up to ``cancel_grace`` for ``until`` (the request ending) first.
        """
        process = call.process
        if process is None:
            return
        call.cancel_requested = True
        if not call.cancel_sent:
            call.cancel_sent = True
            cancel = encode_request(CancelRequest(request_id=call.request.request_id))
            with contextlib.suppress(TimeoutError):  # a bridge that reads no more input
                await asyncio.wait_for(process.write_line(cancel), self.cancel_grace)
        for step in (None, process.terminate, process.kill):
            if step is not None:
                if process.returncode is None:
                    call.result.killed = True
                step()
            try:
                await asyncio.wait_for(until(), self.cancel_grace)
                return
            except TimeoutError:
                continue

    async def _drain(self, call: _Call, process: BridgeProcess) -> None:
        """Read on until ``finish`` or end of output, still adopting a reported session."""
        try:
            while not call.finished:
                line = await process.read_line()
                if not line:
                    return
                await self._accept(call, process, line)
        except (BridgeError, ProtocolError) as exc:
            logger.warning("while cancelling request %s: %s", call.request.request_id, exc)


def _as_message(message: MessageLike, index: int) -> Message:
    if isinstance(message, Message):
        return message
    try:
        return Message.model_validate(dict(message))
    except (ValidationError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"messages[{index}] is not a message: {exc}") from None


def _as_tool(tool: ToolLike, index: int) -> HostToolSpec:
    if isinstance(tool, HostToolSpec):
        return tool
    try:
        return HostToolSpec.model_validate(dict(tool))
    except (ValidationError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"tools[{index}] is not a tool spec: {exc}") from None
