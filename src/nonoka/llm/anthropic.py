"""The ``anthropic:<model>`` adapter: the Messages API, streamed, with prompt caching on
by default; built on the standard library only (no SDK on the hot path).

The request is ``nonoka.llm.anthropic_wire``'s (content blocks, merging, breakpoints,
options); this module reads the answer. Sending, retrying and reading the stream are
``nonoka.llm.transport``'s, as for the OpenAI adapters (``DIALECT`` says how the Messages
API differs: its error answers, ``message_stop``, its variables), so ``on_text`` and
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

import inspect
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nonoka.errors import ConfigurationError
from nonoka.llm.anthropic_wire import (
    BASE_URL_VARIABLE,
    CACHE_SETTINGS,
    DEFAULT_BASE_URL,
    DEFAULT_CACHE,
    DEFAULT_MAX_TOKENS,
    KEY_VARIABLE,
    PROVIDER,
    STRING_ANSWERS,
    Conversation,
    Endpoint,
    cache_control,
    call_fields,
    check_key,
    request_body,
    request_headers,
)
from nonoka.llm.base import CallOptions, ModelResponse, ReasoningSink, TextSink, ToolSpec, Usage
from nonoka.llm.options import dropped_warning
from nonoka.llm.transport import (
    MAX_ERROR_BODY,
    Dialect,
    ErrorAnswer,
    Failure,
    HTTPModel,
    StreamLimits,
    Transport,
    UsageCheck,
    excerpt,
    retry_after,
    retryable,
)
from nonoka.state.entries import EntryMessages
from nonoka.state.messages import Message, ReasoningPart, ToolCall

if TYPE_CHECKING:
    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.workers import Workers
    from nonoka.state.prefix_memo import ConversationPasses, PrefixMemo

__all__ = ("AnthropicChatModel", "anthropic_model", "conversation", "prompt_cache_setting")

DEFAULT_TIMEOUT = 60.0
"""Seconds to connect and to wait for each next byte of an answer."""
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


class AnthropicChatModel(HTTPModel):
    """A ``ChatModel`` for Anthropic's Messages API (``POST /v1/messages``), always
    streaming, with prompt caching (``prompt_cache``: ``"5m"``, ``"1h"`` or ``"off"``;
    a call's ``CallOptions.extra["prompt_cache"]`` overrides it).

    ``max_tokens`` defaults to ``known.max_output_tokens`` (else ``DEFAULT_MAX_TOKENS``).
    ``timeout`` bounds connecting and every wait for the next bytes; ``max_retries``
    retries overloaded (529), rate-limited (429), 5xx, timeouts and dropped connections,
    honouring ``retry-after``, but only while nothing has been streamed to ``on_text`` or
    ``on_reasoning`` yet.
    """

    PROVIDER = PROVIDER

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
        limits: StreamLimits | None = None,
        workers: Workers | None = None,
        passes: ConversationPasses | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("an Anthropic model needs a name, e.g. "
                                     "'anthropic:claude-sonnet-4-5'")
        self.model = model
        self._memo = None if passes is None else passes.blocks
        """Where the last call's conversation ended, when the process keeps it."""
        self._endpoint = Endpoint(base_url or os.environ.get(BASE_URL_VARIABLE)
                                  or DEFAULT_BASE_URL)
        self._api_key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
        check_key(self._endpoint, self._api_key)
        cache_control(prompt_cache)  # refuse a bad setting now, not at the first call
        self.prompt_cache = prompt_cache
        self._label = label
        self._known = known
        self._max_tokens = max_tokens or (known.max_output_tokens if known is not None
                                          else DEFAULT_MAX_TOKENS)
        self._transport = Transport(self._endpoint, request_headers(self._api_key, extra_headers),
                                    self._api_key, timeout=timeout, max_retries=max_retries,
                                    backoff_base=backoff_base,
                                    thread_name="nonoka-anthropic-http", dialect=DIALECT,
                                    limits=limits, workers=workers)

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                     options: CallOptions | None = None) -> bytes:
        """The exact bytes :meth:`complete_with` posts for ``messages``, ``tools`` and
        ``options``."""
        return self._body(messages, tools, options, self._call_fields(options)[0])

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
              options: CallOptions | None, fields: dict[str, Any]) -> bytes:
        answers = options.extra.get(STRING_ANSWERS) if options is not None else None
        return request_body(self.model, conversation(
            messages, self._memo, answers if isinstance(answers, str) else ""), tools, fields,
                            cache_control(self._cache_setting(options)),
                            eager=(options and options.eager_input_streaming) or ()).encode()

    def _call_fields(self, options: CallOptions | None) -> tuple[dict[str, Any], dict[str, str]]:
        return call_fields(options, self._max_tokens, model=self.model,
                           most=None if self._known is None else self._known.max_output_tokens)

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

    async def complete_with(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
        on_reasoning: ReasoningSink | None = None,
        options: CallOptions | None = None,
    ) -> ModelResponse:
        fields, notes = self._call_fields(options)  # once: the body's, and what it left out
        body = self._body(messages, tools, options, fields)
        one_hour = self._one_hour(options)
        stream = await self._transport.run(
            body, lambda: _Stream(on_text=on_text, on_reasoning=on_reasoning), None)
        response = stream.response(self.model, self._cost_function(one_hour),
                                   self._endpoint.url)
        if not notes:
            return response
        warning = dropped_warning(notes, "the Messages API")
        return replace(response, warnings=(*response.warnings, warning))

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



