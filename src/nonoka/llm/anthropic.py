"""The ``anthropic:<model>`` adapter: the Messages API, streamed, with prompt caching on
by default; built on the standard library only (no SDK on the hot path).

The request is ``nonoka.llm.anthropic_wire``'s (content blocks, merging, breakpoints,
options); this module sends it and reads the answer. The blocking HTTP exchange runs on
a daemon worker thread and the parsed server-sent events cross to the event loop through
an ``asyncio.Queue``, as in the OpenAI-compatible adapter, so ``on_text`` and
``on_reasoning`` run on the loop thread and cancelling the awaiting task ends the
exchange at once.

What comes back: text, tool calls, and each ``thinking`` / ``redacted_thinking`` block as
a ``ReasoningPart`` whose ``provider_metadata["anthropic"]`` keeps its ``signature`` (or
the redacted block's ``data``), sent back unchanged, in order, before the text and tool
calls of the same assistant message. Usage counts every input token in
``input_tokens`` (Anthropic's own ``input_tokens`` leaves out the cached and
cache-written ones), with ``cache_read_tokens``, ``cache_write_tokens`` and the thinking
tokens; the catalog prices a call at the read and the five-minute or one-hour write
rates.

Internal: not part of the public API (docs/architecture.md, "Public API"); use
``nonoka.llm.resolve_model("anthropic:<model>")``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nonoka.errors import ConfigurationError, ModelError
from nonoka.llm.anthropic_wire import (
    BASE_URL_VARIABLE,
    CACHE_SETTINGS,
    DEFAULT_BASE_URL,
    DEFAULT_CACHE,
    DEFAULT_MAX_TOKENS,
    KEY_VARIABLE,
    PROVIDER,
    Conversation,
    Endpoint,
    cache_control,
    check_key,
    option_fields,
    request_body,
    request_headers,
)
from nonoka.llm.base import CallOptions, ModelResponse, ReasoningSink, TextSink, ToolSpec, Usage
from nonoka.state.entries import EntryMessages
from nonoka.state.messages import Message, ReasoningPart, ToolCall

if TYPE_CHECKING:
    import http.client
    import socket

    from nonoka.llm.catalog import KnownModel

__all__ = ["AnthropicChatModel", "anthropic_model", "conversation", "prompt_cache_setting"]

DEFAULT_TIMEOUT = 60.0
"""Seconds to connect and to wait for each next byte of an answer."""
RETRYABLE_STATUSES = frozenset({408, 409, 429})  # plus every 5xx (529: overloaded), as the SDK
UNREACHABLE_RETRIES = 1
MAX_RETRY_WAIT = 30.0
MAX_ERROR_BODY = 64 * 1024
EXCERPT_CHARS = 300

ERROR_STATUSES = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status of each error ``type`` Anthropic sends (a mid-stream ``error`` event
names only its type)."""

STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                "max_tokens": "length", "model_context_window_exceeded": "length",
                "refusal": "content_filter"}
"""Anthropic's ``stop_reason`` as the Chat Completions finish reason the runtime knows
(``refusal`` is the provider's refusal, Chat Completions' ``content_filter``); any other
(``pause_turn``) is kept as sent."""


