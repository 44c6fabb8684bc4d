"""OpenAI-compatible Chat Completions adapter, built on the standard library only.

Why no SDK: every model step may run in a freshly spawned process, so import time is paid
on every step. The ``openai`` SDK costs ~370 ms to import and ``httpx`` ~100 ms, while
``http.client`` plus ``ssl`` cost ~20 ms and are imported only when a request is made.

The blocking HTTP exchange runs on a daemon worker thread (it never keeps a finished
process alive). Parsed stream chunks cross to the event loop through an ``asyncio.Queue``,
so ``on_text`` always runs on the loop thread. Cancelling the awaiting task shuts the
socket down, which ends the worker at once. That plumbing, the retries and the errors
are ``nonoka.llm.transport``'s, shared with the Responses API adapter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nonoka.llm.base import CallOptions, ModelResponse, ReasoningSink, TextSink, ToolSpec, Usage
from nonoka.llm.options import dropped_warning, sorted_extra
from nonoka.llm.transport import (
    Failure,
    HTTPModel,
    Pricing,
    StreamLimits,
    Transport,
    UsageCheck,
    excerpt,
    retryable,
    tell,
)
from nonoka.llm.wire import (
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    OPENAI_COMPATIBLE,
    BodyFrame,
    Endpoint,
    check_key,
    file_parts,
    refuses_reasoning,
    request_headers,
    tool_files_message,
    wire_message,
)
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message, ReasoningPart, ToolCall
from nonoka.state.prefix_memo import ConversationPasses, PrefixMemo

if TYPE_CHECKING:
    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.inflight import Inflight
    from nonoka.llm.workers import Workers

__all__ = ("DEFAULT_BASE_URL", "OpenAIChatModel")

WRITTEN_FIELDS = frozenset({"model", "messages", "stream", "stream_options", "tools"})
"""Body fields the adapter writes itself: no option replaces them."""
OPENAI_FIELDS = frozenset({
    "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "moderation", "n",
    "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "prompt_cache_options", "prompt_cache_retention", "reasoning_effort", "response_format",
    "safety_identifier", "seed", "service_tier", "stop", "store", "temperature",
    "tool_choice", "top_logprobs", "top_p", "user", "verbosity", "web_search_options"})
"""OpenAI's own Chat Completions body fields (the ``openai`` SDK's
``CompletionCreateParams``), besides the ones the adapter writes: all api.openai.com takes."""
COMPATIBLE_FIELDS = frozenset({
    # sampling that vLLM, SGLang, llama.cpp, Ollama and OpenRouter take
    "top_k", "min_p", "top_a", "typical_p", "repetition_penalty", "min_tokens",
    "stop_token_ids", "ignore_eos", "skip_special_tokens", "include_stop_str_in_output",
    "length_penalty", "best_of", "use_beam_search", "mirostat", "mirostat_tau",
    "mirostat_eta", "n_predict", "cache_prompt", "keep_alive", "priority",
    # thinking switches: chat templates (vLLM, SGLang), Qwen, DeepSeek / GLM / Kimi
    "chat_template", "chat_template_kwargs", "enable_thinking", "thinking_budget",
    "thinking", "separate_reasoning", "reasoning",
    # structured output (vLLM, SGLang)
    "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_decoding_backend", "structured_outputs", "json_schema", "regex", "ebnf",
    # OpenRouter's routing and accounting
    "include_reasoning", "provider", "transforms", "models", "route", "usage", "plugins",
})
"""What other OpenAI-compatible servers take besides OpenAI's fields (docs/models.md):
sent to any endpoint but api.openai.com."""


class OpenAIChatModel(HTTPModel):
    """A ``ChatModel`` for any OpenAI-compatible endpoint (OpenAI, DeepSeek, vLLM, Ollama,
    llama.cpp, OpenRouter), always streaming.

    ``timeout`` bounds connecting and every wait for the next bytes, not the whole answer.
    ``max_retries`` retries rate limits, 5xx, timeouts and dropped connections, but only
    while no text has reached ``on_text`` yet, so streamed text is never duplicated.
    It implements ``AdoptsInflight``: it says which request it would send, and answers
    from a request the bridge already sent when its own is byte for byte the same.
    """

    PROVIDER = "openai"
    _endpoint: Endpoint  # the Chat Completions one, which early requests are matched by

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
        send_reasoning: bool | None = None,
        known: KnownModel | None = None,
        limits: StreamLimits | None = None,
        workers: Workers | None = None,
    ) -> None:
        """``passes``: where the encoding of a growing conversation stopped last, when
        the process keeps it between turns (``ConversationPasses.wire``).
        ``send_reasoning``: whether the reasoning the endpoint streams goes back with
        its assistant message, in the field it came in (DeepSeek's, Kimi's and GLM's
        thinking modes, vLLM and SGLang serving them, refuse a tool loop without it); by
        default yes, unless the endpoint is one known to refuse the field
        (``wire.refuses_reasoning``).
        ``known``: the catalog's entry (``nonoka.llm.catalog``), whose prices — cache
        rates included — cost each call unless the server reports a cost itself."""
        self.model = model
        self._wire_memo = None if passes is None else passes.wire
        self._endpoint = Endpoint.parse(
            base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        )
        self._send_reasoning = (not refuses_reasoning(self._endpoint.host)
                                if send_reasoning is None else send_reasoning)
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        check_key(self._endpoint, self._api_key)
        self._label = label
        self._pricing = Pricing(input_price_per_mtok, output_price_per_mtok, known)
        self._headers = request_headers(self._api_key, extra_headers)
        self._transport = Transport(self._endpoint, self._headers, self._api_key,
                                    timeout=timeout, max_retries=max_retries,
                                    backoff_base=backoff_base, thread_name="nonoka-openai-http",
                                    limits=limits, workers=workers)
        self._inflight: Inflight | None = None

    def adopt(self, inflight: Inflight) -> None:
        """Answer the next call from ``inflight``'s request if it is the one this call
        sends; otherwise that request is closed unread and this model sends its own."""
        self._inflight = inflight

    def frame(self, tools: Sequence[ToolSpec] = (),
              options: CallOptions | None = None) -> BodyFrame:
        """The request body around its messages, for ``tools`` and ``options``."""
        return BodyFrame.chat(self.model, [t.to_openai() for t in tools],
                              self._option_fields(options)[0])

    def _option_fields(self, options: CallOptions | None
                       ) -> tuple[dict[str, Any] | None, list[str]]:
        """The body fields ``options`` set (the standard ones, then the provider-specific
        ones this endpoint takes), and the options not sent (``nonoka.llm.options``)."""
        if options is None:
            return None, []
        known = OPENAI_FIELDS if self._endpoint.host == "api.openai.com" else (
            OPENAI_FIELDS | COMPATIBLE_FIELDS)
        extra, dropped = sorted_extra(options.extra, known, reserved=WRITTEN_FIELDS)
        return {**options.wire_fields(with_extra=False), **extra}, dropped

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                     options: CallOptions | None = None) -> bytes:
        """The exact bytes :meth:`complete_with` posts for ``messages``, ``tools`` and
        ``options``."""
        return self.frame(tools, options).body(
            encoded_messages(messages, self._wire_memo)).encode()

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
        stream = await self._transport.run(
            body, lambda: _Stream(send_reasoning=self._send_reasoning, on_reasoning=on_reasoning),
            on_text, early)
        response = stream.response(self.model, self._pricing.cost, self._endpoint.url)
        dropped = self._option_fields(options)[1]
        if not dropped:
            return response
        warning = dropped_warning(dropped, f"the endpoint {self._endpoint.url}")
        return replace(response, warnings=(*response.warnings, warning))


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


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """What the provider sent with the call besides its id, type and function (Gemini's
    ``extra_content`` with a thought signature): sent back as received."""


REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where OpenAI-compatible servers stream reasoning: DeepSeek's, Kimi's, GLM's, SGLang's
and older vLLM's ``reasoning_content``, OpenRouter's and newer vLLM's ``reasoning``. A
server that sends both sends the same text: it is read from the first one it used."""
REASONING_DETAILS = "reasoning_details"
"""OpenRouter's structured reasoning (``reasoning.text`` with a signature,
``reasoning.encrypted``...), a list streamed in pieces by ``index``: kept whole and sent
back as it came."""
_JOINED_DETAIL_FIELDS = frozenset({"text", "summary", "data", "signature"})
"""The fields of a reasoning detail streamed in pieces (joined); others are replaced."""


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
    details: dict[int, dict[str, Any]] = field(default_factory=dict)
    """``reasoning_details`` by index, their streamed pieces joined."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The message's own provider fields (``extra_content``)."""

    def complete(self) -> bool:
        return self.done or self.finish_reason is not None

    async def feed(self, chunk: dict[str, Any], on_text: TextSink | None) -> None:
        if isinstance(chunk.get("error"), dict):  # some servers report errors mid-stream
            error = chunk["error"]
            code = error.get("code")
            status = code if isinstance(code, int) else None
            raise Failure(excerpt(str(error.get("message") or error)), status=status,
                          retryable=status is not None and retryable(status), body=chunk)
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for fragment in delta.get("tool_calls") or ():
                self._add_call_fragment(fragment)
            await self._reasoning(delta)
            if isinstance(delta.get("extra_content"), dict):
                self.extra["extra_content"] = _merged(self.extra.get("extra_content"),
                                                      delta["extra_content"])
            content = delta.get("content")
            if content:
                self.text.append(content)
                if on_text is not None:
                    self.delivered = True
                    await tell(on_text, content)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    async def _reasoning(self, delta: dict[str, Any]) -> None:
        """The delta's reasoning: its text from the field the stream uses, and its
        ``reasoning_details`` pieces."""
        names = (self.reasoning_field,) if self.reasoning_field else REASONING_FIELDS
        for name in names:
            thought = delta.get(name)
            if thought and isinstance(thought, str):
                self.reasoning_field = name
                self.reasoning.append(thought)
                await tell(self.on_reasoning, thought)
                break
        pieces = delta.get(REASONING_DETAILS)
        for number, piece in enumerate(pieces if isinstance(pieces, list) else ()):
            if not isinstance(piece, dict):
                continue
            index = piece.get("index")
            key = index if isinstance(index, int) and not isinstance(index, bool) else number
            detail = self.details.setdefault(key, {})
            for name, value in piece.items():
                if name in _JOINED_DETAIL_FIELDS and isinstance(value, str) \
                        and isinstance(detail.get(name), str):
                    detail[name] += value
                elif value is not None:
                    detail[name] = value

    def _reasoning_part(self) -> ReasoningPart | None:
        """The answer's reasoning, with where it came from, sent back there when the
        endpoint takes it (``send_reasoning``)."""
        details = [self.details[k] for k in sorted(self.details)]
        if not self.reasoning and not details:
            return None
        text = "".join(self.reasoning) or "".join(
            str(d.get("text") or d.get("summary") or "") for d in details)
        sent: dict[str, Any] = {"field": self.reasoning_field, "send_back": self.send_reasoning}
        if details:
            sent["details"] = details
        return ReasoningPart(text=text, provider_metadata={OPENAI_COMPATIBLE: sent})

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

    def response(self, model: str, cost: Callable[[int, int, int, int], float | None],
                 endpoint: str = "") -> ModelResponse:
        calls = [
            ToolCall(id=c.id or f"call_{i}", name=c.name, arguments="".join(c.arguments) or "{}",
                     provider_metadata={OPENAI_COMPATIBLE: c.extra} if c.extra else None)
            for i, c in sorted(self.calls.items())
        ]
        check = UsageCheck()
        usage = _usage(self.usage or {}, cost, check)
        part = self._reasoning_part()
        reasoning = [part] if part is not None else []
        return ModelResponse(
            text="".join(self.text),
            tool_calls=calls,
            usage=usage,
            finish_reason=_finish_reason(self.finish_reason, bool(calls)),
            model=self.model or model,
            reasoning=reasoning,
            provider_metadata={OPENAI_COMPATIBLE: dict(self.extra)} if self.extra else None,
            warnings=check.warnings(endpoint),
        )


