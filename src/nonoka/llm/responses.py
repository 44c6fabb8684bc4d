"""OpenAI Responses API adapter (``openai-responses:<model>``), standard library only.

Stateless: every request carries the whole conversation as input items, with
``store: false`` and ``include: ["reasoning.encrypted_content"]``, so OpenAI keeps
nothing between calls and a session's reasoning survives in the session itself. A
reasoning item comes back in ``response.output_item.done`` with its ``encrypted_content``;
it is stored whole in its ``ReasoningPart.provider_metadata["openai_responses"]`` (the
part's text is its summary) and sent back unchanged, in the place it had among the
answer's output items, before the function calls it preceded. OpenAI refuses a function
call sent without the reasoning item that came before it, and reasoning whose encrypted
content was altered.

How a conversation becomes input items (``input_items``):

- system and user messages: ``message`` items with ``input_text``, ``input_image`` (inline
  bytes as a data URL, or the URL) and ``input_file`` (a PDF or another file, inline as
  ``file_data`` or by ``file_url``) parts; a text file goes inline as text. System
  messages stay input items with the ``system`` role, where they are in the
  conversation; ``instructions`` is not used (``CallOptions.extra`` can set it).
- an assistant message: its reasoning items, its text as a ``message`` item
  (``output_text`` with the id and ``phase`` the answer had; a message from elsewhere, with
  no id, as plain text) and its ``function_call`` items (``call_id``, ``name``,
  ``arguments``, and the item ``id`` kept in ``ToolCall.provider_metadata``), in the order
  the answer gave them (``provider_metadata["openai_responses"]["items"]``).
- a system message that keeps an input item whole (``provider_metadata
  ["openai_responses"]["item"]``: an ``additional_tools`` item) is that item.
- a tool result: a ``function_call_output`` item; with files (an image a tool read), its
  ``output`` is a list of ``input_text`` / ``input_image`` / ``input_file`` parts, the
  shape the API takes for tool output (unlike Chat Completions, no follow-up user
  message is needed).

The same entry encodes to the same bytes every time (plain dicts in a fixed order, one
``json.dumps``), so OpenAI's prompt cache sees a stable prefix from step to step.

Tools the API runs itself or takes in its own shape (``web_search``, ``file_search``,
``code_interpreter``, ``image_generation``, ``mcp``, ``custom``, ``namespace``) come as a
``ToolSpec`` whose ``wire`` is the tool as the API takes it, sent as given. The items
such a tool makes (``web_search_call``, ``image_generation_call``, ``mcp_call``...) are
kept whole in the answer's layout (``{"type": kind, "item": item}``) and sent back
unchanged, in their place; a ``custom_tool_call`` is a ``ToolCall`` whose ``arguments``
is its ``input`` (its item's other fields in ``provider_metadata``), answered by a
``custom_tool_call_output``. A message whose text has annotations or logprobs keeps its
content parts in the layout, and goes back with them. The layout is the order the API
gave the items in (a search, then the message citing it), which a caller shows them in.

A caller that shows such items while they happen passes ``on_item`` to
``complete_with``: every stream event of an item that is not a message, reasoning or a
call (``response.output_item.added``, ``response.web_search_call.searching``...,
``response.output_item.done``) is handed to it as the API sent it, in order with the
text ``on_text`` gets; after one, no attempt is retried (it would be shown twice).

Not supported: early dispatch (the model does not implement ``AdoptsInflight``: the
bridge sends nothing ahead for it), ``stop`` and ``seed`` (the Responses API has
neither; they are not sent).

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from nonoka.errors import ConfigurationError
from nonoka.llm.base import CallOptions, ModelResponse, ReasoningSink, TextSink, ToolSpec, Usage
from nonoka.llm.options import dropped_warning, sorted_extra
from nonoka.llm.responses_builtin import (
    BUILTIN_CALLS,
    OPENAI_RESPONSES,
    builtin_call,
    builtin_item,
    output_item,
)
from nonoka.llm.transport import (
    Dialect,
    Failure,
    HTTPModel,
    Pricing,
    StreamLimits,
    Transport,
    UsageCheck,
    excerpt,
    tell,
)
from nonoka.llm.wire import (
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    Endpoint,
    check_key,
    request_headers,
)
from nonoka.state.entries import EntryMessages
from nonoka.state.messages import Message, ReasoningPart, ToolCall

if TYPE_CHECKING:
    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.workers import Workers

__all__ = ("OPENAI_RESPONSES", "ItemSink", "OpenAIResponsesModel", "input_items")

ItemSink = Callable[[dict[str, Any]], Awaitable[None] | None]
"""Takes the stream events of an answer's whole items (a hosted tool's), as they come."""

"""The ``provider_metadata`` key of what the Responses API sent that must go back: a
reasoning part's whole reasoning item, a call's item ``id``, the answer's item layout."""