class AnthropicChatModel:
    """A ``ChatModel`` for Anthropic's Messages API (``POST /v1/messages``), always
    streaming, with prompt caching (``prompt_cache``: ``"5m"``, ``"1h"`` or ``"off"``;
    a call's ``CallOptions.extra["prompt_cache"]`` overrides it).

    ``max_tokens`` defaults to ``known.max_output_tokens`` (else ``DEFAULT_MAX_TOKENS``).
    ``timeout`` bounds connecting and every wait for the next bytes; ``max_retries``
    retries overloaded (529), rate-limited (429), 5xx, timeouts and dropped connections,
    honouring ``retry-after``, but only while nothing has been streamed to ``on_text`` or
    ``on_reasoning`` yet.
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
        prompt_cache: str = DEFAULT_CACHE,
        max_tokens: int | None = None,
        known: KnownModel | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("an Anthropic model needs a name, e.g. "
                                     "'anthropic:claude-sonnet-4-5'")
        self.model = model
        self._endpoint = Endpoint(base_url or os.environ.get(BASE_URL_VARIABLE)
                                  or DEFAULT_BASE_URL)
        self._api_key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
        check_key(self._endpoint, self._api_key)
        cache_control(prompt_cache)  # refuse a bad setting now, not at the first call
        self.prompt_cache = prompt_cache
        self._label = label
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._backoff_base = backoff_base
        self._known = known
        self._max_tokens = max_tokens or (known.max_output_tokens if known is not None
                                          else DEFAULT_MAX_TOKENS)
        self._headers = request_headers(self._api_key, extra_headers)

    @property
    def name(self) -> str:
        return self._label or f"{PROVIDER}:{self.model}"

    @property
    def endpoint(self) -> str:
        """The messages URL this model posts to (without any query string)."""
        return self._endpoint.url

    def __repr__(self) -> str:  # never shows the key
        return f"AnthropicChatModel(model={self.model!r}, endpoint={self._endpoint.url!r})"

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                     options: CallOptions | None = None) -> bytes:
        """The exact bytes :meth:`complete_with` posts for ``messages``, ``tools`` and
        ``options``."""
        return request_body(self.model, conversation(messages), tools,
                            option_fields(options, self._max_tokens),
                            cache_control(self._cache_setting(options))).encode()

    def _cache_setting(self, options: CallOptions | None) -> str:
        if options is not None and "prompt_cache" in options.extra:
            return str(options.extra["prompt_cache"])
        return self.prompt_cache

    def _one_hour(self, options: CallOptions | None) -> bool:
        """Whether this call's cache writes are one-hour ones."""
        automatic = options.extra.get("cache_control") if options is not None else None
        if isinstance(automatic, Mapping):
            return automatic.get("ttl") == "1h"
        return self._cache_setting(options) == "1h"

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
        one_hour = self._one_hour(options)
        attempt = 0
        while True:
            stream = _Stream(on_text=on_text, on_reasoning=on_reasoning)
            try:
                await self._attempt(body, stream)
                return stream.response(self.model, self._cost_function(one_hour))
            except _Failure as failure:
                budget = min(self._max_retries, UNREACHABLE_RETRIES if failure.unreachable
                             else self._max_retries)
                if not failure.retryable or stream.delivered or attempt >= budget:
                    raise self._error(failure, attempt + 1) from None
                await asyncio.sleep(self._wait(attempt, failure.retry_after))
                attempt += 1

    async def _attempt(self, body: bytes, stream: _Stream) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()

        def post(item: object) -> None:
            with suppress(RuntimeError):  # the loop is gone: nobody is listening any more
                loop.call_soon_threadsafe(queue.put_nowait, item)

        exchange = _Exchange(self._endpoint, body, self._headers, self._timeout, post)
        worker = threading.Thread(target=exchange.run, name="nonoka-anthropic-http",
                                  daemon=True)
        worker.start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, _Failure):
                    raise item
                if isinstance(item, dict):
                    await stream.feed(item)
        finally:
            exchange.abort()
        if not stream.stopped:
            raise _Failure("the stream ended before the answer was complete", retryable=True)

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_WAIT)
        delay = min(self._backoff_base * 2.0**attempt, MAX_RETRY_WAIT)
        return delay * random.uniform(0.5, 1.0)

    def _cost_function(self, one_hour: bool) -> Callable[[int, int, int, int, int],
                                                          float | None]:
        """Prices a call from the catalog: ``(input, output, read, written 5 min, written
        1 h)``; writes the server did not split by TTL count at the request's TTL."""
        known = self._known

        def price(input_tokens: int, output_tokens: int, read: int, write_5m: int,
                  write_1h: int) -> float | None:
            if known is None:
                return None
            from nonoka.llm.catalog import cost

            if one_hour and write_1h == 0:
                write_5m, write_1h = 0, write_5m
            return cost(known, input_tokens=input_tokens, output_tokens=output_tokens,
                        cached_tokens=read, cache_write_tokens=write_5m,
                        cache_write_1h_tokens=write_1h)

        return price

    def _error(self, failure: _Failure, attempts: int) -> ModelError:
        status = f" HTTP {failure.status}" if failure.status is not None else ""
        message = f"model endpoint {self._endpoint.url} failed{status}: {failure.detail}"
        if failure.status == 401:
            message += f" (check {KEY_VARIABLE})"
        if attempts > 1:
            message += f" (gave up after {attempts} attempts)"
        body = failure.body
        if self._api_key:
            message = message.replace(self._api_key, "***")
            body = None if body is None else body.replace(self._api_key, "***")
        return ModelError(message, endpoint=self._endpoint.url, status=failure.status,
                          retryable=failure.retryable, body=body,
                          retry_after=failure.retry_after)


