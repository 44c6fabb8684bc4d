"""OpenAI-compatible Chat Completions adapter, built on the standard library only.

Why no SDK: every model step may run in a freshly spawned process, so import time is paid
on every step. The ``openai`` SDK costs ~370 ms to import and ``httpx`` ~100 ms, while
``http.client`` plus ``ssl`` cost ~20 ms and are imported only when a request is made.

The blocking HTTP exchange runs on a daemon worker thread (it never keeps a finished
process alive). Parsed stream chunks cross to the event loop through an ``asyncio.Queue``,
so ``on_text`` always runs on the loop thread. Cancelling the awaiting task shuts the
socket down, which ends the worker at once.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nonoka.errors import ModelError
from nonoka.llm.base import (
    CallOptions,
    ModelResponse,
    ReasoningSink,
    TextSink,
    ToolSpec,
    Usage,
)
from nonoka.llm.wire import (
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    OPENAI_COMPATIBLE,
    BodyFrame,
    Endpoint,
    check_key,
    file_parts,
    request_headers,
    tool_files_message,
    wire_message,
)
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message, ReasoningPart, ToolCall
from nonoka.state.prefix_memo import ConversationPasses, PrefixMemo

if TYPE_CHECKING:
    import http.client
    import socket

    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.inflight import EarlyRequest, Inflight

__all__ = ["DEFAULT_BASE_URL", "OpenAIChatModel"]

RETRYABLE_STATUSES = frozenset({408, 409, 429})  # plus every 5xx; the same set as the SDK
UNREACHABLE_RETRIES = 1
"""Retries of an endpoint that refused the connection or whose name does not resolve."""
MAX_RETRY_WAIT = 30.0  # seconds; a longer Retry-After is better handled by the caller
MAX_ERROR_BODY = 64 * 1024
EXCERPT_CHARS = 300


class OpenAIChatModel:
    """A ``ChatModel`` for any OpenAI-compatible endpoint (OpenAI, DeepSeek, vLLM, Ollama,
    llama.cpp, OpenRouter), always streaming.

    ``timeout`` bounds connecting and every wait for the next bytes, not the whole answer.
    ``max_retries`` retries rate limits, 5xx, timeouts and dropped connections, but only
    while no text has reached ``on_text`` yet, so streamed text is never duplicated.
    It implements ``AdoptsInflight``: it says which request it would send, and answers
    from a request the bridge already sent when its own is byte for byte the same.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        label: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        input_price_per_mtok: float | None = None,
        output_price_per_mtok: float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        passes: ConversationPasses | None = None,
        send_reasoning: bool = False,
        known: KnownModel | None = None,
    ) -> None:
        """``passes``: where the encoding of a growing conversation stopped last, when
        the process keeps it between turns (``ConversationPasses.wire``).
        ``send_reasoning``: the provider wants an assistant message's reasoning back in
        the field it came in (DeepSeek's thinking mode refuses a tool loop without it);
        other providers ignore or refuse the field, so it is not sent to them.
        ``known``: the catalog's entry (``nonoka.llm.catalog``), whose prices — cache
        rates included — cost each call unless the server reports a cost itself."""
        self.model = model
        self._send_reasoning = send_reasoning
        self._wire_memo = None if passes is None else passes.wire
        self._endpoint = Endpoint.parse(
            base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        )
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        check_key(self._endpoint, self._api_key)
        self._label = label
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._backoff_base = backoff_base
        self._prices = (input_price_per_mtok, output_price_per_mtok)
        self._known = known
        self._headers = request_headers(self._api_key, extra_headers)
        self._inflight: Inflight | None = None

    @property
    def name(self) -> str:
        return self._label or f"openai:{self.model}"

    @property
    def endpoint(self) -> str:
        """The chat completions URL this model posts to (without any query string)."""
        return self._endpoint.url

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatModel(model={self.model!r}, endpoint={self._endpoint.url!r})"

    def adopt(self, inflight: Inflight) -> None:
        """Answer the next call from ``inflight``'s request if it is the one this call
        sends; otherwise that request is closed unread and this model sends its own."""
        self._inflight = inflight

    def frame(self, tools: Sequence[ToolSpec] = (),
              options: CallOptions | None = None) -> BodyFrame:
        """The request body around its messages, for ``tools`` and ``options``."""
        return BodyFrame.chat(self.model, [t.to_openai() for t in tools],
                              options.wire_fields() if options is not None else None)

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                     options: CallOptions | None = None) -> bytes:
        """The exact bytes :meth:`complete_with` posts for ``messages``, ``tools`` and
        ``options``."""
        return self.frame(tools, options).body(
            encoded_messages(messages, self._wire_memo)).encode()

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
    ) -> ModelResponse:
        return await self.complete_with(messages, tools, on_text=on_text)

    async def complete_with(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
        on_reasoning: ReasoningSink | None = None,
        options: CallOptions | None = None,
    ) -> ModelResponse:
        body = self.request_body(messages, tools, options)
        inflight, self._inflight = self._inflight, None
        early = None if inflight is None else inflight.claim(self._endpoint, body, self._headers)
        attempt = 0
        while True:
            stream = _Stream(send_reasoning=self._send_reasoning, on_reasoning=on_reasoning)
            try:
                await self._attempt(body, stream, on_text, early)
                return stream.response(self.model, self._cost)
            except _Failure as failure:
                early = None  # a retry posts afresh
                budget = min(self._max_retries, UNREACHABLE_RETRIES if failure.unreachable
                             else self._max_retries)
                if not failure.retryable or stream.delivered or attempt >= budget:
                    raise self._error(failure, attempt + 1) from None
                await asyncio.sleep(self._wait(attempt, failure.retry_after))
                attempt += 1

    async def _attempt(self, body: bytes, stream: _Stream, on_text: TextSink | None,
                       early: EarlyRequest | None = None) -> None:
        """One HTTP exchange; raises ``_Failure`` when it did not yield a whole answer.

        ``early``: the same request, already sent by the bridge; its answer is read instead
        of posting again.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()

        def post(item: object) -> None:
            with suppress(RuntimeError):  # the loop is gone: nobody is listening any more
                loop.call_soon_threadsafe(queue.put_nowait, item)

        exchange = _Exchange(self._endpoint, body, self._headers, self._timeout, post, early)
        worker = threading.Thread(target=exchange.run, name="nonoka-openai-http", daemon=True)
        worker.start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, _Failure):
                    raise item
                if item is _DONE:
                    stream.done = True
                elif isinstance(item, dict):
                    await stream.feed(item, on_text)
        finally:
            exchange.abort()  # a no-op when the exchange already finished
        if not stream.done and stream.finish_reason is None:
            raise _Failure("the stream ended before the answer was complete", retryable=True)

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_WAIT)
        delay = min(self._backoff_base * 2.0**attempt, MAX_RETRY_WAIT)
        return delay * random.uniform(0.5, 1.0)  # jitter spreads out synchronized retries

    def _cost(self, input_tokens: int, output_tokens: int, cached: int = 0,
              written: int = 0) -> float | None:
        """The call's cost: at the explicit prices, else at the catalog's (cached input
        at its cache-read rate, cache writes at the write rate); ``None`` when unknown."""
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

    def _error(self, failure: _Failure, attempts: int) -> ModelError:
        status = f" HTTP {failure.status}" if failure.status is not None else ""
        message = f"model endpoint {self._endpoint.url} failed{status}: {failure.detail}"
        if attempts > 1:
            message += f" (gave up after {attempts} attempts)"
        if self._api_key:
            message = message.replace(self._api_key, "***")
        body = failure.body if isinstance(failure.body, str) else (
            None if failure.body is None else json.dumps(failure.body))
        if body is not None and self._api_key:
            body = body.replace(self._api_key, "***")
        return ModelError(message, endpoint=self._endpoint.url, status=failure.status,
                          retryable=failure.retryable, body=body,
                          retry_after=failure.retry_after)


def encoded_messages(messages: Sequence[Message], memo: PrefixMemo[str] | None = None
                     ) -> list[str]:
    """The messages' JSON on the wire, as ``BodyFrame.body`` joins it (``", "`` between
    messages; one string may hold several). A session's conversation (``EntryMessages``)
    is encoded from its entries without building ``Message`` models (``wire_text``).
    The files of a run of tool results follow the run as a user message
    (``wire.tool_files_message``)."""
    if not isinstance(messages, EntryMessages):
        return [json.dumps(m) for m in _with_tool_files(
            (_wire_message(m), m.role, _message_files(m)) for m in messages)]
    entries = messages.entries
    joined = wire_text(entries, memo)
    encoded = [joined] if joined else []
    trailing = _trailing_files(entries, len(entries))
    if trailing:
        encoded.append(json.dumps(tool_files_message(trailing)))
    return encoded


def wire_text(entries: Sequence[MemoryEntry], memo: PrefixMemo[str] | None = None) -> str:
    """The wire messages of ``entries`` joined as a body holds them, in one
    ``json.dumps`` call, without the files of a run of tool results at their very end
    (``encoded_messages`` adds those). With ``memo``, when ``entries`` extend the ones
    the last call encoded (a long-lived bridge resends its conversation every turn, one
    exchange longer), only the entries after those are encoded."""
    resumed = memo.resume(entries) if memo is not None else None
    start, known = (0, "") if resumed is None else (resumed[0][0], resumed[1])
    pending = _trailing_files(entries, start)
    rest = json.dumps(_with_tool_files(
        ((_entry_wire(e), e.role, file_parts(e.metadata)) for e in entries[start:]),
        pending, keep_trailing=False))[1:-1]
    joined = f"{known}, {rest}" if known and rest else known or rest
    if memo is not None:
        memo.keep(joined, entries)
    return joined


def _with_tool_files(items: Iterable[tuple[dict[str, Any], str, list[Mapping[str, Any]]]],
                     pending: list[Mapping[str, Any]] | None = None, *,
                     keep_trailing: bool = True) -> list[dict[str, Any]]:
    """Wire messages with each run of tool results' files in a user message after it."""
    out: list[dict[str, Any]] = []
    waiting = list(pending or ())
    for wired, role, files in items:
        if waiting and role != "tool":
            out.append(tool_files_message(waiting))
            waiting = []
        out.append(wired)
        if role == "tool":
            waiting.extend(files)
    if waiting and keep_trailing:
        out.append(tool_files_message(waiting))
    return out


