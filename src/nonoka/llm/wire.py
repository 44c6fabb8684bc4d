"""The OpenAI-compatible Chat Completions wire, on the standard library only.

Which endpoint and key a model spec names, the request headers, the shape of each
message and how a request body is put together. The adapter (``nonoka.llm.openai``)
builds every request with these functions, and so does the bridge's early dispatch
(``nonoka.bridge.early``), which must not import pydantic: one implementation of the
bytes a model endpoint receives. Its value types are plain classes with slots: a frozen
dataclass costs the per-turn process milliseconds to define, and a named tuple would load
``typing`` before the early request leaves.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import json
from functools import cache
from types import MappingProxyType
from urllib.parse import urlsplit

from nonoka.errors import ConfigurationError

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    import http.client
    import ssl
    from collections.abc import Mapping, Sequence
    from typing import Any

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
"""Seconds to connect and to wait for each next byte of an answer."""

PROVIDERS: dict[str, tuple[str | None, str]] = {
    "openai": (None, "OPENAI_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "vllm": ("http://127.0.0.1:8000/v1", "VLLM_API_KEY"),
    "ollama": ("http://127.0.0.1:11434/v1", "OLLAMA_API_KEY"),
    "llamacpp": ("http://127.0.0.1:8080/v1", "LLAMACPP_API_KEY"),
    "openai-responses": (None, "OPENAI_API_KEY"),
}
"""Provider prefixes that speak the OpenAI-compatible wire format: default base URL (used
when ``OPENAI_BASE_URL`` is unset) and the variable holding the key. ``openai-responses``
is OpenAI's Responses API (``nonoka.llm.responses``) at the same endpoint, with the same
key, as ``openai``. Each provider gets
only its own variable: a committed ``.nonoka/config.toml`` or a request's ``model`` picks
the provider, so a fallback to ``OPENAI_API_KEY`` would let a repository send a user's
OpenAI key to a port or host of its choosing."""
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
"""The one variable that points any provider at another endpoint."""
KEYED = frozenset({"openai", "deepseek", "openrouter", "openai-responses"})
"""Providers whose own endpoint refuses every request without a key: without it, nothing
is sent (a local server, the others' default, needs none)."""


OTHER_APIS = MappingProxyType({"anthropic": ("ANTHROPIC_API_KEY", "https://api.anthropic.com")})
"""Providers with an API of their own (``nonoka.llm.anthropic``): key and endpoint, for
the messages that list every choice."""


def provider_choices() -> str:
    """The provider prefixes, for messages: ``openai:, deepseek:, ...``."""
    return ", ".join(f"{name}:" for name in (*PROVIDERS, *OTHER_APIS))


def provider_lines() -> list[str]:
    """One line per provider: its prefix, key variable and default endpoint."""
    lines = []
    for name, (url, key) in PROVIDERS.items():
        where = url or DEFAULT_BASE_URL
        needs = "needed" if name in KEYED else "if the server wants one"
        lines.append(f"{name + ':':<17} key {key} ({needs}); {where}")
    for name, (key, where) in OTHER_APIS.items():
        lines.append(f"{name + ':':<17} key {key} (needed); {where} "
                     f"({name.upper()}_BASE_URL)")
    return lines


def provider_of(spec: str) -> str | None:
    """The provider prefix of a ``provider:model`` spec, when it is a known one."""
    name = spec.partition(":")[0]
    return name if name in PROVIDERS else None


def provider_advice(spec: str, status: int | None = None) -> str:
    """What to check when a request to ``spec``'s endpoint failed (``status``: its HTTP
    status, ``None`` when no answer came)."""
    name = provider_of(spec)
    model = spec.partition(":")[2]
    if status in (401, 403):
        key = PROVIDERS[name][1] if name else "the provider's key variable"
        return f"check {key}, the key {name or 'the provider'}: sends"
    if status in (429, 408) or (status or 0) >= 500:
        return "the endpoint is busy or failing: try again in a while"
    if status is not None:
        return f"check the model name {model!r} and what the endpoint accepts"
    default = (PROVIDERS[name][0] or DEFAULT_BASE_URL) if name else DEFAULT_BASE_URL
    return (f"is the model server up? {BASE_URL_VARIABLE} chooses the endpoint "
            f"({name or 'openai'}: uses {default} without it)")


class Target:
    """What a ``provider:model`` spec resolves to."""

    __slots__ = ("api_key", "base_url", "model", "spec")

    def __init__(self, spec: str, model: str, base_url: str | None,
                 api_key: str | None) -> None:
        self.spec, self.model, self.base_url, self.api_key = spec, model, base_url, api_key

    def __repr__(self) -> str:  # never shows the key
        return f"Target(spec={self.spec!r}, base_url={self.base_url!r})"


def resolve_target(spec: str, environ: Mapping[str, str]) -> Target:
    """Turn ``"openai:gpt-4o-mini"`` into the model name, base URL and key to use.

    ``OPENAI_BASE_URL`` overrides the provider's endpoint; the key is only ever the
    provider's own variable (``""`` when unset, so no caller falls back to another). A
    provider whose own endpoint needs a key (``KEYED``) and has none is a
    ``ConfigurationError`` naming its variable, before anything is sent.
    """
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigurationError(
            f"model {spec!r} is not of the form 'provider:model'; use one of "
            f"{provider_choices()} followed by the model's name, e.g. 'openai:gpt-4o-mini'"
        )
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown model provider {provider!r} in {spec!r}; use one of "
            f"{provider_choices()} (any other OpenAI-compatible endpoint: 'openai:<model>' "
            f"with {BASE_URL_VARIABLE} pointing at it)"
        )
    default_url, key_variable = PROVIDERS[provider]
    base_url = environ.get(BASE_URL_VARIABLE) or default_url
    api_key = environ.get(key_variable) or ""
    if not api_key and provider in KEYED and not environ.get(BASE_URL_VARIABLE):
        host = urlsplit(default_url or DEFAULT_BASE_URL).hostname
        raise ConfigurationError(
            f"no API key for {provider}: ({host}): set {key_variable}, or set "
            f"{BASE_URL_VARIABLE} to point at a local OpenAI-compatible server (which "
            "needs no key); nothing was sent"
        )
    return Target(spec=spec, model=model, base_url=base_url, api_key=api_key)