def conversation(messages: Sequence[Message]) -> Conversation:
    """``messages`` in the API's shape. A session's conversation (``EntryMessages``) is
    read from its entries without building ``Message`` models; both give the same
    blocks."""
    conv = Conversation()
    if isinstance(messages, EntryMessages):
        for entry in messages.entries:
            meta = entry.metadata
            call_id = meta.get("tool_call_id")
            conv.add(entry.role, entry.content, meta, meta.get("tool_calls") or None,
                     None if call_id is None else str(call_id))
        return conv
    for message in messages:
        meta = message.model_dump(include={"parts", "reasoning", "provider_metadata"},
                                  exclude_none=True)
        calls = ([c.model_dump(exclude_none=True) for c in message.tool_calls]
                 if message.tool_calls else None)
        conv.add(message.role, message.content, meta, calls, message.tool_call_id)
    return conv


def prompt_cache_setting(project: Path) -> str | None:
    """``prompt_cache`` of the ``[anthropic]`` table in ``project``'s
    ``.nonoka/config.toml`` (``None`` when it does not say)."""
    from nonoka.config import CONFIG_FILE

    path = project / CONFIG_FILE
    if not path.is_file():
        return None
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}; fix or remove it") from exc
    table = data.get(PROVIDER, {})
    where = f"[{PROVIDER}] in {CONFIG_FILE}"
    if not isinstance(table, Mapping):
        raise ConfigurationError(f"{where} is not a table; write [{PROVIDER}] then "
                                 'prompt_cache = "5m" (or "1h", "off")')
    unknown = sorted(set(table) - {"prompt_cache"})
    if unknown:
        raise ConfigurationError(f"{where} has an unknown field {unknown[0]!r}; it takes "
                                 "prompt_cache")
    setting = table.get("prompt_cache")
    if setting is None:
        return None
    if setting not in CACHE_SETTINGS:
        raise ConfigurationError(f"{where}: prompt_cache = {setting!r} is not one of "
                                 + ", ".join(f'"{s}"' for s in CACHE_SETTINGS))
    return str(setting)


def anthropic_model(spec: str, environ: Mapping[str, str], *, known: KnownModel | None,
                    project: Path | None = None) -> AnthropicChatModel:
    """The model an ``anthropic:<model>`` spec names: ``ANTHROPIC_BASE_URL`` (default
    ``https://api.anthropic.com``) and ``ANTHROPIC_API_KEY``, never another provider's;
    the prompt cache as ``project``'s ``.nonoka/config.toml`` sets it."""
    _, _, model = spec.partition(":")
    if not model:
        raise ConfigurationError(f"model {spec!r} names no model; use e.g. "
                                 "'anthropic:claude-sonnet-4-5'")
    setting = prompt_cache_setting(project) if project is not None else None
    return AnthropicChatModel(model, label=spec,
                              base_url=environ.get(BASE_URL_VARIABLE) or DEFAULT_BASE_URL,
                              api_key=environ.get(KEY_VARIABLE) or "",
                              prompt_cache=setting or DEFAULT_CACHE, known=known)


# -- the stream ---------------------------------------------------------------------------