def conversation(messages: Sequence[Message],
                 memo: PrefixMemo[Conversation] | None = None,
                 answers: str = "") -> Conversation:
    """``messages`` in the API's shape. A session's conversation (``EntryMessages``) is
    read from its entries without building ``Message`` models; both give the same
    blocks. ``memo``: for a session's conversation, the one the last call built, which
    a conversation that extends it goes on from (``nonoka.state.prefix_memo``): only the
    messages after it are read. ``answers``: how the client sent the assistant messages
    back (``STRING_ANSWERS``); a message keeps the form it was first read with."""
    if isinstance(messages, EntryMessages):
        entries = messages.entries
        resumed = memo.resume(entries) if memo is not None else None
        conv, start = (Conversation(), 0) if resumed is None else (resumed[1].copy(),
                                                                   resumed[0][0])
        new = entries[start:]
        strings = _string_answers(new, answers)
        for n, entry in enumerate(new):
            meta = entry.metadata
            call_id = meta.get("tool_call_id")
            conv.add(entry.role, entry.content, meta, meta.get("tool_calls") or None,
                     None if call_id is None else str(call_id), string=n in strings)
        if memo is not None:
            conv.settle()
            memo.keep(conv.copy(), entries)
        return conv
    conv = Conversation()
    strings = _string_answers(messages, answers)
    for n, message in enumerate(messages):
        meta = message.model_dump(include={"parts", "reasoning", "provider_metadata"},
                                  exclude_none=True)
        calls = ([c.model_dump(exclude_none=True) for c in message.tool_calls]
                 if message.tool_calls else None)
        conv.add(message.role, message.content, meta, calls, message.tool_call_id,
                 string=n in strings)
    return conv


def _string_answers(messages: Sequence[Any], answers: str) -> frozenset[int]:
    """The places in ``messages`` (the conversation's last ones) of the assistant
    messages the client sent back as strings: the last assistant message is the
    client's last, and so on back (``STRING_ANSWERS``)."""
    if "s" not in answers:
        return frozenset()
    places = [n for n, m in enumerate(messages) if m.role == "assistant"]
    return frozenset(n for n, form in zip(reversed(places), reversed(answers), strict=False)
                     if form == "s")


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
                    project: Path | None = None,
                    extra_headers: Mapping[str, str] | None = None,
                    max_retries: int = 3, workers: Workers | None = None,
                    passes: ConversationPasses | None = None) -> AnthropicChatModel:
    """The model an ``anthropic:<model>`` spec names: ``ANTHROPIC_BASE_URL`` (default
    ``https://api.anthropic.com``) and ``ANTHROPIC_API_KEY``, never another provider's;
    the prompt cache as ``project``'s ``.nonoka/config.toml`` sets it; ``extra_headers``
    (the host's, as ``nonoka.llm.host_headers`` allows them) with every request."""
    _, _, model = spec.partition(":")
    if not model:
        raise ConfigurationError(f"model {spec!r} names no model; use e.g. "
                                 "'anthropic:claude-sonnet-4-5'")
    setting = prompt_cache_setting(project) if project is not None else None
    return AnthropicChatModel(model, label=spec,
                              base_url=environ.get(BASE_URL_VARIABLE) or DEFAULT_BASE_URL,
                              api_key=environ.get(KEY_VARIABLE) or "",
                              prompt_cache=setting or DEFAULT_CACHE, known=known,
                              extra_headers=extra_headers, max_retries=max_retries,
                              workers=workers, passes=passes)