class Endpoint:
    """Where ``/chat/completions`` (or another route) lives, parsed once from the base URL."""

    __slots__ = ("host", "path", "port", "scheme", "url")

    def __init__(self, scheme: str, host: str, port: int, path: str, url: str) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
        """The request target, including any query string of the base URL."""
        self.url = url
        """For messages: no credentials, no query."""

    def _fields(self) -> tuple[str, str, int, str, str]:
        return self.scheme, self.host, self.port, self.path, self.url

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Endpoint) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Endpoint({self.url!r})"

    @classmethod
    def parse(cls, base_url: str, route: str = "/chat/completions") -> Endpoint:
        """The endpoint at ``route`` under ``base_url`` (``/responses`` for the
        Responses API)."""
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"model base URL {base_url!r} must look like https://host/v1 or http://host:port/v1"
            )
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ConfigurationError(f"model base URL {base_url!r} has a bad port") from exc
        path = parts.path.rstrip("/") + route
        hostport = parts.netloc.rpartition("@")[2]
        return cls(parts.scheme, parts.hostname, port,
                   path + (f"?{parts.query}" if parts.query else ""),
                   f"{parts.scheme}://{hostport}{path}")

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        import http.client

        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=_ssl_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


REFUSES_REASONING = frozenset({"api.cerebras.ai"})
"""Hosts of OpenAI-compatible endpoints known to refuse reasoning sent back with an
assistant message (Cerebras answers 400 "property 'messages.N.assistant.reasoning_content'
is unsupported"): the reasoning they stream is kept but not sent back. Every other
endpoint that streams reasoning gets it back in the field it came in
(``docs/models.md``)."""