def _trailing_files(entries: Sequence[MemoryEntry], end: int) -> list[Mapping[str, Any]]:
    """The files of the run of tool entries that ends at ``end`` (their follow-up is
    sent once the run is over)."""
    at = end
    while at > 0 and entries[at - 1].role == "tool":
        at -= 1
    return [p for e in entries[at:end] for p in file_parts(e.metadata)]


def _message_files(message: Message) -> list[Mapping[str, Any]]:
    if message.role != "tool" or not message.parts:
        return []
    return [p.model_dump(exclude_none=True) for p in message.parts if p.type == "file"]


def _entry_wire(entry: MemoryEntry) -> dict[str, Any]:
    meta = entry.metadata
    call_id = meta.get("tool_call_id")
    return wire_message(entry.role, entry.content, meta.get("tool_calls") or None,
                        None if call_id is None else str(call_id), meta)


def _wire_message(message: Message) -> dict[str, Any]:
    """A message in the Chat Completions wire shape."""
    calls = ([c.model_dump(exclude_none=True) for c in message.tool_calls]
             if message.tool_calls else None)
    meta = message.model_dump(include={"parts", "reasoning", "provider_metadata"},
                              exclude_none=True)
    return wire_message(message.role, message.content, calls, message.tool_call_id, meta)


