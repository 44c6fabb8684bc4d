"""Which of the host's request headers reach the model endpoint: a fixed allow-list.

A host such as OpenCode gives its provider headers for each model call: its session and
affinity ids (a provider routes and caches by them), the parent session of a subagent,
its user agent, and provider features (``anthropic-beta``); Claude Code its session id
(``x-claude-code-session-id``) and a subagent's (``x-claude-code-agent-id``), which it
sends Anthropic directly. Through nonoka the provider
sends them in the chat request's ``headers``; each adapter adds the ones this module
allows to its own request, so the endpoint sees what it would see directly.

Never forwarded: credentials of any kind (``authorization``, ``x-api-key``, ``api-key``,
cookies, proxy credentials) — the adapter sends its own provider's key, and only that —
nor transport headers (``host``, ``content-*``, ``accept*``, ``connection``), nor
anything not listed here. Standard library only: the bridge's early path imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

EVERY_PROVIDER = frozenset({"x-session-id", "x-session-affinity", "x-parent-session-id"})
"""Forwarded to every endpoint, as the host's own provider sends them."""

BY_PROVIDER: dict[str, frozenset[str]] = {
    "anthropic": frozenset({"anthropic-beta", "x-claude-code-session-id",
                            "x-claude-code-agent-id"}),
    "openai": frozenset({"openai-beta"}),
}
"""Forwarded only to the provider whose feature header it is."""

MAX_VALUE = 4096
"""A longer value is dropped (no header a provider reads comes near it)."""

USER_AGENT = f"nonoka/{sys.modules['nonoka'].__version__}"
"""Appended to the host's user agent (``opencode/1.18.33 nonoka/0.1.0``), or sent alone.
The version is read from the ``nonoka`` package, loaded before any of its modules (this
layer imports nothing from the package's public API)."""


def forwarded(headers: Mapping[str, object] | None, provider: str) -> dict[str, str]:
    """The headers from ``headers`` (the host's) that go to a ``provider`` endpoint
    (``anthropic`` or ``openai``: every OpenAI-compatible endpoint), with lower-case
    names, and ``User-Agent`` (the adapters' spelling, so it replaces their default):
    the host's with ``nonoka/<version>`` appended. No headers (``None``: a request
    from no host, ``nonoka run``) add nothing."""
    if headers is None:
        return {}
    allowed = EVERY_PROVIDER | BY_PROVIDER.get(provider, frozenset())
    out: dict[str, str] = {}
    agent = ""
    for name, value in (headers or {}).items():
        if not isinstance(value, str):  # the early path reads the request's raw JSON
            continue
        key = str(name).strip().lower()
        value = value.strip()
        if not value or len(value) > MAX_VALUE or "\n" in value or "\r" in value:
            continue
        if key == "user-agent":
            agent = value
        elif key in allowed:
            out[key] = value
    out["User-Agent"] = f"{agent} {USER_AGENT}" if agent else USER_AGENT
    return out