INCLUDE = ("reasoning.encrypted_content",)
FIXED_FIELDS = frozenset({"model", "input", "stream", "tools"})
"""Body fields ``CallOptions.extra`` never replaces (it may replace any other)."""
RESPONSES_FIELDS = frozenset({
    "background", "context_management", "conversation", "include", "instructions",
    "max_output_tokens", "max_tool_calls", "metadata", "parallel_tool_calls",
    "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_retention",
    "reasoning", "safety_identifier", "service_tier", "store", "stream_options",
    "temperature", "text", "tool_choice", "top_logprobs", "top_p", "truncation", "user"})
"""The Responses API body fields a call's ``extra`` may set (the ``openai`` SDK's
``ResponseCreateParams``, but those the adapter writes itself)."""
_NESTED_FIELDS = frozenset({"verbosity", "reasoning_summary"})
"""Options that go inside a field: ``text.verbosity``, ``reasoning.summary``."""
RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "vector_store_timeout"})
"""``response.failed`` and ``error`` event codes worth another attempt."""
INCOMPLETE_REASONS = MappingProxyType({"max_output_tokens": "length",
                                       "content_filter": "content_filter"})
SEPARATOR = "\n\n"
"""Between the texts of two message items (or two reasoning summaries) of one answer."""


class OpenAIResponsesModel(HTTPModel):
    """A ``ChatModel`` for OpenAI's Responses API (``POST {base}/responses``), always
    streaming and stateless.

    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, as for ``openai:``. ``timeout`` bounds
    connecting and every wait for the next bytes; ``max_retries`` retries rate limits,
    5xx, timeouts, dropped connections and a ``server_error`` in the stream, only while
    no text has reached ``on_text``. ``known``: the catalog's entry, whose prices cost
    each call, and which says whether the model reasons (then reasoning summaries are
    asked for). Deliberately not ``AdoptsInflight``: no early dispatch.
    """

    PROVIDER = "openai-responses"

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
        known: KnownModel | None = None,
        limits: StreamLimits | None = None,
        workers: Workers | None = None,
    ) -> None:
        self.model = model
        self._endpoint = Endpoint.parse(
            base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL, "/responses")
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        check_key(self._endpoint, api_key)
        self._label = label
        self._reasons = known is not None and known.reasoning
        self._pricing = Pricing(input_price_per_mtok, output_price_per_mtok, known)
        self._transport = Transport(
            self._endpoint, request_headers(api_key, extra_headers), api_key,
            timeout=timeout, max_retries=max_retries, backoff_base=backoff_base,
            thread_name="nonoka-responses-http", dialect=DIALECT, limits=limits, workers=workers)

    def body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
             options: CallOptions | None = None) -> bytes:
        """The exact bytes a call posts for ``messages``, ``tools`` and ``options``."""
        return self._body(messages, tools, options)[0]

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
              options: CallOptions | None) -> tuple[bytes, dict[str, str]]:
        """The body, and the options not sent as given (``extra_fields``)."""
        payload: dict[str, Any] = {"model": self.model, "input": conversation_items(messages),
                                   "stream": True, "store": False, "include": INCLUDE}
        if tools:
            payload["tools"] = [tool_item(t) for t in tools]
        payload.update(option_fields(options, reasons=self._reasons))
        notes = extra_fields(payload, options) if options is not None else {}
        asked = payload.get("include")
        if isinstance(asked, list | tuple) and asked != INCLUDE:
            payload["include"] = [*INCLUDE, *(v for v in asked if v not in INCLUDE)]
        return json.dumps(payload).encode(), notes

    async def complete_with(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
        on_reasoning: ReasoningSink | None = None,
        options: CallOptions | None = None,
        on_item: ItemSink | None = None,
    ) -> ModelResponse:
        body, notes = self._body(messages, tools, options)
        stream = await self._transport.run(
            body, lambda: _Stream(on_reasoning=on_reasoning, on_item=on_item), on_text)
        response = stream.response(self.model, self._pricing, self._endpoint.url)
        if not notes:
            return response
        warning = dropped_warning(notes, "the Responses API")
        return replace(response, warnings=(*response.warnings, warning))