class _Failure(Exception):
    """Why one attempt failed; turned into a ``ModelError`` once retrying is over."""

    def __init__(self, detail: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None, unreachable: bool = False,
                 body: object = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.body = body
        """The provider's error body (decoded JSON, or its text), as it gave it."""
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.unreachable = unreachable
        """Nobody answers at the address: worth one quick retry (a restarting server), no more."""


_END = object()  # the worker is finished
_DONE = object()  # the server sent ``data: [DONE]``


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """What the provider sent with the call besides its id, type and function (Gemini's
    ``extra_content`` with a thought signature): sent back as received."""


REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where OpenAI-compatible servers stream reasoning: DeepSeek's ``reasoning_content``,
OpenRouter's and vLLM's ``reasoning``."""


@dataclass
class _Stream:
    """Accumulates stream chunks into one ``ModelResponse``."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str = ""
    done: bool = False
    delivered: bool = False  # text has reached on_text, so retrying would duplicate it
    send_reasoning: bool = False
    on_reasoning: ReasoningSink | None = None
    reasoning: list[str] = field(default_factory=list)
    reasoning_field: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """The message's own provider fields (``extra_content``)."""

    async def feed(self, chunk: dict[str, Any], on_text: TextSink | None) -> None:
        if isinstance(chunk.get("error"), dict):  # some servers report errors mid-stream
            error = chunk["error"]
            code = error.get("code")
            status = code if isinstance(code, int) else None
            raise _Failure(_excerpt(str(error.get("message") or error)), status=status,
                           retryable=status is not None and _retryable(status), body=chunk)
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for fragment in delta.get("tool_calls") or ():
                self._add_call_fragment(fragment)
            for name in REASONING_FIELDS:
                thought = delta.get(name)
                if thought and isinstance(thought, str):
                    self.reasoning_field = self.reasoning_field or name
                    self.reasoning.append(thought)
                    await _tell(self.on_reasoning, thought)
            if isinstance(delta.get("extra_content"), dict):
                self.extra["extra_content"] = _merged(self.extra.get("extra_content"),
                                                      delta["extra_content"])
            content = delta.get("content")
            if content:
                self.text.append(content)
                if on_text is not None:
                    self.delivered = True
                    await _tell(on_text, content)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def _add_call_fragment(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):  # a server that sends whole calls without an index
            index = len(self.calls) if fragment.get("id") or not self.calls else max(self.calls)
        call = self.calls.setdefault(index, _PartialCall())
        call.id = call.id or fragment.get("id") or ""
        function = fragment.get("function") or {}
        call.name = call.name or function.get("name") or ""
        if function.get("arguments"):
            call.arguments.append(function["arguments"])
        for key, value in fragment.items():
            if key not in _CALL_FIELDS and value is not None:
                call.extra[key] = _merged(call.extra.get(key), value)

    def response(self, model: str,
                 cost: Callable[[int, int, int, int], float | None]) -> ModelResponse:
        calls = [
            ToolCall(id=c.id or f"call_{i}", name=c.name, arguments="".join(c.arguments) or "{}",
                     provider_metadata={OPENAI_COMPATIBLE: c.extra} if c.extra else None)
            for i, c in sorted(self.calls.items())
        ]
        usage = _usage(self.usage or {}, cost)
        reasoning = []
        if self.reasoning:
            reasoning.append(ReasoningPart(text="".join(self.reasoning), provider_metadata={
                OPENAI_COMPATIBLE: {"field": self.reasoning_field,
                                    "send_back": self.send_reasoning}}))
        return ModelResponse(
            text="".join(self.text),
            tool_calls=calls,
            usage=usage,
            finish_reason=_finish_reason(self.finish_reason, bool(calls)),
            model=self.model or model,
            reasoning=reasoning,
            provider_metadata={OPENAI_COMPATIBLE: dict(self.extra)} if self.extra else None,
        )


_CALL_FIELDS = frozenset(("index", "id", "type", "function"))


async def _tell(sink: Callable[[str], Any] | None, text: str) -> None:
    if sink is not None:
        outcome = sink(text)
        if inspect.isawaitable(outcome):
            await outcome


def _merged(before: Any, value: Any) -> Any:
    """A field sent in several fragments: dicts merged (recursively), strings joined,
    anything else replaced by the latest."""
    if isinstance(before, dict) and isinstance(value, dict):
        out = dict(before)
        for key, item in value.items():
            out[key] = _merged(before.get(key), item)
        return out
    if isinstance(before, str) and isinstance(value, str):
        return before + value
    return value


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usage(usage: dict[str, Any],
           cost: Callable[[int, int, int, int], float | None]) -> Usage:
    """The call's usage, with the cached and reasoning tokens each server reports in its
    own place (OpenAI's ``*_tokens_details``, DeepSeek's ``prompt_cache_hit_tokens``)."""
    input_tokens = _count(usage.get("prompt_tokens"))
    output_tokens = _count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    cached = _count(prompt_details.get("cached_tokens")) if isinstance(
        prompt_details, dict) else 0
    cached = cached or _count(usage.get("prompt_cache_hit_tokens"))
    written = _count(usage.get("cache_creation_input_tokens"))
    thought = _count(completion_details.get("reasoning_tokens")) if isinstance(
        completion_details, dict) else 0
    sent_cost = usage.get("cost")
    cost_usd = (float(sent_cost) if isinstance(sent_cost, int | float)
                and not isinstance(sent_cost, bool) else cost(input_tokens, output_tokens,
                                                               cached, written))
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost_usd,
                 cache_read_tokens=cached, cache_write_tokens=written,
                 reasoning_tokens=thought)