# -- the stream ---------------------------------------------------------------------------


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
    stop_sequence: str | None = None
    model: str = ""
    stopped: bool = False
    delivered: bool = False
    """Text or thinking has reached a sink: retrying would repeat it."""
    done: bool = False  # the Messages API sends no ``data: [DONE]``

    def complete(self) -> bool:
        return self.stopped

    async def feed(self, event: dict[str, Any], _sink: TextSink | None = None) -> None:
        """One decoded event; the sinks are the stream's own (text and thinking)."""
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
            if isinstance(delta.get("stop_sequence"), str):
                self.stop_sequence = delta["stop_sequence"]
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
                 price: Callable[[int, int, int, int, int], float | None],
                 endpoint: str = "") -> ModelResponse:
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
        check = UsageCheck()
        return ModelResponse(text="".join(text), tool_calls=calls,
                             usage=_usage(self.usage, price, check),
                             finish_reason=STOP_REASONS.get(reason, reason),
                             model=self.model or model, reasoning=reasoning,
                             warnings=check.warnings(endpoint),
                             provider_metadata=self._stopped_by(reason))

    def _stopped_by(self, reason: str) -> dict[str, Any] | None:
        """Anthropic's own stop reason, where the finish reason loses it (the stop
        sequence matched, a paused turn): kept with the answer, and what ``nonoka serve``
        tells a Messages API client."""
        if reason in ("end_turn", "tool_use", "max_tokens"):
            return None
        stopped: dict[str, Any] = {"stop_reason": reason}
        if self.stop_sequence is not None:
            stopped["stop_sequence"] = self.stop_sequence
        return {PROVIDER: stopped}


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


def _usage(usage: Mapping[str, Any], price: Callable[[int, int, int, int, int], float | None],
           check: UsageCheck) -> Usage:
    """The call's usage, every input token in ``input_tokens``: Anthropic's own
    ``input_tokens`` counts only those after the last cache breakpoint. Each count is
    checked (``check``)."""
    read = check.count(usage.get("cache_read_input_tokens"), "cache_read_input_tokens")
    written = check.count(usage.get("cache_creation_input_tokens"),
                          "cache_creation_input_tokens")
    total = check.count(usage.get("input_tokens"), "input_tokens") + read + written
    output = check.count(usage.get("output_tokens"), "output_tokens")
    details = usage.get("output_tokens_details")
    thought = check.count(details.get("thinking_tokens"),
                          "output_tokens_details.thinking_tokens") if isinstance(
        details, dict) else 0
    split = usage.get("cache_creation")
    write_1h = check.count(split.get("ephemeral_1h_input_tokens"),
                           "cache_creation.ephemeral_1h_input_tokens") if isinstance(
        split, dict) else 0
    write_1h = min(write_1h, written)
    return Usage(input_tokens=total, output_tokens=output,
                 cost_usd=price(total, output, read, written - write_1h, write_1h),
                 cache_read_tokens=read, cache_write_tokens=written, reasoning_tokens=thought)


def _event_failure(event: Mapping[str, Any]) -> Failure:
    """A mid-stream ``error`` event (``overloaded_error``...)."""
    error = event.get("error")
    kind = str(error.get("type")) if isinstance(error, dict) else "error"
    message = str(error.get("message") or "") if isinstance(error, dict) else str(error)
    status = ERROR_STATUSES.get(kind)
    return Failure(excerpt(f"{kind}: {message}"), status=status,
                   retryable=status is not None and retryable(status), body=json.dumps(event))


def _http_failure(response: ErrorAnswer) -> Failure:
    """An error answer: its ``error.type`` and message; ``x-should-retry`` decides, when
    sent, whether to retry (as the SDK does)."""
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
    again = should == "true" or (should != "false" and retryable(response.status))
    return Failure(excerpt(detail) or response.reason or "no details",
                   status=response.status, retryable=again,
                   retry_after=retry_after(response), body=body)


def _last_event(event: object) -> bool:
    return isinstance(event, dict) and event.get("type") in ("message_stop", "error")


DIALECT = Dialect(base_url_variable=BASE_URL_VARIABLE, key_variable=KEY_VARIABLE,
                  failure=_http_failure, last_event=_last_event)