# the request ---------------------------------------------------------------------------------


def conversation_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The input items of a conversation. A session's (``EntryMessages``) is encoded from
    its entries' stored metadata, without building ``Message`` models. The output of a
    custom tool's call is a ``custom_tool_call_output``."""
    if isinstance(messages, EntryMessages):
        items = [item for e in messages.entries
                 for item in input_items(e.role, e.content, e.metadata)]
    else:
        items = [item for m in messages for item in input_items(m.role, m.content, _meta(m))]
    custom = {item["call_id"] for item in items if item["type"] == "custom_tool_call"}
    builtin = {str(item.get("call_id")): item["type"] for item in items
               if item["type"] in BUILTIN_CALLS}
    if not custom and not builtin:
        return items
    return [_output(item, custom, builtin) for item in items]


def _output(item: dict[str, Any], custom: set[str], builtin: dict[str, str]
            ) -> dict[str, Any]:
    """A tool result's item: a ``custom_tool_call_output`` for a custom call, a built-in
    call's own output item (``nonoka.llm.responses_builtin``)."""
    if item["type"] != "function_call_output":
        return item
    if item["call_id"] in custom:
        return {**item, "type": "custom_tool_call_output"}
    kind = builtin.get(item["call_id"])
    if kind is None:
        return item
    output = item["output"]
    return output_item(kind, item["call_id"], output if isinstance(output, str)
                       else json.dumps(output))


def _meta(message: Message) -> dict[str, Any]:
    """A message's metadata in the shape a session stores it."""
    meta = message.model_dump(include={"parts", "reasoning", "provider_metadata"},
                              exclude_none=True)
    if message.tool_calls:
        meta["tool_calls"] = [c.model_dump(exclude_none=True) for c in message.tool_calls]
    if message.tool_call_id is not None:
        meta["tool_call_id"] = message.tool_call_id
    return meta


