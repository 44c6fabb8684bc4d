"""The Anthropic Messages API request, on the standard library only.

What an ``anthropic:<model>`` request looks like on the wire: the endpoint and headers,
each conversation message as content blocks, the merging the API requires, the call
options in the API's own fields, and the prompt-cache breakpoints.

**Byte stability.** A step's request must start with the bytes of the step before it,
so that nothing but the new input differs and the provider's prompt cache (and any
byte-level comparison) sees the same prefix. So:

- every piece is encoded one way only: a stored entry, a ``Message`` built from it and
  a host's raw message of the same content give the same blocks;
- the body holds its fields in a fixed order, the conversation last;
- a breakpoint is ``, "cache_control": {...}`` added at the very end of a block's
  object: marking a block never changes a byte before the mark, and unmarking it
  gives back the unmarked bytes.

**Breakpoints** (at most four, the API's limit): the last tool, the last system block,
and two on the conversation: the message just before the last assistant message (where
the previous step's request ended, so this step reads everything up to it from the
cache) and the last message (the moving one, which the next step reads). The moving
breakpoint of one step is the fixed one of the next, so a message keeps its mark from
one request to the next; only the mark of the step before is dropped.

**A client's strings.** A message a client sent with its ``content`` as a plain string
(``STRING_CONTENT`` in its ``provider_metadata``, as ``nonoka serve``'s Messages API
keeps it), and a system prompt it sent as one string, go on as that string, as the
client would have sent them directly, unless a breakpoint lands on them: a breakpoint
needs a block, so that message is one text block with the mark (what Claude Code sends
for a string message it marks). A message whose mark the next step drops goes back to
its string, which changes bytes before the mark; the prompt cache does not see it (the
API reads a string as that one text block). A message merged with a neighbour, or
holding more than its text (thinking the store kept, files), is blocks.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nonoka.errors import ConfigurationError
from nonoka.llm.options import snake_keys, sorted_extra

if TYPE_CHECKING:
    import http.client
    import ssl

    from nonoka.llm.base import CallOptions, ToolSpec

PROVIDER = "anthropic"
"""The spec prefix, and the ``provider_metadata`` key of what Anthropic sent."""

DEFAULT_BASE_URL = "https://api.anthropic.com"
BASE_URL_VARIABLE = "ANTHROPIC_BASE_URL"
KEY_VARIABLE = "ANTHROPIC_API_KEY"
API_VERSION = "2023-06-01"
MESSAGES_PATH = "/v1/messages"

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` (which the API requires) for a model the catalog does not know and a
call that does not set it: the most every Claude model accepts. A known model gets its
catalog ``max_output_tokens``."""

THINKING_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 4096, "medium": 16384,
                                    "high": 32768}
"""``reasoning_effort`` as extended thinking's ``budget_tokens`` (``none``: no thinking).
The budget stays below ``max_tokens``, as the API requires; 1,024 is its minimum."""

CACHE_SETTINGS = ("off", "5m", "1h")
"""Prompt caching: no breakpoints, or breakpoints with a five-minute or one-hour TTL."""

DEFAULT_CACHE = "5m"

STRING_ANSWERS = "string_answers"
"""The ``CallOptions.extra`` key of how a Messages API client sent its assistant messages
back (``nonoka serve``): one character each, in order, ``s`` where it sent the content as
a string, ``b`` where as blocks. An answer the session stored without the client's form
takes it from here, matched from the end (the last assistant message with the last)."""

NONOKA_OPTIONS = frozenset({"prompt_cache", STRING_ANSWERS})
"""``CallOptions.extra`` keys nonoka reads itself and never sends."""

ANTHROPIC_FIELDS = frozenset({
    "cache_control", "container", "context_management", "diagnostics", "inference_geo",
    "mcp_servers", "metadata", "output_config", "service_tier", "speed", "thinking",
    "top_k", "user_profile_id", "workspace_id", "effort"})
"""The Messages API body fields a call's ``extra`` may set: the ``anthropic`` SDK's
``MessageCreateParams`` (and the beta ``context_management`` and ``mcp_servers``), besides
the ones the adapter writes or sets from the standard options, ``top_k``, which the API
takes as the AI SDK sends it, and ``effort`` (OpenCode's variants of the models that
take one), which goes into ``output_config`` as the AI SDK's Anthropic provider puts it."""