def refuses_reasoning(host: str) -> bool:
    """Whether the endpoint at ``host`` refuses reasoning sent back (``REFUSES_REASONING``)."""
    return host.lower().rstrip(".") in REFUSES_REASONING


def check_key(endpoint: Endpoint, api_key: str | None) -> None:
    """Refuse to talk to OpenAI itself without a key (every request would be refused)."""
    if not api_key and endpoint.host == "api.openai.com":
        raise ConfigurationError(
            "no API key for api.openai.com: set OPENAI_API_KEY, or set OPENAI_BASE_URL "
            "to point at a local OpenAI-compatible server (which needs no key)"
        )


@cache
def _ssl_context() -> ssl.SSLContext:
    import ssl

    return ssl.create_default_context()


def request_headers(api_key: str | None,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers of every chat completions request."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "User-Agent": "nonoka",
        **(extra or {}),
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def wire_message(role: str, content: str, tool_calls: Sequence[Mapping[str, Any]] | None = None,
                 tool_call_id: str | None = None, meta: Mapping[str, Any] | None = None,
                 ) -> dict[str, Any]:
    """A message in the Chat Completions wire shape.

    ``tool_calls`` are ``{"id", "name", "arguments"}`` mappings, as sessions store them,
    with the ``provider_metadata`` the provider sent with each call. ``meta`` holds what
    else the message carries, in the shapes a session stores (``parts``, ``reasoning``,
    ``provider_metadata``; a host's raw message has the same keys): files become content
    parts, reasoning goes back in the field it came in when the provider wants it back,
    and the provider's own fields are sent back as received (``OPENAI_COMPATIBLE``).
    A message without any of these encodes exactly as before.
    """
    if role == "assistant" and tool_calls:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [_wire_call(c) for c in tool_calls],
        }
    elif role == "tool":
        if not tool_call_id:
            raise ConfigurationError("a tool message must name the call it answers "
                                     "(tool_call_id); every chat API rejects it otherwise")
        message = {"role": "tool", "tool_call_id": tool_call_id, "content": content}
    else:
        message = {"role": role, "content": content}
    if meta:
        _carry(message, meta)
    return message


OPENAI_COMPATIBLE = "openai_compatible"
"""The ``provider_metadata`` key of what an OpenAI-compatible endpoint sent besides the
standard fields (a call's ``extra_content``, a message's own fields, the field its
reasoning came in): sent back exactly as received."""


def _wire_call(call: Mapping[str, Any]) -> dict[str, Any]:
    wired: dict[str, Any] = {"id": call["id"], "type": "function",
                             "function": {"name": call["name"],
                                          "arguments": call.get("arguments", "{}")}}
    extra = (call.get("provider_metadata") or {}).get(OPENAI_COMPATIBLE)
    if extra:
        wired.update(extra)
    return wired


def _carry(message: dict[str, Any], meta: Mapping[str, Any]) -> None:
    """Add ``meta``'s parts, reasoning and provider fields to a wire message."""
    parts = meta.get("parts")
    if parts and message["role"] in ("user", "system"):
        message["content"] = [_wire_part(p) for p in parts]
    elif parts and message["role"] == "tool":
        # Chat Completions tool messages take text parts only: files go as a user
        # message's parts right after (``tool_files``), as the adapter sends them.
        message["content"] = "\n".join(p.get("text", "") for p in parts
                                       if p.get("type") == "text") or message["content"]
    for reasoning in meta.get("reasoning") or ():
        extra = (reasoning.get("provider_metadata") or {}).get(OPENAI_COMPATIBLE) or {}
        if not extra.get("send_back"):
            continue
        field = extra.get("field")
        if field:
            message[field] = message.get(field, "") + reasoning.get("text", "")
        details = extra.get("details")
        if isinstance(details, list) and details:
            message["reasoning_details"] = [*message.get("reasoning_details", ()), *details]
    extra = (meta.get("provider_metadata") or {}).get(OPENAI_COMPATIBLE)
    if extra:
        message.update(extra)