def _finish_reason(reason: str | None, has_calls: bool) -> str:
    """Normalise: some servers (Ollama) say ``stop`` even when the model called tools."""
    if has_calls or reason == "function_call":
        return "tool_calls"
    return reason or "stop"


def _retryable(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


class _Exchange:
    """One blocking request/response on the worker thread; results go through ``post``."""

    def __init__(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
                 timeout: float, post: Callable[[object], None],
                 early: EarlyRequest | None = None) -> None:
        self._endpoint = endpoint
        self._early = early
        self._body = body
        self._headers = headers
        self._timeout = timeout
        self._post = post
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
        try:
            self._exchange()
        except _Failure as failure:
            self._post(failure)
        except TimeoutError:
            self._post(_Failure(f"no answer within {self._timeout:g}s (timeout)", retryable=True))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # a chunk that is not JSON
            self._post(_Failure(f"the server sent an invalid stream: {_excerpt(str(exc))}"))
        except Exception as exc:  # connection refused/reset, TLS, protocol errors
            unreachable = _unreachable_detail(exc, self._endpoint)
            if unreachable is not None:
                self._post(_Failure(unreachable, retryable=True, unreachable=True))
            else:
                self._post(_Failure(_connection_detail(exc),
                                    retryable=_retryable_exception(exc)))
        finally:
            self._post(_END)

    def _exchange(self) -> None:
        early = self._early
        conn = early.sent() if early is not None else self._endpoint.connection(self._timeout)
        try:
            if early is None:
                conn.connect()
            with self._lock:
                self._sock = conn.sock
                if self._aborted:
                    return
            if early is None:
                conn.request("POST", self._endpoint.path, self._body, self._headers)
            response = conn.getresponse()
            if response.status != 200:
                raise _http_failure(response)
            self._read_events(response)
        finally:
            conn.close()

    def _read_events(self, response: http.client.HTTPResponse) -> None:
        """Parse Server-Sent Events; each ``data:`` payload is one JSON chunk."""
        data: list[bytes] = []
        for raw in response:
            line = raw.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].strip())
            elif not line and data:  # a blank line ends an event
                if self._dispatch(b"\n".join(data)):
                    return
                data = []
        if data:
            self._dispatch(b"\n".join(data))

    def _dispatch(self, payload: bytes) -> bool:
        if payload == b"[DONE]":
            self._post(_DONE)
            return True
        self._post(json.loads(payload))
        return False