_CALL_FIELDS = frozenset(("index", "id", "type", "function"))


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


def _usage(usage: dict[str, Any], cost: Callable[[int, int, int, int], float | None],
           check: UsageCheck) -> Usage:
    """The call's usage, with the cached and reasoning tokens each server reports in its
    own place (OpenAI's ``*_tokens_details``, DeepSeek's ``prompt_cache_hit_tokens``),
    each count checked (``check``)."""
    input_tokens = check.count(usage.get("prompt_tokens"), "prompt_tokens")
    output_tokens = check.count(usage.get("completion_tokens"), "completion_tokens")
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    cached = check.count(prompt_details.get("cached_tokens"),
                         "prompt_tokens_details.cached_tokens") if isinstance(
        prompt_details, dict) else 0
    cached = cached or check.count(usage.get("prompt_cache_hit_tokens"),
                                   "prompt_cache_hit_tokens")
    written = check.count(usage.get("cache_creation_input_tokens"),
                          "cache_creation_input_tokens")
    thought = check.count(completion_details.get("reasoning_tokens"),
                          "completion_tokens_details.reasoning_tokens") if isinstance(
        completion_details, dict) else 0
    cost_usd = check.cost(usage.get("cost"))
    if cost_usd is None:
        cost_usd = cost(input_tokens, output_tokens, cached, written)
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost_usd,
                 cache_read_tokens=cached, cache_write_tokens=written,
                 reasoning_tokens=thought)


def _finish_reason(reason: str | None, has_calls: bool) -> str:
    """Normalise: some servers (Ollama) say ``stop`` even when the model called tools."""
    if has_calls or reason == "function_call":
        return "tool_calls"
    return reason or "stop"