def input_items(role: str, content: str, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The input items of one message, given as a session stores it (``role``,
    ``content`` and its metadata: ``parts``, ``tool_calls``, ``tool_call_id``,
    ``reasoning``, ``provider_metadata``)."""
    if role == "assistant":
        return _assistant_items(content, meta)
    own = (meta.get("provider_metadata") or {}).get(OPENAI_RESPONSES)
    if role == "system" and isinstance(own, dict) and isinstance(own.get("item"), dict):
        return [own["item"]]  # an input item kept whole (``additional_tools``)
    parts = meta.get("parts") or ()
    if role == "tool":
        call_id = meta.get("tool_call_id")
        if call_id is None or call_id == "":
            raise ConfigurationError("a tool message must name the call it answers "
                                     "(tool_call_id); the Responses API rejects it otherwise")
        output: str | list[dict[str, Any]] = content
        if any(p.get("type") == "file" for p in parts):
            output = [_input_part(p) for p in parts]
        return [{"type": "function_call_output", "call_id": str(call_id), "output": output}]
    wired = [_input_part(p) for p in parts] or [{"type": "input_text", "text": content}]
    return [{"type": "message", "role": role, "content": wired}]


def _input_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A content part: text, an image, a PDF or another file, a text file (its text)."""
    if part.get("type") == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    media_type = part.get("media_type", "application/octet-stream")
    data, url = part.get("data"), part.get("url")
    name = part.get("filename")
    if media_type.startswith("text/") and data is not None:
        import base64

        text = base64.b64decode(data).decode("utf-8", "replace")
        return {"type": "input_text",
                "text": f"[file {name or 'attachment'} ({media_type})]\n{text}"}
    if media_type.startswith("image/"):
        source = url if data is None else f"data:{media_type};base64,{data}"
        return {"type": "input_image", "image_url": source, "detail": "auto"}
    if data is None:
        wired: dict[str, Any] = {"type": "input_file", "file_url": url}
        if name:
            wired["filename"] = name
        return wired
    return {"type": "input_file", "filename": name or "attachment",
            "file_data": f"data:{media_type};base64,{data}"}


def _assistant_items(content: str, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An answer's output items, in the order it gave them when known; otherwise its
    reasoning, its text, then its calls. Reasoning from another provider (no reasoning
    item) cannot be sent to OpenAI and is left out."""
    reasoning = iter([item for r in meta.get("reasoning") or ()
                      if isinstance(item := (r.get("provider_metadata") or {}).get(
                          OPENAI_RESPONSES), dict)])
    calls = iter([_call_item(c) for c in meta.get("tool_calls") or ()])
    own = (meta.get("provider_metadata") or {}).get(OPENAI_RESPONSES)
    layout = own.get("items") if isinstance(own, dict) else None
    if not isinstance(layout, list):
        said = [_message_item(content, {})] if content else []
        return [*reasoning, *said, *calls]
    messages = [e for e in layout if isinstance(e, dict) and e.get("type") == "message"]
    out: list[dict[str, Any]] = []
    for entry in layout:
        kind = entry.get("type") if isinstance(entry, dict) else None
        source: Iterator[dict[str, Any]] | None = (
            reasoning if kind == "reasoning" else calls if kind == "function_call" else None)
        if source is not None:
            out.extend(_first(source))
        elif isinstance(entry, dict) and isinstance(entry.get("item"), dict):
            out.append(entry["item"])  # a hosted tool's item, as the API made it
        elif kind == "message":
            text = content if len(messages) == 1 else str(entry.get("text", ""))
            if text or entry.get("id"):
                out.append(_message_item(text, entry))
    return [*out, *reasoning, *calls]  # anything the layout did not place


def _first(items: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    item = next(items, None)
    return [] if item is None else [item]


def _message_item(text: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant message: as the output item it was (``output_text``, with its id and
    phase), or, for a message the Responses API never gave, as plain text."""
    if not entry.get("id"):
        return {"type": "message", "role": "assistant", "content": text}
    content = entry.get("content")
    item: dict[str, Any] = {"type": "message", "role": "assistant", "id": entry["id"],
                            "status": "completed",
                            "content": content if isinstance(content, list) else
                            [{"type": "output_text", "text": text, "annotations": []}]}
    if entry.get("phase"):
        item["phase"] = entry["phase"]
    return item


def _call_item(call: Mapping[str, Any]) -> dict[str, Any]:
    whole = builtin_item(call.get("provider_metadata"))
    if whole is not None:
        return whole  # a built-in tool's call, as the API gave it
    extra = (call.get("provider_metadata") or {}).get(OPENAI_RESPONSES)
    if isinstance(extra, dict) and extra.get("type") == CUSTOM_CALL:
        return {"type": CUSTOM_CALL, "call_id": call["id"], "name": call["name"],
                "input": call.get("arguments", ""), **extra}
    item: dict[str, Any] = {"type": "function_call", "call_id": call["id"],
                            "name": call["name"], "arguments": call.get("arguments", "{}")}
    if isinstance(extra, dict):
        item.update(extra)
    return item


def tool_item(tool: ToolSpec) -> dict[str, Any]:
    """A function tool. ``strict`` is off: nonoka's schemas are not written for
    OpenAI's strict mode (which defaults to on in the Responses API). A tool given in
    the API's own shape (``ToolSpec.wire``) goes as given."""
    if tool.wire is not None:
        return dict(tool.wire)
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.parameters, "strict": False}


def option_fields(options: CallOptions | None, *, reasons: bool = False) -> dict[str, Any]:
    """The body fields of the call options, in the Responses API's names and shapes:
    ``max_output_tokens``, ``temperature``, ``top_p``, ``tool_choice`` (a function
    choice flattened), ``text.format`` (a Chat Completions ``json_schema`` response
    format flattened), ``reasoning`` (``effort``, and ``summary: "auto"`` for a model
    that reasons). ``stop`` and ``seed`` have no equivalent and are not sent."""
    options = options or CallOptions()
    fields: dict[str, Any] = {}
    if options.max_tokens is not None:
        fields["max_output_tokens"] = options.max_tokens
    if options.temperature is not None:
        fields["temperature"] = options.temperature
    if options.top_p is not None:
        fields["top_p"] = options.top_p
    if options.tool_choice is not None:
        fields["tool_choice"] = _tool_choice(options.tool_choice)
    if options.response_format is not None:
        fields["text"] = {"format": _text_format(options.response_format)}
    reasoning: dict[str, Any] = {}
    if options.reasoning_effort is not None:
        reasoning["effort"] = options.reasoning_effort
    if reasoning or reasons:
        reasoning["summary"] = "auto"
        fields["reasoning"] = reasoning
    return fields


def extra_fields(payload: dict[str, Any], options: CallOptions) -> dict[str, str]:
    """Add the fields of ``options.extra`` the Responses API has (``RESPONSES_FIELDS``,
    camelCase names as their snake_case form, and the ``passthrough`` ones) to
    ``payload``, replacing any but ``FIXED_FIELDS``; ``verbosity`` (Chat Completions'
    name, as a host sends it) goes in ``text.verbosity`` and ``reasoning_summary`` in
    ``reasoning.summary``. Returns the options not sent as given, with why (``""``: the
    API has no such field): ``stop``, ``seed`` and fields it does not have."""
    extra, unknown = sorted_extra(options.extra, RESPONSES_FIELDS | _NESTED_FIELDS,
                                  reserved=FIXED_FIELDS)
    notes = dict.fromkeys(unknown, "")
    for name in ("stop", "seed"):
        if getattr(options, name) is not None:
            notes[name] = f"the Responses API has no {name}"
    verbosity = extra.pop("verbosity", None)
    summary = extra.pop("reasoning_summary", None)
    payload.update(extra)
    if verbosity is not None:
        text = payload.get("text")
        payload["text"] = {**(text if isinstance(text, dict) else {}), "verbosity": verbosity}
    if summary is not None:
        reasoning = payload.get("reasoning")
        payload["reasoning"] = {**(reasoning if isinstance(reasoning, dict) else {}),
                                "summary": summary}
    return notes


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """``{"type": "function", "function": {"name": n}}`` becomes ``{"type": "function",
    "name": n}``; anything else goes as given."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, dict) and "name" in function:
            return {"type": "function", "name": function["name"]}
    return choice


def _text_format(response_format: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "json_schema", "json_schema": {...}}`` becomes ``{"type":
    "json_schema", ...}``; ``text`` and ``json_object`` go as given."""
    schema = response_format.get("json_schema")
    if response_format.get("type") == "json_schema" and isinstance(schema, dict):
        return {"type": "json_schema", **schema}
    return response_format


# the answer ----------------------------------------------------------------------------------


@dataclass
class _Stream:
    """Accumulates the Responses API's stream events into one ``ModelResponse``."""

    on_reasoning: ReasoningSink | None = None
    on_item: ItemSink | None = None
    done: bool = False  # ``[DONE]`` (the Responses API does not send it; some servers do)
    delivered: bool = False  # text has reached on_text, so retrying would duplicate it
    model: str = ""
    status: str | None = None
    final: dict[str, Any] = field(default_factory=dict)
    """The response object of ``response.completed`` or ``response.incomplete``."""
    added: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: dict[int, dict[str, Any]] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)
    thoughts: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    last_text: int | None = None
    last_thought: tuple[int, int] | None = None

    def complete(self) -> bool:
        return self.status is not None

    async def feed(self, event: dict[str, Any], on_text: TextSink | None) -> None:
        await self._feed(event, on_text)
        index = event.get("output_index")
        if self.on_item is not None and isinstance(index, int) and \
                self.added.get(index, {}).get("type") not in _NOT_WHOLE:
            self.delivered = True  # shown: another attempt would show it twice
            outcome = self.on_item(event)
            if outcome is not None:  # a coroutine sink's
                await outcome

    async def _feed(self, event: dict[str, Any], on_text: TextSink | None) -> None:
        kind = event.get("type")
        index = event.get("output_index")
        if kind in ("response.created", "response.in_progress", "response.queued"):
            self.model = str((event.get("response") or {}).get("model") or self.model)
        elif kind == "response.output_item.added" and isinstance(index, int):
            self.added[index] = dict(event.get("item") or {})
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            await self._text(event, index, on_text)
        elif kind in ("response.reasoning_summary_text.delta",
                      "response.reasoning_text.delta"):
            part = event.get("summary_index", event.get("content_index", 0))
            await self._thought(index, part, event.get("delta"))
        elif kind == "response.function_call_arguments.delta" and isinstance(index, int):
            self.arguments.setdefault(index, []).append(str(event.get("delta") or ""))
        elif kind == "response.function_call_arguments.done" and isinstance(index, int):
            self.arguments[index] = [str(event.get("arguments") or "")]
        elif kind == "response.output_item.done" and isinstance(index, int):
            self.finished[index] = dict(event.get("item") or {})
        elif kind in ("response.completed", "response.incomplete"):
            self.final = dict(event.get("response") or {})
            self.model = str(self.final.get("model") or self.model)
            self.status = "completed" if kind == "response.completed" else "incomplete"
        elif kind in ("response.failed", "error"):
            raise _failure(event)

    async def _text(self, event: dict[str, Any], index: object,
                    on_text: TextSink | None) -> None:
        delta = event.get("delta")
        if not isinstance(index, int) or not isinstance(delta, str) or not delta:
            return
        chunks = []
        if self.last_text is not None and index != self.last_text:
            chunks.append(SEPARATOR)  # a second message item of the same answer
        self.last_text = index
        self.texts.setdefault(index, []).append(delta)
        chunks.append(delta)
        if on_text is not None:
            self.delivered = True
            for chunk in chunks:
                await tell(on_text, chunk)

    async def _thought(self, index: object, part: object, delta: object) -> None:
        if not isinstance(index, int) or not isinstance(delta, str) or not delta:
            return
        key = (index, part if isinstance(part, int) else 0)
        if self.last_thought is not None and key != self.last_thought:
            await tell(self.on_reasoning, SEPARATOR)
        self.last_thought = key
        self.thoughts.setdefault(key, []).append(delta)
        await tell(self.on_reasoning, delta)

    def items(self) -> list[tuple[int, dict[str, Any]]]:
        """The answer's output items by index: each as ``output_item.done`` gave it (the
        whole item: a reasoning item's ``encrypted_content`` is complete only there), else
        as the final response lists it, else as it was added."""
        listed = self.final.get("output")
        final = dict(enumerate(listed)) if isinstance(listed, list) else {}
        indexes = sorted({*self.added, *self.finished, *final})
        chosen = [(i, self.finished.get(i) or final.get(i) or self.added.get(i)) for i in indexes]
        return [(i, item) for i, item in chosen if isinstance(item, dict)]

    def response(self, model: str, pricing: Pricing, endpoint: str = "") -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ReasoningPart] = []
        layout: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        for index, item in self.items():
            kind = item.get("type")
            if kind == "reasoning":
                reasoning.append(ReasoningPart(text=self._reasoning_text(index, item),
                                               provider_metadata={OPENAI_RESPONSES: item}))
                layout.append({"type": "reasoning"})
            elif kind in ("function_call", CUSTOM_CALL):
                calls.append(self._call(index, item, len(calls)))
                layout.append({"type": "function_call"})
            elif kind in BUILTIN_CALLS:
                calls.append(builtin_call(item))
                layout.append({"type": "function_call"})
            elif kind == "message":
                text = self._message_text(index, item)
                texts.append(text)
                entry = {"type": "message", "id": item.get("id"), "phase": item.get("phase"),
                         "text": text}
                if _annotated(item.get("content")):
                    entry["content"] = item["content"]
                messages.append(entry)
                layout.append(entry)
            elif isinstance(kind, str):
                layout.append({"type": kind, "item": item})
        for entry in messages:
            if entry["phase"] is None:
                del entry["phase"]
            if entry["id"] is None:
                del entry["id"]
            if len(messages) == 1:
                del entry["text"]  # the message's content holds it
        status = self.status or "completed"
        reason = (self.final.get("incomplete_details") or {}).get("reason")
        finish = ("tool_calls" if calls else "stop") if status == "completed" else (
            INCOMPLETE_REASONS.get(str(reason), "length"))
        check = UsageCheck()
        return ModelResponse(
            text=SEPARATOR.join(t for t in texts if t), tool_calls=calls,
            usage=_usage(self.final.get("usage"), pricing, check), finish_reason=finish,
            model=self.model or model, reasoning=reasoning,
            provider_metadata={OPENAI_RESPONSES: {"items": layout}} if layout else None,
            warnings=check.warnings(endpoint))

    def _reasoning_text(self, index: int, item: dict[str, Any]) -> str:
        parts = [p.get("text", "") for key in ("summary", "content")
                 for p in item.get(key) or () if isinstance(p, dict)]
        if any(parts):
            return SEPARATOR.join(p for p in parts if p)
        return SEPARATOR.join("".join(v) for k, v in sorted(self.thoughts.items())
                              if k[0] == index)

    def _message_text(self, index: int, item: dict[str, Any]) -> str:
        content = item.get("content")
        if isinstance(content, list) and content:
            return "".join(str(p.get("text") or p.get("refusal") or "")
                           for p in content if isinstance(p, dict))
        return "".join(self.texts.get(index, ()))

    def _call(self, index: int, item: dict[str, Any], number: int) -> ToolCall:
        if item.get("type") == CUSTOM_CALL:
            kept = {k: v for k, v in item.items()
                    if k not in ("call_id", "name", "input") and v is not None}
            return ToolCall(id=str(item.get("call_id") or f"call_{number}"),
                            name=str(item.get("name") or ""),
                            arguments=str(item.get("input") or ""),
                            provider_metadata={OPENAI_RESPONSES: kept})
        arguments = item.get("arguments")
        if not isinstance(arguments, str) or (not arguments and index in self.arguments):
            arguments = "".join(self.arguments.get(index, ()))
        extra = {k: v for k, v in item.items()
                 if k not in _CALL_FIELDS and v is not None}
        return ToolCall(id=str(item.get("call_id") or f"call_{number}"),
                        name=str(item.get("name") or ""), arguments=arguments or "{}",
                        provider_metadata={OPENAI_RESPONSES: extra} if extra else None)