REJECTS_SAMPLING = ("claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-fable-5",
                    "claude-sonnet-5")
"""Models that refuse ``temperature``, ``top_p`` and ``top_k`` (as the AI SDK's Anthropic
provider lists them): none is sent to them."""

_RESERVED = frozenset({"model", "stream", "tools", "system", "messages"})
"""Body fields the adapter writes itself: ``CallOptions.extra`` never replaces them."""

_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})

STRING_CONTENT: Mapping[str, str] = MappingProxyType({"content": "string"})
"""What a message's ``provider_metadata["anthropic"]`` holds when the client sent its
``content`` (or the ``system`` prompt) as a plain string, not as blocks."""

HOST_TOOL_MEDIA_NOTE = "Attached media from tool result:"
"""The text of the user message OpenCode puts a tool's images and PDFs in, right after
the tool results, for a provider it does not know to take media in tool results."""


# -- endpoint and headers ------------------------------------------------------------------


class Endpoint:
    """Where ``/v1/messages`` lives, parsed once from the base URL (the SDK's
    convention: ``https://api.anthropic.com``, no ``/v1``)."""

    __slots__ = ("_ssl", "host", "path", "port", "scheme", "url")

    def __init__(self, base_url: str) -> None:
        self._ssl: ssl.SSLContext | None = None
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"Anthropic base URL {base_url!r} must look like https://host or "
                f"http://host:port (set {BASE_URL_VARIABLE}, or unset it for "
                f"{DEFAULT_BASE_URL})")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ConfigurationError(f"Anthropic base URL {base_url!r} has a bad port "
                                     f"(check {BASE_URL_VARIABLE})") from exc
        path = parts.path.rstrip("/") + MESSAGES_PATH
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, port
        self.path = path + (f"?{parts.query}" if parts.query else "")
        self.url = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{path}"
        """For messages: no credentials, no query."""

    def __repr__(self) -> str:
        return f"Endpoint({self.url!r})"

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        import http.client
        import ssl

        if self.scheme == "https":
            if self._ssl is None:  # loading the CA store costs milliseconds: once a model
                self._ssl = ssl.create_default_context()
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def check_key(endpoint: Endpoint, api_key: str | None) -> None:
    """Refuse to call Anthropic itself without a key (every request would be refused)."""
    if not api_key and endpoint.host == "api.anthropic.com":
        raise ConfigurationError(
            f"no API key for api.anthropic.com: set {KEY_VARIABLE}, or set "
            f"{BASE_URL_VARIABLE} to point at another Messages API server")


def request_headers(api_key: str | None,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "User-Agent": "nonoka",
        "anthropic-version": API_VERSION,
        **(extra or {}),
    }
    if api_key:
        headers["x-api-key"] = api_key
    return headers


# -- content blocks -------------------------------------------------------------------------

Block = tuple[str, str]
"""A content block: its type and its JSON text (``json.dumps`` of the block)."""


def _block(value: dict[str, Any]) -> Block:
    return str(value["type"]), json.dumps(value)


def message_blocks(role: str, content: str, meta: Mapping[str, Any],
                   tool_calls: Sequence[Mapping[str, Any]] | None = None,
                   tool_call_id: str | None = None) -> list[Block]:
    """The content blocks of one conversation message (not a system one), in the shapes
    a session stores: ``meta`` holds ``parts``, ``reasoning``, ``is_error``;
    ``tool_calls`` are ``{"id", "name", "arguments"}`` mappings."""
    if role == "assistant":
        return _assistant_blocks(content, meta, tool_calls or ())
    if role == "tool":
        if not tool_call_id:
            raise ConfigurationError("a tool message must name the call it answers "
                                     "(tool_call_id); the Messages API rejects it otherwise")
        return [_tool_result(tool_call_id, content, meta)]
    parts = meta.get("parts")
    if parts:
        return [b for p in parts if (b := _part_block(p)) is not None]
    return [_block({"type": "text", "text": content})] if content else []