class _Failure(Exception):
    """Why one attempt failed; turned into a ``ModelError`` once retrying is over."""

    def __init__(self, detail: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None, unreachable: bool = False,
                 body: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.unreachable = unreachable
        self.body = body
        """The provider's error body as it sent it."""


_END = object()  # the worker is finished


@dataclass
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    data: str = ""
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    input: Any = None


@dataclass
class _Stream:
    """Accumulates the stream's events into one ``ModelResponse``."""

    on_text: TextSink | None = None
    on_reasoning: ReasoningSink | None = None
    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    model: str = ""
    stopped: bool = False
    delivered: bool = False
    """Text or thinking has reached a sink: retrying would repeat it."""

    async def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            await self._delta(event)
        elif kind == "content_block_start":
            await self._start(event)
        elif kind == "message_start":
            message = event.get("message") or {}
            self.model = str(message.get("model") or self.model)
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self._usage(event.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise _event_failure(event)
        # ping, content_block_stop and event types added later need nothing

    async def _start(self, event: dict[str, Any]) -> None:
        block = event.get("content_block") or {}
        kind = str(block.get("type") or "")
        item = _Block(kind, id=str(block.get("id") or ""), name=str(block.get("name") or ""),
                      data=str(block.get("data") or ""), input=block.get("input"))
        self.blocks[_index(event, self.blocks)] = item
        if kind == "text" and block.get("text"):
            await self._text(item, str(block["text"]))
        elif kind == "thinking":
            if block.get("thinking"):
                await self._thought(item, str(block["thinking"]))
            if block.get("signature"):
                item.signature.append(str(block["signature"]))

    async def _delta(self, event: dict[str, Any]) -> None:
        item = self.blocks.get(_index(event, self.blocks, start=False))
        delta = event.get("delta") or {}
        if item is None:
            return
        kind = delta.get("type")
        if kind == "text_delta":
            await self._text(item, str(delta.get("text") or ""))
        elif kind == "thinking_delta":
            await self._thought(item, str(delta.get("thinking") or ""))
        elif kind == "signature_delta":
            item.signature.append(str(delta.get("signature") or ""))
        elif kind == "input_json_delta":
            item.arguments.append(str(delta.get("partial_json") or ""))

    async def _text(self, item: _Block, text: str) -> None:
        item.text.append(text)
        if text and self.on_text is not None:
            self.delivered = True
            await _tell(self.on_text, text)

    async def _thought(self, item: _Block, text: str) -> None:
        item.text.append(text)
        if text and self.on_reasoning is not None:
            self.delivered = True
            await _tell(self.on_reasoning, text)

    def _usage(self, usage: object) -> None:
        if isinstance(usage, dict):  # message_delta's counts are cumulative: latest wins
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    def response(self, model: str,
                 price: Callable[[int, int, int, int, int], float | None]) -> ModelResponse:
        text: list[str] = []
        reasoning: list[ReasoningPart] = []
        calls: list[ToolCall] = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "text":
                text.extend(block.text)
            elif block.kind == "thinking":
                reasoning.append(ReasoningPart(text="".join(block.text), provider_metadata={
                    PROVIDER: {"signature": "".join(block.signature)}}))
            elif block.kind == "redacted_thinking":
                reasoning.append(ReasoningPart(provider_metadata={PROVIDER: {"data": block.data}}))
            elif block.kind == "tool_use":
                arguments = "".join(block.arguments)
                if not arguments and isinstance(block.input, dict) and block.input:
                    arguments = json.dumps(block.input)
                calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments or "{}"))
        reason = self.stop_reason or ("tool_use" if calls else "end_turn")
        return ModelResponse(text="".join(text), tool_calls=calls, usage=_usage(self.usage, price),
                             finish_reason=STOP_REASONS.get(reason, reason),
                             model=self.model or model, reasoning=reasoning)


def _index(event: dict[str, Any], blocks: dict[int, _Block], *, start: bool = True) -> int:
    index = event.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    if start:
        return max(blocks, default=-1) + 1
    return max(blocks, default=0)