def _wire_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A content part: text, an image (``image_url``, inline bytes as a data URL), a
    PDF or another file (``file`` with ``file_data``), a text file (its text); the
    fields the host's provider adds to a part (a cache hint, say) as given."""
    wired = _content_part(part)
    extra = (part.get("provider_metadata") or {}).get(OPENAI_COMPATIBLE)
    if extra:
        wired.update(extra)
    return wired


def _content_part(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") == "text":
        return {"type": "text", "text": part.get("text", "")}
    media_type = part.get("media_type", "application/octet-stream")
    data, url = part.get("data"), part.get("url")
    if media_type.startswith("text/") and data is not None:
        import base64

        text = base64.b64decode(data).decode("utf-8", "replace")
        name = part.get("filename") or "attachment"
        return {"type": "text", "text": f"[file {name} ({media_type})]\n{text}"}
    source = url if data is None else f"data:{media_type};base64,{data}"
    if media_type.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": source}}
    return {"type": "file", "file": {"filename": part.get("filename") or "attachment",
                                     "file_data": source}}


TOOL_FILES_NOTE = "Attached file(s) from the tool results above:"


def file_parts(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The file parts of a message (its stored metadata, or a host's raw message)."""
    return [p for p in meta.get("parts") or () if p.get("type") == "file"]


def tool_files_message(files: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The user message that carries the files of a run of tool results, sent right
    after the run: Chat Completions tool messages hold text only, and a user message
    between two tool messages would part them from the call they answer."""
    return {"role": "user", "content": [{"type": "text", "text": TOOL_FILES_NOTE},
                                        *(_wire_part(p) for p in files)]}


def entry_wire_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The wire message of a stored conversation entry (its JSON, decoded)."""
    metadata = entry.get("metadata") or {}
    call_id = metadata.get("tool_call_id")
    return wire_message(entry["role"], entry["content"], metadata.get("tool_calls") or None,
                        str(call_id) if call_id is not None else None, metadata)


class BodyFrame:
    """A request body around its messages: ``head + ", ".join(messages) + tail``.

    Every request body is assembled this way, so a body can be extended by one message
    without decoding it, and two builders of the same body agree byte for byte.
    """

    __slots__ = ("head", "tail")

    def __init__(self, head: str, tail: str) -> None:
        self.head, self.tail = head, tail

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BodyFrame) and (self.head, self.tail) == (other.head,
                                                                            other.tail)

    def __hash__(self) -> int:
        return hash((self.head, self.tail))

    @classmethod
    def chat(cls, model: str, tools: Sequence[Mapping[str, Any]],
             options: Mapping[str, Any] | None = None) -> BodyFrame:
        """The frame of a streaming chat completions request (``tools`` in wire shape;
        ``options``: the call's body fields, ``max_tokens``, ``temperature``... and any
        provider-specific ones, after the standard fields, never replacing them)."""
        marker = "\x00messages\x00"
        payload: dict[str, Any] = {
            "model": model,
            "messages": marker,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            payload["tools"] = list(tools)
        for name, value in (options or {}).items():
            payload.setdefault(name, value)
        text, quoted = json.dumps(payload), json.dumps(marker)
        if text.count(quoted) != 1:  # only a model name holding the marker could do this
            raise ConfigurationError(f"model name {model!r} cannot be sent")
        head, _, tail = text.partition(quoted)
        return cls(head + "[", "]" + tail)

    def body(self, messages: Sequence[str]) -> str:
        """The body holding ``messages``, each already encoded with ``json.dumps``."""
        return self.head + ", ".join(messages) + self.tail
