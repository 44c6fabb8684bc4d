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
}
"""Provider prefixes that speak the OpenAI-compatible wire format: default base URL (used
when ``OPENAI_BASE_URL`` is unset) and the variable holding the key. Each provider gets
only its own variable: a committed ``.nonoka/config.toml`` or a request's ``model`` picks
the provider, so a fallback to ``OPENAI_API_KEY`` would let a repository send a user's
OpenAI key to a port or host of its choosing."""
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
"""The one variable that points any provider at another endpoint."""
KEYED = frozenset({"openai", "deepseek", "openrouter"})
"""Providers whose own endpoint refuses every request without a key: without it, nothing
is sent (a local server, the others' default, needs none)."""


def provider_choices() -> str:
    """The provider prefixes, for messages: ``openai:, deepseek:, ...``."""
    return ", ".join(f"{name}:" for name in PROVIDERS)


def provider_lines() -> list[str]:
    """One line per provider: its prefix, key variable and default endpoint."""
    lines = []
    for name, (url, key) in PROVIDERS.items():
        where = url or DEFAULT_BASE_URL
        needs = "needed" if name in KEYED else "if the server wants one"
        lines.append(f"{name + ':':<11} key {key} ({needs}); endpoint {where}")
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
    """Where ``/chat/completions`` lives, parsed once from the base URL."""

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
    def parse(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"model base URL {base_url!r} must look like https://host/v1 or http://host:port/v1"
            )
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ConfigurationError(f"model base URL {base_url!r} has a bad port") from exc
        path = parts.path.rstrip("/") + "/chat/completions"
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
                 tool_call_id: str | None = None) -> dict[str, Any]:
    """A message in the Chat Completions wire shape.

    ``tool_calls`` are ``{"id", "name", "arguments"}`` mappings, as sessions store them.
    """
    if role == "assistant" and tool_calls:
        return {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c.get("arguments", "{}")}}
                for c in tool_calls
            ],
        }
    if role == "tool":
        if not tool_call_id:
            raise ConfigurationError("a tool message must name the call it answers "
                                     "(tool_call_id); every chat API rejects it otherwise")
        return {"role": "tool", "tool_call_id": tool_call_id, "content": content}
    return {"role": role, "content": content}


def entry_wire_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The wire message of a stored conversation entry (its JSON, decoded)."""
    metadata = entry.get("metadata") or {}
    call_id = metadata.get("tool_call_id")
    return wire_message(entry["role"], entry["content"], metadata.get("tool_calls") or None,
                        str(call_id) if call_id is not None else None)


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
    def chat(cls, model: str, tools: Sequence[Mapping[str, Any]]) -> BodyFrame:
        """The frame of a streaming chat completions request (``tools`` in wire shape)."""
        marker = "\x00messages\x00"
        payload: dict[str, Any] = {
            "model": model,
            "messages": marker,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            payload["tools"] = list(tools)
        text, quoted = json.dumps(payload), json.dumps(marker)
        if text.count(quoted) != 1:  # only a model name holding the marker could do this
            raise ConfigurationError(f"model name {model!r} cannot be sent")
        head, _, tail = text.partition(quoted)
        return cls(head + "[", "]" + tail)

    def body(self, messages: Sequence[str]) -> str:
        """The body holding ``messages``, each already encoded with ``json.dumps``."""
        return self.head + ", ".join(messages) + self.tail