_CALL_FIELDS = frozenset({"type", "call_id", "name", "arguments", "status"})
"""A function call item's fields nonoka keeps elsewhere (or, ``status``, not at all)."""
CUSTOM_CALL = "custom_tool_call"
"""A custom (freeform) tool's call: its ``input`` is the call's ``arguments``."""
_NOT_WHOLE = frozenset({None, "message", "reasoning", "function_call", CUSTOM_CALL,
                        *BUILTIN_CALLS})
"""The items whose events are not handed to ``on_item``: text, reasoning and calls reach
the caller by their own ways (or an item never announced)."""


def _annotated(content: object) -> bool:
    """Whether a message's content parts carry more than their text: annotations
    (a web search's citations), logprobs."""
    return isinstance(content, list) and any(
        isinstance(p, dict) and (p.get("annotations") or p.get("logprobs")) for p in content)


def _usage(usage: object, pricing: Pricing, check: UsageCheck) -> Usage:
    """``input_tokens`` (of which ``input_tokens_details.cached_tokens`` were read from
    the cache and ``cache_write_tokens`` written to it) and ``output_tokens`` (of which
    ``output_tokens_details.reasoning_tokens`` were reasoning), each checked."""
    if not isinstance(usage, dict):
        return Usage(cost_usd=pricing.cost(0, 0))
    input_tokens = check.count(usage.get("input_tokens"), "input_tokens")
    output_tokens = check.count(usage.get("output_tokens"), "output_tokens")
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = check.count(details.get("cached_tokens"), "input_tokens_details.cached_tokens")
    written = check.count(details.get("cache_write_tokens"),
                          "input_tokens_details.cache_write_tokens")
    output_details = usage.get("output_tokens_details")
    thought = check.count(output_details.get("reasoning_tokens"),
                          "output_tokens_details.reasoning_tokens") if isinstance(
        output_details, dict) else 0
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                 cost_usd=pricing.cost(input_tokens, output_tokens, cached, written),
                 cache_read_tokens=cached, cache_write_tokens=written, reasoning_tokens=thought)


def _last_event(event: object) -> bool:
    """The events after which a response sends nothing more: it is complete (or failed)."""
    return isinstance(event, dict) and event.get("type") in (
        "response.completed", "response.incomplete", "response.failed", "error")


DIALECT = Dialect(last_event=_last_event)
"""OpenAI's error answers and variables, and the Responses API's last events: reading
stops there (a server that keeps the connection open after them holds nothing up)."""


def _failure(event: dict[str, Any]) -> Failure:
    """A ``response.failed`` or ``error`` event as a failed attempt (the event is the
    body: what the provider gave)."""
    if event.get("type") == "response.failed":
        error = (event.get("response") or {}).get("error")
    else:
        error = event.get("error") if isinstance(event.get("error"), dict) else event
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    message = str(error.get("message") or code or "the response failed")
    detail = f"{message} ({code})" if isinstance(code, str) and code not in message else message
    return Failure(excerpt(detail), retryable=code in RETRYABLE_CODES, body=event)