def _assistant_blocks(content: str, meta: Mapping[str, Any],
                      tool_calls: Iterable[Mapping[str, Any]]) -> list[Block]:
    """Thinking first (the API wants a turn's thinking back before its text and tool
    calls), then the text, then the tool calls."""
    blocks = [b for r in meta.get("reasoning") or () if (b := _thinking(r)) is not None]
    if content:
        blocks.append(_block({"type": "text", "text": content}))
    blocks.extend(_block({"type": "tool_use", "id": str(c["id"]), "name": str(c["name"]),
                          "input": _tool_input(c.get("arguments"))}) for c in tool_calls)
    return blocks


def _thinking(reasoning: Mapping[str, Any]) -> Block | None:
    """A thinking block as Anthropic sent it; reasoning from another provider (or one
    without its signature) cannot be sent back, so it is left out."""
    sent = (reasoning.get("provider_metadata") or {}).get(PROVIDER)
    if not isinstance(sent, Mapping):
        return None
    data = sent.get("data", sent.get("redactedData"))
    if isinstance(data, str):
        return _block({"type": "redacted_thinking", "data": data})
    signature = sent.get("signature")
    if isinstance(signature, str) and signature:
        return _block({"type": "thinking", "thinking": str(reasoning.get("text", "")),
                       "signature": signature})
    return None


def _tool_input(arguments: object) -> Any:
    """A call's ``input`` object from the JSON text the model wrote (``{}`` when that
    text is not a JSON object: a call cut short by ``max_tokens``)."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        value = json.loads(str(arguments)) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_result(call_id: str, content: str, meta: Mapping[str, Any]) -> Block:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    parts = meta.get("parts") or ()
    if any(p.get("type") == "file" for p in parts):
        result["content"] = [json.loads(b[1]) for p in parts
                             if (b := _part_block(p)) is not None]
    elif content:
        result["content"] = content
    sent = (meta.get("provider_metadata") or {}).get("anthropic") or {}
    if meta.get("is_error") or sent.get("is_error") is True:  # a host's own, as it sent it
        result["is_error"] = True
    return _block(result)


def _part_block(part: Mapping[str, Any]) -> Block | None:
    """A text part, or a file: an image, a PDF or a text file as a ``document``;
    another kind of file as a note saying it was not sent."""
    if part.get("type") == "text":
        text = str(part.get("text", ""))
        return _block({"type": "text", "text": text}) if text else None
    media_type = str(part.get("media_type") or "application/octet-stream")
    data, url = part.get("data"), part.get("url")
    if data is None and isinstance(url, str) and url.startswith("data:"):
        media_type, data = _data_url(url, media_type)
    name = part.get("filename")
    if media_type.startswith("image/"):
        return _block({"type": "image", "source": _source(media_type, data, url)})
    if media_type == "application/pdf":
        return _block({"type": "document", "source": _source(media_type, data, url),
                       **({"title": name} if name else {})})
    if media_type.startswith("text/") and data is not None:
        text = base64.b64decode(str(data)).decode("utf-8", "replace")
        return _block({"type": "document",
                       "source": {"type": "text", "media_type": "text/plain", "data": text},
                       **({"title": name} if name else {})})
    return _block({"type": "text", "text": f"[file {name or 'attachment'} ({media_type}) "
                   "not sent: the Messages API takes images, PDFs and text files]"})


def _source(media_type: str, data: object, url: object) -> dict[str, Any]:
    if data is not None:
        return {"type": "base64", "media_type": media_type, "data": str(data)}
    return {"type": "url", "url": str(url)}


def _data_url(url: str, fallback: str) -> tuple[str, str | None]:
    """``data:image/png;base64,AAAA`` → ``("image/png", "AAAA")``."""
    head, _, payload = url[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if encoding != "base64":
        return fallback, None
    return media_type or fallback, payload


def sent_as_string(meta: Mapping[str, Any]) -> bool:
    """Whether a message's metadata says the client sent its content as a string."""
    sent = (meta.get("provider_metadata") or {}).get(PROVIDER)
    return isinstance(sent, Mapping) and sent.get("content") == STRING_CONTENT["content"]


# -- the conversation -----------------------------------------------------------------------


