"""HTTP and Server-Sent Events plumbing shared by the streaming model adapters.

The Chat Completions adapter (``nonoka.llm.openai``), the Responses API adapter
(``nonoka.llm.responses``) and the Messages API adapter (``nonoka.llm.anthropic``) post
one JSON body and read a stream of ``data:`` events; a ``Dialect`` says how a vendor's
error answers, last event and variables differ. What they share lives here: the
reading of a stream's events and its limits (``Reading``, whichever way the answer is
read; a server reads it on its event loop, ``nonoka.llm.loop_exchange``); the
blocking exchange on a daemon worker thread (one the process keeps, when it passes its
``nonoka.llm.workers.Workers``), whose parsed events cross to the event loop
through an ``asyncio.Queue``, those of one socket read in one batch (so sinks run on
the loop thread, the loop wakes once a read, not once an event, and cancelling the
awaiting task shuts the socket down, which ends the worker at once); the retry loop
(rate limits, 5xx, timeouts and dropped connections, only while nothing has been
delivered to the caller); how an HTTP error, a network failure and a ``Retry-After``
header become a ``ModelError`` (status, the provider's body, the key masked); and
pricing a call at explicit or catalog prices.

Standard library only, plus ``nonoka.errors``; ``http.client`` and ``socket`` are loaded
when a request is made.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import random
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from nonoka.errors import ConfigurationError, ModelError
from nonoka.llm.base import USAGE_INVALID, CompletesWithOptions, ModelWarning

if TYPE_CHECKING:
    import http.client
    import socket

    from nonoka.llm.base import TextSink
    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.connections import Connections
    from nonoka.llm.inflight import EarlyRequest
    from nonoka.llm.workers import Call, Workers

RETRYABLE_STATUSES = frozenset({408, 409, 429})  # plus every 5xx; the same set as the SDK
UNREACHABLE_RETRIES = 1
"""Retries of an endpoint that refused the connection or whose name does not resolve."""
MAX_RETRY_WAIT = 30.0  # seconds; a longer Retry-After is better handled by the caller
MAX_ERROR_BODY = 64 * 1024
EXCERPT_CHARS = 300
READ_SIZE = 64 * 1024
"""The most one read of a stream takes from the socket."""
DRAIN_SECONDS = 1.0
DRAIN_BYTES = 64 * 1024
"""After an answer's last event, what the worker waits for and reads of the rest of the
response (the chunked stream's end) before it keeps the connection for the next call; a
response that does not end within them closes its connection instead."""


@dataclass(frozen=True)
class StreamLimits:
    """How long and how large one streamed answer may be (each attempt's own).

    ``stall``: seconds without progress: keep-alive pings, SSE comments and blank lines
    are not progress, only events that carry something are. ``deadline``: seconds for the
    whole exchange, from the request to the answer's last event. ``max_event_bytes``: the
    most one line or one event may hold (a server that never ends its line must not grow
    the process without bound). Each, exceeded, ends the attempt with a one-line error
    naming it and its variable (``from_environ``)."""

    stall: float = 300.0
    deadline: float = 3600.0
    max_event_bytes: int = 32 * 1024 * 1024

    VARIABLES = {"stall": "NONOKA_STREAM_STALL_SECONDS",
                 "deadline": "NONOKA_STREAM_DEADLINE_SECONDS",
                 "max_event_bytes": "NONOKA_STREAM_MAX_EVENT_BYTES"}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> StreamLimits:
        """The defaults, with each limit its variable sets (a positive number)."""
        values: dict[str, Any] = {}
        for name, variable in cls.VARIABLES.items():
            raw = environ.get(variable, "").strip()
            if not raw:
                continue
            try:
                value = float(raw)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"{variable}={raw!r} is not a positive number; "
                                         "unset it or give a number such as "
                                         f"{getattr(cls, name):g}")
            values[name] = int(value) if name == "max_event_bytes" else value
        return cls(**values)


class Failure(Exception):
    """Why one attempt failed; turned into a ``ModelError`` once retrying is over."""

    def __init__(self, detail: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None, unreachable: bool = False,
                 body: object = None, connection: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.connection = connection
        """The connection failed (a timeout, a stall, a hang-up), not the answer: after
        a whole answer arrived, it costs nothing (``Transport._attempt``)."""
        self.body = body
        """The provider's error body (decoded JSON, or its text), as it gave it."""
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.unreachable = unreachable
        """Nobody answers at the address: worth one quick retry (a restarting server), no more."""


class Endpoint(Protocol):
    """Where a request goes (``nonoka.llm.wire.Endpoint``, or a vendor's own)."""

    scheme: str
    """``http`` or ``https``."""
    host: str
    port: int
    path: str
    """The request target, including any query string."""
    url: str
    """For messages: no credentials, no query."""

    def connection(self, timeout: float) -> http.client.HTTPConnection: ...


class HTTPModel(CompletesWithOptions):
    """What every HTTP adapter shares: ``model`` at ``_endpoint``, named
    ``PROVIDER:model`` unless ``_label`` says otherwise, shown without its key."""

    PROVIDER = ""
    """The prefix of the model's name (``openai``, ``anthropic``, ...)."""
    model: str
    _endpoint: Endpoint
    _label: str | None

    @property
    def name(self) -> str:
        return self._label or f"{self.PROVIDER}:{self.model}"

    @property
    def endpoint(self) -> str:
        """The URL this model posts to (without any query string)."""
        return self._endpoint.url

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(model={self.model!r}, endpoint={self._endpoint.url!r})"


class ErrorAnswer(Protocol):
    """What a dialect reads of an error answer: an ``http.client.HTTPResponse``, or the
    same read on the event loop (``nonoka.llm.loop_exchange``)."""

    status: int
    reason: str

    def read(self, amt: int | None = None) -> bytes: ...

    def getheader(self, name: str) -> str | None: ...


END = object()  # the worker is finished
DONE = object()  # the server sent ``data: [DONE]``


class Accumulator(Protocol):
    """What an adapter builds its answer in, one attempt at a time."""

    delivered: bool
    """Something reached the caller's sink, so retrying would repeat it."""

    done: bool
    """The server sent ``data: [DONE]``."""

    async def feed(self, event: dict[str, Any], on_text: TextSink | None) -> None:
        """Take one decoded ``data:`` payload; raise ``Failure`` for an error event."""
        ...

    def complete(self) -> bool:
        """Whether a whole answer arrived (a stream that ends before it is retried)."""
        ...


S = TypeVar("S", bound=Accumulator)


@dataclass(frozen=True)
class Dialect:
    """What differs between the vendors' streaming APIs on the wire."""

    base_url_variable: str = "OPENAI_BASE_URL"
    """The variable that sets the endpoint, named when nobody answers there."""
    key_variable: str | None = None
    """The variable that sets the key, named when the endpoint answers 401."""
    failure: Callable[[ErrorAnswer], Failure] | None = None
    """How an error answer reads (``http_failure``, OpenAI's shape, when ``None``)."""
    last_event: Callable[[Any], bool] | None = None
    """Whether a decoded payload ends the stream (besides ``data: [DONE]``)."""


OPENAI = Dialect()


class Transport:
    """Posts a body to one endpoint and streams the answer into an ``Accumulator``,
    retrying what is worth retrying; failures become ``ModelError``."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str], api_key: str | None, *,
                 timeout: float, max_retries: int, backoff_base: float,
                 thread_name: str, dialect: Dialect = OPENAI,
                 limits: StreamLimits | None = None, workers: Workers | None = None) -> None:
        """``workers``: the process's threads for exchanges (``nonoka.llm.workers``);
        without them each exchange starts a thread of its own."""
        self.endpoint = endpoint
        self._workers = workers
        self.dialect = dialect
        if limits is None:
            import os

            limits = StreamLimits.from_environ(os.environ)
        self.limits = limits
        self.headers = headers
        self._api_key = api_key
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._backoff_base = backoff_base
        self._thread_name = thread_name

    async def run(self, body: bytes, new_stream: Callable[[], S], on_text: TextSink | None,
                  early: EarlyRequest | None = None) -> S:
        """The stream of the first attempt that yields a whole answer. ``early``: the
        same request, already sent by the bridge; its answer is read instead of posting."""
        attempt = 0
        while True:
            stream = new_stream()
            try:
                await self._attempt(body, stream, on_text, early)
                return stream
            except Failure as failure:
                early = None  # a retry posts afresh
                budget = min(self._max_retries, UNREACHABLE_RETRIES if failure.unreachable
                             else self._max_retries)
                if not failure.retryable or stream.delivered or attempt >= budget:
                    raise self.error(failure, attempt + 1) from None
                await asyncio.sleep(self._wait(attempt, failure.retry_after))
                attempt += 1

    async def _attempt(self, body: bytes, stream: Accumulator, on_text: TextSink | None,
                       early: EarlyRequest | None = None) -> None:
        """One HTTP exchange; raises ``Failure`` when it did not yield a whole answer."""
        call = self._start(body, early)
        batches = call.batches()
        ended = False
        try:
            async for items in batches:
                for item in items:
                    if item is END:
                        ended = True
                        break
                    if isinstance(item, Failure):
                        if item.connection and stream.complete():
                            return  # the whole answer is here: a server that idles after it
                        raise item
                    if item is DONE:
                        stream.done = True
                    elif isinstance(item, dict):
                        await stream.feed(item, on_text)
                if ended:
                    break
        finally:
            if not ended:  # a failure or a cancel: the connection is not kept either
                call.abort()
            await batches.aclose()
        if not stream.complete():
            raise Failure("the stream ended before the answer was complete", retryable=True)

    def _start(self, body: bytes, early: EarlyRequest | None) -> Call:
        """The exchange, under way: on the event loop when the process's workers say so
        (``Workers.on_loop``) and the request is not one the bridge already sent; else on
        a worker thread."""
        workers = self._workers
        if early is None and workers is not None and workers.on_loop is not None:
            call: Call = workers.on_loop(self.endpoint, body, self.headers, self._timeout,
                                         self.dialect, self.limits)
            return call
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[object]] = asyncio.Queue()

        def post(items: list[object]) -> None:
            with suppress(RuntimeError):  # the loop is gone: nobody is listening any more
                loop.call_soon_threadsafe(queue.put_nowait, items)

        exchange = Exchange(self.endpoint, body, self.headers, self._timeout, post, early,
                            self.dialect, self.limits,
                            None if workers is None else workers.connections)
        if workers is not None:
            workers.run(exchange.run, self._thread_name)
        else:
            threading.Thread(target=exchange.run, name=self._thread_name, daemon=True).start()
        return _ThreadCall(queue, exchange)

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_WAIT)
        delay = min(self._backoff_base * 2.0**attempt, MAX_RETRY_WAIT)
        return delay * random.uniform(0.5, 1.0)  # jitter spreads out synchronized retries

    def error(self, failure: Failure, attempts: int) -> ModelError:
        """The ``ModelError`` for ``failure`` after ``attempts`` attempts (key masked)."""
        url = self.endpoint.url
        status = f" HTTP {failure.status}" if failure.status is not None else ""
        message = f"model endpoint {url} failed{status}: {failure.detail}"
        if failure.status == 401 and self.dialect.key_variable:
            message += f" (check {self.dialect.key_variable})"
        if attempts > 1:
            message += f" (gave up after {attempts} attempts)"
        if self._api_key:
            message = message.replace(self._api_key, "***")
        body = failure.body if isinstance(failure.body, str) else (
            None if failure.body is None else json.dumps(failure.body))
        if body is not None and self._api_key:
            body = body.replace(self._api_key, "***")
        return ModelError(message, endpoint=url, status=failure.status,
                          retryable=failure.retryable, body=body,
                          retry_after=failure.retry_after)


class Pricing:
    """What a call cost: at explicit prices per million tokens, else at the catalog's
    (cached input at its cache-read rate, cache writes at the write rate)."""

    def __init__(self, input_price: float | None, output_price: float | None,
                 known: KnownModel | None) -> None:
        self._prices = (input_price, output_price)
        self._known = known

    def cost(self, input_tokens: int, output_tokens: int, cached: int = 0,
             written: int = 0) -> float | None:
        """US dollars; ``None`` when no price is known."""
        input_price, output_price = self._prices
        if input_price is not None or output_price is not None:
            return (input_tokens * (input_price or 0.0)
                    + output_tokens * (output_price or 0.0)) / 1e6
        if self._known is None:
            return None
        from nonoka.llm.catalog import cost

        cached = min(cached, input_tokens)
        return cost(self._known, input_tokens=input_tokens, output_tokens=output_tokens,
                    cached_tokens=cached,
                    cache_write_tokens=min(written, input_tokens - cached))


async def tell(sink: Callable[[str], Any] | None, text: str) -> None:
    """Hand ``text`` to a sync or async sink."""
    if sink is not None:
        outcome = sink(text)
        if inspect.isawaitable(outcome):
            await outcome


MAX_TOKENS_PER_CALL = 10**9
"""More tokens than any model call uses (a thousand times the largest context windows):
a count beyond it is a broken report, not a count."""
MAX_COST_PER_CALL = 1e6
"""US dollars: a reported cost beyond it is a broken report."""


class UsageCheck:
    """What an endpoint reported as a call's usage, checked before anything counts it:
    every adapter reads its counts and cost through one of these (``count``, ``cost``).

    A count must be a whole number from 0 to ``MAX_TOKENS_PER_CALL``: a negative one,
    NaN, an infinity, a string, or one beyond any call is counted as 0; a fractional
    one is rounded down. A reported cost must be a finite number from 0 to
    ``MAX_COST_PER_CALL``, else it is unknown (the catalog's prices apply). The answer
    itself is always kept; ``warning`` says what was not counted, once per call."""

    def __init__(self) -> None:
        self.problems: dict[str, str] = {}

    def count(self, value: object, name: str) -> int:
        """``value`` as a token count (0 when absent or not one)."""
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int | float):
            return self._bad(name, value, "is not a number")
        if isinstance(value, float) and not math.isfinite(value):
            return self._bad(name, value, "is not a finite number")
        if value < 0:
            return self._bad(name, value, "is negative")
        if value > MAX_TOKENS_PER_CALL:
            return self._bad(name, value, "is more than any call uses")
        if isinstance(value, float) and not value.is_integer():
            self.problems[name] = f"{name}={_shown(value)} is not a whole number (rounded down)"
        return int(value)

    def cost(self, value: object, name: str = "cost") -> float | None:
        """``value`` as a cost in US dollars (``None`` when absent or not one)."""
        if value is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or not 0 <= value <= MAX_COST_PER_CALL):
            self.problems[name] = f"{name}={_shown(value)} is not a cost (ignored)"
            return None
        return float(value)

    def _bad(self, name: str, value: object, why: str) -> int:
        self.problems[name] = f"{name}={_shown(value)} {why} (counted as 0)"
        return 0

    def warnings(self, endpoint: str) -> tuple[ModelWarning, ...]:
        """The call's warning about its usage, if anything was not counted."""
        if not self.problems:
            return ()
        listed = "; ".join(self.problems.values())
        return (ModelWarning(USAGE_INVALID, (
            f"the model endpoint {endpoint} reported usage that is not a token count: "
            f"{listed}; the answer is kept, and the session's ledger counts what was "
            "valid (check the endpoint's usage reporting)"),
            {"endpoint": endpoint, "fields": sorted(self.problems)}),)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"



def retryable(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
"""How a kept connection the server closed while it waited fails when a request is sent
on it, before any byte of an answer (``http.client.RemoteDisconnected`` is a
``ConnectionResetError``)."""

KEEPALIVE_TYPES = frozenset({"ping", "keepalive", "keep-alive", "heartbeat"})
"""Event ``type``s that only keep a connection open (Anthropic's ``ping``): not progress."""


class Reading:
    """What one exchange has read of an answer, however it reads (a worker thread's
    ``Exchange``, or ``nonoka.llm.loop_exchange`` on the event loop): the ``data:``
    events parsed from the bytes as they arrive, each payload decoded into the items a
    caller takes a batch at a time (``DONE`` for ``[DONE]``, a ``Failure``, ``END``), and
    the ``limits``' clock: a line or event larger than ``max_event_bytes``, no progress
    for ``stall`` seconds (pings and comments are not progress) or an exchange longer
    than ``deadline`` ends it with a ``Failure``; each wait for more is given the
    connection's ``timeout`` unless one of those comes first.

    Every payload is one JSON object (the ``event:`` lines are not needed: every payload
    names its own type); comments (``: ping``) and other fields are skipped."""

    def __init__(self, dialect: Dialect, limits: StreamLimits, timeout: float) -> None:
        self.dialect = dialect
        self.limits = limits
        self.timeout = timeout
        self.clean_end = False
        """The answer's last event arrived and no event was an error."""
        self.error_seen = False
        now = time.monotonic()
        self._deadline_at = now + limits.deadline
        self._progress_at = now
        self.bound = "timeout"
        """Which limit the current wait stands for."""
        self.out: list[object] = []
        """What the next batch hands over."""
        self._pending = bytearray()  # the line not ended yet
        self._data: list[bytes] = []  # the event's data lines so far
        self._held = 0  # their size

    def post(self, item: object) -> None:
        self.out.append(item)

    def take(self) -> list[object]:
        """The items since the last batch."""
        items, self.out = self.out, []
        return items

    def feed(self, piece: bytes) -> bool:
        """Parse what one read brought; ``True`` once the answer's last event came (read
        no further)."""
        pending = self._pending
        searched = len(pending)
        pending += piece
        start = 0
        while (end := pending.find(b"\n", max(start, searched))) >= 0:
            line = bytes(pending[start:end]).rstrip(b"\r")
            start = end + 1
            if line.startswith(b"data:"):
                self._data.append(line[5:].strip())
                self._held += len(line)
            elif not line and self._data:  # a blank line ends an event
                payload = b"\n".join(self._data)
                self._data, self._held = [], 0
                if self.dispatch(payload):
                    return True
        del pending[:start]
        limit = self.limits.max_event_bytes
        if self._held + len(pending) > limit:
            raise Failure(
                f"the endpoint sent a line or event of over {limit:,} bytes "
                f"({StreamLimits.VARIABLES['max_event_bytes']}) without ending it: it "
                "is not streaming the API's events; check the model's base URL "
                f"({self.dialect.base_url_variable})")
        return False

    def ended(self) -> None:
        """The stream ended: an event it did not end with a blank line still counts."""
        if self._pending.startswith(b"data:"):
            self._data.append(bytes(self._pending[5:]).strip())
        if self._data:
            self.dispatch(b"\n".join(self._data))

    def dispatch(self, payload: bytes) -> bool:
        if payload == b"[DONE]":
            self.post(DONE)
            self.clean_end = True
            return True
        event = json.loads(payload)
        if not _keepalive(event):
            self._progress_at = time.monotonic()
        if _error_event(event):
            self.error_seen = True
        self.post(event)
        last = self.dialect.last_event
        if last is not None and last(event):
            self.clean_end = True
            return True
        return False

    def next_wait(self) -> float:
        """The time the next read may wait: the connection timeout, unless the stall or
        the deadline comes first (then raise, if it has come already)."""
        now = time.monotonic()
        left = {"timeout": self.timeout, "deadline": self._deadline_at - now,
                "stall": self._progress_at + self.limits.stall - now}
        self.bound = min(left, key=lambda name: left[name])
        if left[self.bound] <= 0:
            failure = self.expired()
            assert failure is not None
            raise failure
        return left[self.bound]

    def expired(self) -> Failure | None:
        """The failure of a stall or deadline the last wait stood for."""
        limits = self.limits
        if self.bound == "deadline":
            return Failure(
                f"the answer was still streaming after {limits.deadline:g}s, the most one "
                f"answer may take ({StreamLimits.VARIABLES['deadline']}); ask for a shorter "
                "answer or raise that limit")
        if self.bound == "stall":
            return Failure(
                f"the stream made no progress for {limits.stall:g}s (only keep-alive pings "
                "or comments, or nothing, arrived): the endpoint seems stuck; try again, or "
                f"raise {StreamLimits.VARIABLES['stall']} for a model that is slow to start",
                retryable=True, connection=True)
        return None

    def failed(self, exc: Exception, endpoint: Endpoint) -> Failure:
        """The ``Failure`` an exception that ended the exchange stands for."""
        if isinstance(exc, Failure):
            return exc
        if isinstance(exc, TimeoutError):
            return self.expired() or Failure(
                f"no answer within {self.timeout:g}s (timeout)", retryable=True,
                connection=True)
        if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):  # not JSON
            return Failure(f"the server sent an invalid stream: {excerpt(str(exc))}")
        # connection refused/reset, TLS, protocol errors
        unreachable = _unreachable_detail(exc, endpoint, self.dialect.base_url_variable)
        if unreachable is not None:
            return Failure(unreachable, retryable=True, unreachable=True)
        return Failure(_connection_detail(exc), retryable=_retryable_exception(exc),
                       connection=True)


class _ThreadCall:
    """An ``Exchange`` on a worker thread: its batches cross to the loop in a queue."""

    def __init__(self, queue: asyncio.Queue[list[object]], exchange: Exchange) -> None:
        self._queue = queue
        self._exchange = exchange

    async def batches(self) -> AsyncGenerator[list[object], None]:
        while True:
            yield await self._queue.get()

    def abort(self) -> None:
        self._exchange.abort()


class Exchange:
    """One blocking request/response on the worker thread; results go through ``post``,
    in order, a list at a time (what one socket read brought, and the last with
    ``END``): each ``data:`` payload decoded, ``DONE`` for ``[DONE]``, a ``Failure``,
    then ``END`` (``Reading``).

    With ``connections`` (the process's ``nonoka.llm.connections.Connections``) the
    request goes on an idle kept connection to the endpoint when there is one (a kept
    connection found closed when sending, before any byte of an answer, is replaced by a
    fresh one, once), and after ``END`` the connection is kept again if the answer ended
    cleanly (``[DONE]`` or the dialect's last event, no error event), the response was
    read to its end and the server did not ask to close it; never after a failure, a
    cancel (``abort``) or a partial read.

    The stream is read as it arrives (``read1``, never a whole line at once), so the
    ``limits`` hold whatever the server sends."""

    def __init__(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
                 timeout: float, post: Callable[[list[object]], None],
                 early: EarlyRequest | None = None, dialect: Dialect = OPENAI,
                 limits: StreamLimits | None = None,
                 connections: Connections | None = None) -> None:
        self._endpoint = endpoint
        self._connections = connections
        self._reading = Reading(dialect, limits or StreamLimits(), timeout)
        self._early = early
        self._body = body
        self._headers = headers
        self._timeout = timeout
        self._send_out = post
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._aborted = False

    def abort(self) -> None:
        """Wake the worker out of any blocking read (called from the loop thread)."""
        import socket

        with self._lock:
            self._aborted = True
            sock = self._sock
        if sock is not None:
            with suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        kept: tuple[http.client.HTTPConnection, http.client.HTTPResponse] | None = None
        reading = self._reading
        try:
            kept = self._exchange()
            if kept is not None:
                with self._lock:  # from here on a cancel has nothing to interrupt
                    if self._aborted:
                        _closed(*kept)
                        kept = None
                    else:
                        self._sock = None
        except Exception as exc:
            reading.post(reading.failed(exc, self._endpoint))
        finally:
            reading.post(END)
            self._flush()
            if kept is not None:
                self._keep(*kept)

    def _flush(self) -> None:
        """Hand what was posted since the last flush to the loop, in one call."""
        if self._reading.out:
            self._send_out(self._reading.take())

    def _keep(self, conn: http.client.HTTPConnection,
              response: http.client.HTTPResponse) -> None:
        """Read the rest of the response (its end, after the last event) and keep the
        connection for the next call; close it if the response does not end at once or
        the server asked to close."""
        connections = self._connections
        assert connections is not None
        ended = False
        try:
            sock = conn.sock
            if sock is not None and not response.will_close:
                until = time.monotonic() + DRAIN_SECONDS
                left = DRAIN_BYTES
                while not response.isclosed() and left > 0:
                    if not response.chunked and response.length == 0:
                        response.close()  # a sized body read to its end
                        break
                    wait = until - time.monotonic()
                    if wait <= 0:
                        break
                    sock.settimeout(wait)
                    piece = response.read1(left)
                    if not piece:
                        break
                    left -= len(piece)
                ended = response.isclosed() and conn.sock is not None
        except Exception:  # a hang-up, a timeout: the connection is no use
            ended = False
        with self._lock:
            ended = ended and not self._aborted
        if ended:
            connections.give(_key(self._endpoint), conn)
        else:
            _closed(conn, response)

    def _exchange(self) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse] | None:
        """The exchange; the connection and its response when the connection may be
        kept (``_keep``), else ``None`` (the connection closed)."""
        early = self._early
        connections = self._connections
        taken = None if early is not None or connections is None else connections.take(
            _key(self._endpoint))
        reused = taken is not None
        if early is not None:
            conn = early.sent()
        elif taken is not None:
            conn = taken
            if conn.sock is not None:
                conn.sock.settimeout(self._timeout)
        else:
            conn = self._open()
        kept = False
        try:
            if not self._adopt(conn):
                return None
            if early is not None:
                self._wait_next()
                response = conn.getresponse()
            elif not reused:
                response = self._send(conn)
            else:
                try:
                    response = self._send(conn)
                except STALE:  # the server closed it while it waited: not sent, try anew
                    conn.close()
                    conn = self._open()
                    if not self._adopt(conn):
                        return None
                    response = self._send(conn)
            try:
                if response.status != 200:
                    raise (self._reading.dialect.failure or http_failure)(response)
                self._read_events(response)
                kept = (early is None and connections is not None
                        and self._reading.clean_end and not self._reading.error_seen)
            finally:
                if not kept:
                    response.close()  # it holds the socket when the server said "close"
        finally:
            if not kept:
                conn.close()
        return (conn, response) if kept else None

    def _open(self) -> http.client.HTTPConnection:
        """A new connection to the endpoint (counted by the kept connections)."""
        conn = self._endpoint.connection(self._timeout)
        conn.connect()
        if self._connections is not None:
            self._connections.counted()
        return conn

    def _adopt(self, conn: http.client.HTTPConnection) -> bool:
        """Let ``abort`` reach ``conn``'s socket; ``False`` when already aborted."""
        with self._lock:
            self._sock = conn.sock
            return not self._aborted

    def _send(self, conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
        conn.request("POST", self._endpoint.path, self._body, self._headers)
        self._wait_next()
        return conn.getresponse()

    def _wait_next(self) -> None:
        """Give the next socket read the time left (``Reading.next_wait``)."""
        wait = self._reading.next_wait()
        sock = self._sock
        if sock is not None:
            sock.settimeout(wait)

    def _read_events(self, response: http.client.HTTPResponse) -> None:
        """Read the stream into ``Reading``; stops at the dialect's last event."""
        import http.client

        reading = self._reading
        while True:
            self._flush()  # the events of the last read, before waiting for more
            self._wait_next()
            try:
                piece = response.read1(READ_SIZE)
            except http.client.IncompleteRead:  # hung up mid-chunk: the stream ends here
                piece = b""
            if not piece:
                break
            if reading.feed(piece):
                return
        reading.ended()


def _error_event(event: object) -> bool:
    """Whether a decoded payload reports an error (its connection is not kept)."""
    return isinstance(event, dict) and (
        event.get("type") in ("error", "response.failed") or event.get("error") is not None)


def _key(endpoint: Endpoint) -> tuple[str, str, int]:
    return (endpoint.scheme, endpoint.host, endpoint.port)


def _closed(conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
    response.close()
    conn.close()


def _keepalive(event: object) -> bool:
    """Whether a decoded payload only keeps the connection open (``{}``, a ``ping``)."""
    if not isinstance(event, dict):
        return False
    kind = event.get("type")
    return not event or (isinstance(kind, str) and kind in KEEPALIVE_TYPES)


def http_failure(response: ErrorAnswer) -> Failure:
    body = response.read(MAX_ERROR_BODY).decode("utf-8", "replace")
    detail = body
    try:
        error = json.loads(body).get("error")
        detail = str(error.get("message") or error) if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        pass
    return Failure(excerpt(detail) or response.reason or "no details", status=response.status,
                   retryable=retryable(response.status) and not _quota(body),
                   retry_after=retry_after(response), body=body)


def _quota(body: str) -> bool:
    """Whether a 429 says the quota is spent: waiting does not help (OpenAI's
    ``insufficient_quota``)."""
    return "insufficient_quota" in body


def retry_after(response: ErrorAnswer) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` (OpenAI) or ``Retry-After`` in seconds."""
    for header, scale in (("retry-after-ms", 1000.0), ("Retry-After", 1.0)):
        value = response.getheader(header)
        if value:
            try:
                return float(value) / scale
            except ValueError:
                continue  # an HTTP date; plain backoff is good enough
    return None


def _connection_detail(exc: Exception) -> str:
    import http.client

    text = str(exc) or type(exc).__name__
    if isinstance(exc, http.client.IncompleteRead | http.client.RemoteDisconnected):
        text = f"the server closed the connection ({type(exc).__name__})"
    return f"could not talk to the server: {excerpt(text)}"


def _unreachable_detail(exc: Exception, endpoint: Endpoint, variable: str) -> str | None:
    """Words for an endpoint nobody answers at (refused, unknown host, no route), or None.

    Worded without the phrases hosts such as OpenCode read as "retry me" (e.g. "connection
    refused"): nonoka has already retried, and a host's own retries of a dead address only
    make a person wait a minute and a half for the same answer.
    """
    import errno
    import socket

    where = f"{endpoint.host}:{endpoint.port}"
    if isinstance(exc, socket.gaierror):
        return (f"the host name {endpoint.host!r} does not resolve ({exc.strerror or exc}); "
                f"check the model's base URL ({variable})")
    if isinstance(exc, ConnectionRefusedError):
        return (f"nothing accepts connections at {where}; is the model server running, and "
                f"is the model's base URL ({variable}) right?")
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"no route to {where} ({exc.strerror}); check the model's base URL ({variable})"
    return None


def _retryable_exception(exc: Exception) -> bool:
    """Network trouble is worth retrying; a TLS certificate problem never fixes itself."""
    import http.client
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return False
    return isinstance(exc, OSError | EOFError | http.client.HTTPException)


def excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"