def _http_failure(response: http.client.HTTPResponse) -> _Failure:
    body = response.read(MAX_ERROR_BODY).decode("utf-8", "replace")
    detail = body
    try:
        error = json.loads(body).get("error")
        detail = str(error.get("message") or error) if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        pass
    return _Failure(_excerpt(detail) or response.reason or "no details", status=response.status,
                    retryable=_retryable(response.status) and not _quota(body),
                    retry_after=_retry_after(response), body=body)


def _quota(body: str) -> bool:
    """Whether a 429 says the quota is spent: waiting does not help (OpenAI's
    ``insufficient_quota``)."""
    return "insufficient_quota" in body


def _retry_after(response: http.client.HTTPResponse) -> float | None:
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
    return f"could not talk to the server: {_excerpt(text)}"


def _unreachable_detail(exc: Exception, endpoint: Endpoint) -> str | None:
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
                "check the model's base URL (OPENAI_BASE_URL)")
    if isinstance(exc, ConnectionRefusedError):
        return (f"nothing accepts connections at {where}; is the model server running, and "
                "is the model's base URL (OPENAI_BASE_URL) right?")
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"no route to {where} ({exc.strerror}); check the model's base URL"
    return None


def _retryable_exception(exc: Exception) -> bool:
    """Network trouble is worth retrying; a TLS certificate problem never fixes itself."""
    import http.client
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return False
    return isinstance(exc, OSError | EOFError | http.client.HTTPException)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"