class Conversation:
    """A conversation in the API's shape: the system blocks, and the messages with
    consecutive same-role messages merged (tool results are the user's) and the
    ``tool_result`` blocks of a user message first, as the API requires."""

    __slots__ = ("_texts", "messages", "strings", "system", "system_string")

    def __init__(self) -> None:
        self.system: list[str] = []
        self.system_string = False
        """The system prompt is one text the client sent as a string."""
        self.messages: list[tuple[str, list[Block]]] = []
        self.strings: dict[int, str] = {}
        """The messages (by index) sent as a string: the JSON of that string."""
        self._texts: list[str] = []
        """The JSON of the first messages without a breakpoint, as ``encoded`` made it:
        only messages before the last, which ``add`` never changes again."""

    def copy(self) -> Conversation:
        """A copy that ``add`` can go on with while this one stays as it is (``add``
        changes only the last message's blocks)."""
        other = Conversation()
        other.system = list(self.system)
        other.system_string = self.system_string
        other.messages = list(self.messages)
        other.strings = dict(self.strings)
        other._texts = list(self._texts)
        if other.messages:
            role, blocks = other.messages[-1]
            other.messages[-1] = (role, list(blocks))
        return other

    def add(self, role: str, content: str, meta: Mapping[str, Any],
            tool_calls: Sequence[Mapping[str, Any]] | None = None,
            tool_call_id: str | None = None, *, string: bool = False) -> None:
        """One message; ``string``: the client sent its content as a string (else its
        metadata says so, or not): it goes on as one, when it is a message of its own
        holding only that text."""
        if role == "system":
            if content:
                self.system_string = not self.system and sent_as_string(meta)
                self.system.append(content)
            return
        if role == "user" and self._took_tool_media(meta):
            return
        blocks = message_blocks(role, content, meta, tool_calls, tool_call_id)
        if not blocks:
            return  # the API refuses an empty message; its neighbours merge instead
        api_role = "assistant" if role == "assistant" else "user"
        if self.messages and self.messages[-1][0] == api_role:
            self.messages[-1][1].extend(blocks)
            self.strings.pop(len(self.messages) - 1, None)
            return
        if (len(blocks) == 1 and blocks[0][0] == "text" and (string or sent_as_string(meta))
                and not tool_calls and not meta.get("parts")):
            self.strings[len(self.messages)] = json.dumps(content)
        self.messages.append((api_role, blocks))

    def _took_tool_media(self, meta: Mapping[str, Any]) -> bool:
        """Put the files of a host's "Attached media from tool result:" message inside
        the tool result it follows, where Anthropic's API takes them and where the
        host's own Anthropic provider sends them (OpenCode moves a tool's images into
        such a message for any provider it does not know). Only when the message
        before is the results of one call: with several, which file came from which
        result is lost, and the message stays as the host sent it."""
        parts: list[Mapping[str, Any]] = list(meta.get("parts") or ())
        if (len(parts) < 2 or parts[0].get("type") != "text"
                or str(parts[0].get("text", "")).strip() != HOST_TOOL_MEDIA_NOTE
                or any(p.get("type") != "file" for p in parts[1:])
                or not self.messages or self.messages[-1][0] != "user"):
            return False
        blocks = self.messages[-1][1]
        if len(blocks) != 1 or blocks[0][0] != "tool_result":
            return False
        files = [json.loads(b[1]) for p in parts[1:] if (b := _part_block(p)) is not None]
        result = json.loads(blocks[0][1])
        said = result.get("content")
        held = ([{"type": "text", "text": said}] if isinstance(said, str) and said
                else list(said) if isinstance(said, list) else [])
        merged = {"type": "tool_result", "tool_use_id": result["tool_use_id"],
                  "content": held + files}
        if result.get("is_error"):
            merged["is_error"] = True
        blocks[0] = _block(merged)
        return True

    def settle(self) -> None:
        """Make the JSON of the messages before the last now, so that a copy kept for
        the next call has it (``encoded`` takes it from there)."""
        texts, strings = self._texts, self.strings
        for i in range(len(texts), len(self.messages) - 1):
            texts.append(_message_json(*self.messages[i], None, strings.get(i)))

    def encoded(self, mark: str | None) -> list[str]:
        """Each message's JSON text, with the two conversation breakpoints when
        ``mark`` (the ``cache_control`` text to add) is given."""
        messages, strings = _prefilled(self.messages, self.strings)
        marked: set[int] = set()
        if mark is not None and messages:
            last = len(messages) - 1
            marked.add(last)
            assistant = next((i for i in range(last, -1, -1)
                              if messages[i][0] == "assistant"), 0)
            if assistant > 0:
                marked.add(assistant - 1)
        texts = self._texts
        final = len(messages) - 1
        # The kept texts in one slice (a long conversation's are most of it), then the
        # few messages that are marked, last, or new.
        out = texts[:max(0, min(len(texts), final))]
        for i in marked:
            if i < len(out):
                out[i] = _message_json(*messages[i], mark)
        for i in range(len(out), len(messages)):
            role, blocks = messages[i]
            if i in marked:
                out.append(_message_json(role, blocks, mark))
            elif i == final:
                out.append(_message_json(role, blocks, None, strings.get(i)))
            else:
                text = _message_json(role, blocks, None, strings.get(i))
                if i == len(texts):
                    texts.append(text)
                out.append(text)
        return out