async def _tell(sink: Callable[[str], Any], text: str) -> None:
    outcome = sink(text)
    if inspect.isawaitable(outcome):
        await outcome


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usage(usage: Mapping[str, Any],
           price: Callable[[int, int, int, int, int], float | None]) -> Usage:
    """The call's usage, every input token in ``input_tokens``: Anthropic's own
    ``input_tokens`` counts only those after the last cache breakpoint."""
    read = _count(usage.get("cache_read_input_tokens"))
    written = _count(usage.get("cache_creation_input_tokens"))
    total = _count(usage.get("input_tokens")) + read + written
    output = _count(usage.get("output_tokens"))
    details = usage.get("output_tokens_details")
    thought = _count(details.get("thinking_tokens")) if isinstance(details, dict) else 0
    split = usage.get("cache_creation")
    write_1h = _count(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else 0
    write_1h = min(write_1h, written)
    return Usage(input_tokens=total, output_tokens=output,
                 cost_usd=price(total, output, read, written - write_1h, write_1h),
                 cache_read_tokens=read, cache_write_tokens=written, reasoning_tokens=thought)


def _retryable(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def _event_failure(event: Mapping[str, Any]) -> _Failure:
    """A mid-stream ``error`` event (``overloaded_error``...)."""
    error = event.get("error")
    kind = str(error.get("type")) if isinstance(error, dict) else "error"
    message = str(error.get("message") or "") if isinstance(error, dict) else str(error)
    status = ERROR_STATUSES.get(kind)
    return _Failure(_excerpt(f"{kind}: {message}"), status=status,
                    retryable=status is not None and _retryable(status),
                    body=json.dumps(event))


class _Exchange:
    """One blocking request/response on the worker thread; results go through ``post``."""

    def __init__(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
                 timeout: float, post: Callable[[object], None]) -> None:
        self._endpoint = endpoint
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
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        try:
            self._exchange()
        except _Failure as failure:
            self._post(failure)
        except TimeoutError:
            self._post(_Failure(f"no answer within {self._timeout:g}s (timeout)", retryable=True))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
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
        conn = self._endpoint.connection(self._timeout)
        try:
            conn.connect()
            with self._lock:
                self._sock = conn.sock
                if self._aborted:
                    return
            conn.request("POST", self._endpoint.path, self._body, self._headers)
            response = conn.getresponse()
            if response.status != 200:
                raise _http_failure(response)
            self._read_events(response)
        finally:
            conn.close()

    def _read_events(self, response: http.client.HTTPResponse) -> None:
        """Server-sent events: each ``data:`` payload is one JSON event (its ``type``
        repeats the ``event:`` line's name)."""
        data: list[bytes] = []
        for raw in response:
            line = raw.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].strip())
            elif not line and data:
                if self._dispatch(b"\n".join(data)):
                    return
                data = []
        if data:
            self._dispatch(b"\n".join(data))

    def _dispatch(self, payload: bytes) -> bool:
        event = json.loads(payload)
        self._post(event)
        return isinstance(event, dict) and event.get("type") in ("message_stop", "error")


def _http_failure(response: http.client.HTTPResponse) -> _Failure:
    body = response.read(MAX_ERROR_BODY).decode("utf-8", "replace")
    detail = body
    kind = None
    try:
        error = json.loads(body).get("error")
        if isinstance(error, dict):
            kind = error.get("type")
            detail = f"{kind}: {error.get('message') or ''}" if kind else str(error)
    except (ValueError, AttributeError):
        pass
    should = (response.getheader("x-should-retry") or "").lower()
    retryable = should == "true" or (should != "false" and _retryable(response.status))
    return _Failure(_excerpt(detail) or response.reason or "no details",
                    status=response.status, retryable=retryable,
                    retry_after=_retry_after(response), body=body)


def _retry_after(response: http.client.HTTPResponse) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds)."""
    for header, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
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
    """Words for an endpoint nobody answers at, naming the variable that sets it."""
    import errno
    import socket

    where = f"{endpoint.host}:{endpoint.port}"
    if isinstance(exc, socket.gaierror):
        return (f"the host name {endpoint.host!r} does not resolve ({exc.strerror or exc}); "
                f"check {BASE_URL_VARIABLE}")
    if isinstance(exc, ConnectionRefusedError):
        return (f"nothing accepts connections at {where}; is the server running, and is "
                f"{BASE_URL_VARIABLE} right?")
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"no route to {where} ({exc.strerror}); check {BASE_URL_VARIABLE}"
    return None


def _retryable_exception(exc: Exception) -> bool:
    import http.client
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return False
    return isinstance(exc, OSError | EOFError | http.client.HTTPException)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"