def _prefilled(messages: list[tuple[str, list[Block]]], strings: dict[int, str]
               ) -> tuple[list[tuple[str, list[Block]]], dict[int, str]]:
    """The messages (and which are strings) with the API's rule for a final assistant
    message (a prefill, which the model's answer continues) applied: its text may not
    end with whitespace, so the whitespace is trimmed (as Anthropic's own SDKs do); a
    prefill of whitespace only is no prefill."""
    if not messages or messages[-1][0] != "assistant" or messages[-1][1][-1][0] != "text":
        return messages, strings
    blocks = messages[-1][1]
    value = json.loads(blocks[-1][1])
    text = str(value.get("text") or "").rstrip()
    if text == value.get("text"):
        return messages, strings
    kept = blocks[:-1] + ([_block({**value, "text": text})] if text else [])
    last = len(messages) - 1
    if last in strings:
        strings = {i: s for i, s in strings.items() if i != last}
        if kept:
            strings[last] = json.dumps(text)
    return messages[:-1] + ([("assistant", kept)] if kept else []), strings


def _message_json(role: str, blocks: list[Block], mark: str | None,
                  string: str | None = None) -> str:
    """A message's JSON: ``string`` (the JSON of its content as the client sent it, a
    string) as it is when no breakpoint is on the message, else its blocks."""
    if string is not None and mark is None:
        return f'{{"role": "{role}", "content": {string}}}'
    if role == "user":  # tool results first: the API refuses text before them
        blocks = ([b for b in blocks if b[0] == "tool_result"]
                  + [b for b in blocks if b[0] != "tool_result"])
    texts = [text for _, text in blocks]
    if mark is not None:
        at = next((i for i in range(len(blocks) - 1, -1, -1)
                   if blocks[i][0] not in _THINKING_TYPES), None)
        if at is not None:  # thinking blocks cannot carry a breakpoint
            texts[at] = marked(texts[at], mark)
    return f'{{"role": "{role}", "content": [{", ".join(texts)}]}}'


def marked(block_json: str, mark: str) -> str:
    """A block's JSON with a breakpoint added at its very end."""
    return block_json[:-1] + mark + "}"


def cache_control(setting: str) -> dict[str, str] | None:
    """The ``cache_control`` value of a cache setting (``None``: caching off)."""
    if setting not in CACHE_SETTINGS:
        raise ConfigurationError(f"prompt cache setting {setting!r} is not one of "
                                 f"{', '.join(CACHE_SETTINGS)}")
    if setting == "off":
        return None
    return {"type": "ephemeral"} if setting == "5m" else {"type": "ephemeral", "ttl": "1h"}


# -- the request body ---------------------------------------------------------------------


def tool_json(spec: ToolSpec, *, eager: bool = False) -> dict[str, Any]:
    """A tool definition; ``eager``: its arguments stream unbuffered
    (``eager_input_streaming``, what the AI SDK's Anthropic provider sets on every tool of
    a streamed call unless told otherwise)."""
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["input_schema"] = spec.parameters
    if eager:
        tool["eager_input_streaming"] = True
    return tool


def option_fields(options: CallOptions | None, max_tokens: int) -> dict[str, Any]:
    """The body fields ``options`` set (``call_fields`` without what it says of the
    options it did not send)."""
    return call_fields(options, max_tokens)[0]


def call_fields(options: CallOptions | None, max_tokens: int, *, model: str = "",
                most: int | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The body fields ``options`` set, in the API's names and forms, as Anthropic's own
    AI SDK provider (what OpenCode uses directly) sends them; and the options not sent
    as given, each with why (``""``: the API has no such field).

    ``max_tokens`` (required; the call's, else ``max_tokens``); ``temperature`` (kept within
    0 to 1), ``top_p``, ``top_k`` (``extra``'s, else the call's): none of them while
    thinking is on, nor to a model that refuses sampling (``REJECTS_SAMPLING``), and
    ``top_p`` not beside ``temperature`` for a Claude model; ``stop`` as ``stop_sequences``;
    ``tool_choice`` and ``response_format`` from their Chat Completions forms;
    ``reasoning_effort`` as extended thinking (``THINKING_BUDGETS``, within ``max_tokens``).
    ``extra``'s fields the API has (``ANTHROPIC_FIELDS``, camelCase names as their
    snake_case form, and ``nonoka.llm.options.PASSTHROUGH``) follow; its ``thinking``
    (OpenCode's ``{type: "enabled", budgetTokens}`` as ``budget_tokens``) wins over
    ``reasoning_effort`` and, enabled, adds its budget to ``max_tokens`` (up to the model's
    ``most``); ``seed`` and unknown fields are not sent; ``prompt_cache`` is the
    adapter's."""
    if options is None:
        return {"max_tokens": max_tokens}, {}
    extra, unknown = sorted_extra(options.extra, ANTHROPIC_FIELDS, own=NONOKA_OPTIONS,
                                  reserved=_RESERVED | {"max_tokens", "stop_sequences"})
    notes = dict.fromkeys(unknown, "")
    thinking, limit = _thinking_option(options, extra.pop("thinking", None),
                                       options.max_tokens or max_tokens, most)
    fields: dict[str, Any] = {"max_tokens": limit}
    thinks = isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive")
    top_k = extra.pop("top_k", None)
    fields.update(_sampling(options, options.top_k if top_k is None else top_k, model,
                            thinks, notes))
    if options.seed is not None:
        notes["seed"] = "the Messages API has no seed"
    if options.stop:
        fields["stop_sequences"] = list(options.stop)
    if options.tool_choice is not None:
        fields["tool_choice"] = _tool_choice(options.tool_choice)
    output = _output_config(options.response_format)
    effort = extra.pop("effort", None)
    if effort is not None:
        given = extra.pop("output_config", None)
        output = {**(given if isinstance(given, Mapping) else {}), **(output or {}),
                  "effort": effort}
    if output is not None:
        fields["output_config"] = output
    if thinking is not None:
        fields["thinking"] = thinking
    if isinstance(extra.get("metadata"), Mapping):
        extra["metadata"] = snake_keys(extra["metadata"])  # ``userId`` as ``user_id``
    for name, value in extra.items():
        fields.setdefault(name, value)
    return fields, notes


def _thinking_option(options: CallOptions, given: object, limit: int,
                     most: int | None) -> tuple[Any, int]:
    """The ``thinking`` field and ``max_tokens``: ``extra``'s ``thinking`` in the API's
    names (enabled, its budget on top of ``limit``, up to ``most``; 1,024 when it names
    none, as the AI SDK does), else ``reasoning_effort``'s (within ``limit``)."""
    if isinstance(given, Mapping):
        thinking = snake_keys(given)
        if thinking.get("type") == "enabled":
            budget = thinking.setdefault("budget_tokens", THINKING_BUDGETS["minimal"])
            if isinstance(budget, int) and not isinstance(budget, bool):
                limit += budget
                limit = min(limit, most) if most is not None else limit
        return thinking, limit
    if given is None and options.reasoning_effort is not None:
        return _thinking_config(options.reasoning_effort, limit), limit
    return given, limit


def _sampling(options: CallOptions, top_k: object, model: str, thinks: bool,
              notes: dict[str, str]) -> dict[str, Any]:
    """``temperature``, ``top_p`` and ``top_k`` as the API takes them (``call_fields``)."""
    given = {"temperature": options.temperature, "top_p": options.top_p, "top_k": top_k}
    fields = {name: value for name, value in given.items() if value is not None}
    if fields and any(name in model for name in REJECTS_SAMPLING):
        notes.update(dict.fromkeys(fields, f"{model} takes no sampling parameters"))
        return {}
    if fields and thinks:
        notes.update(dict.fromkeys(fields, "not taken while extended thinking is on"))
        return {}
    temperature = fields.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 1:
        fields["temperature"] = min(max(temperature, 0), 1)
        notes["temperature"] = (f"{temperature:g} is outside Anthropic's 0 to 1; sent as "
                                f"{fields['temperature']:g}")
    if "temperature" in fields and "top_p" in fields and "claude" in model:
        del fields["top_p"]
        notes["top_p"] = "a Claude model takes temperature or top_p, not both: top_p is left out"
    return fields


def _tool_choice(choice: str | Mapping[str, Any]) -> dict[str, Any]:
    """Chat Completions' ``auto``/``none``/``required``/``{"type": "function", ...}``
    as the API's ``{"type": "auto"|"none"|"any"|"tool"}``; its own form as given."""
    if isinstance(choice, str):
        kind = {"required": "any"}.get(choice, choice)
        return {"type": kind}
    function = choice.get("function")
    if choice.get("type") == "function" and isinstance(function, Mapping):
        return {"type": "tool", "name": function.get("name")}
    return dict(choice)


def _output_config(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A Chat Completions ``json_schema`` response format as structured output."""
    if not response_format or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    if not isinstance(schema, Mapping):
        return None
    return {"format": {"type": "json_schema", "schema": dict(schema)}}


def _thinking_config(effort: str, max_tokens: int) -> dict[str, Any] | None:
    if effort == "none":
        return None
    if effort not in THINKING_BUDGETS:
        raise ConfigurationError(
            f"reasoning_effort {effort!r} has no thinking budget for Anthropic; use none, "
            f"{', '.join(THINKING_BUDGETS)}, or pass thinking in the call's extra options")
    budget = min(THINKING_BUDGETS[effort], max_tokens - 1)
    if budget < THINKING_BUDGETS["minimal"]:
        raise ConfigurationError(
            f"max_tokens {max_tokens} leaves no room for extended thinking (its budget is "
            f"at least {THINKING_BUDGETS['minimal']} and below max_tokens); raise max_tokens")
    return {"type": "enabled", "budget_tokens": budget}


def request_body(model: str, conversation: Conversation, tools: Sequence[ToolSpec],
                 fields: Mapping[str, Any], cache: Mapping[str, str] | None, *,
                 eager: Iterable[str] = ()) -> str:
    """The streaming request: ``model``, the option fields, ``stream``, ``tools``,
    ``system`` and ``messages``, always in this order, the conversation last.
    ``cache``: the breakpoints' ``cache_control`` (``None``: none). A top-level
    ``cache_control`` among the fields (the API's automatic caching) replaces them.
    ``eager``: the tools (by name) whose arguments stream unbuffered."""
    if "cache_control" in fields:
        cache = None
    marker = "\x00messages\x00"
    payload: dict[str, Any] = {"model": model, **fields, "stream": True}
    if tools:
        unbuffered = frozenset(eager)
        payload["tools"] = [tool_json(t, eager=t.name in unbuffered) for t in tools]
        if cache is not None:
            payload["tools"][-1]["cache_control"] = dict(cache)
    if conversation.system_string and cache is None:
        payload["system"] = conversation.system[0]  # as the client sent it
    elif conversation.system:
        payload["system"] = [{"type": "text", "text": text} for text in conversation.system]
        if cache is not None:
            payload["system"][-1]["cache_control"] = dict(cache)
    payload["messages"] = marker
    text, quoted = json.dumps(payload), json.dumps(marker)
    if text.count(quoted) != 1:  # only a model name or option holding the marker could
        raise ConfigurationError(f"model name {model!r} cannot be sent")
    head, _, tail = text.partition(quoted)
    mark = None if cache is None else ', "cache_control": ' + json.dumps(dict(cache))
    return head + "[" + ", ".join(conversation.encoded(mark)) + "]" + tail
