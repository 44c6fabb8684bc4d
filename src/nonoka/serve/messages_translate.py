"""A Messages API request for a model that is not ``anthropic:``: its call options in
the neutral form every adapter takes.

The history needs no translation: ``nonoka.serve.messages`` parses it into nonoka's
neutral messages (texts, images, PDFs, tool calls and results, thinking), which each
adapter encodes for its own API, leaving out what it cannot send (Anthropic's signed
thinking, a tool result's ``is_error``). The body's own fields are another matter: the
``anthropic:`` adapter takes Anthropic's forms as they are, another adapter takes Chat
Completions' forms, so this module rewrites them — ``tool_choice`` and
``disable_parallel_tool_use``, ``top_k``, structured output (``output_config``) — and
leaves out the fields only Anthropic's API has (``metadata``, ``thinking``,
``cache_control``...). docs/serve.md lists every mapping and every loss.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from nonoka.errors import Failure
from nonoka.protocol.models import CallOptionsSpec, ChatRequest
from nonoka.serve.errors import provider_error

ANTHROPIC_ONLY = ("metadata", "thinking", "service_tier", "context_management", "container",
                  "mcp_servers", "cache_control", "inference_geo", "speed")
"""Body fields only Anthropic's API has: not sent to another model (the server's model
reasons, or not, as its own spec says; ``metadata.user_id`` still names Claude Code's
session, which ``nonoka.serve.messages`` reads before this)."""

_NUMBER = re.compile(r"\d[\d,]*")

_CHOICES: Final[Mapping[str, str]] = MappingProxyType(
    {"auto": "auto", "any": "required", "none": "none"})
"""Anthropic's ``tool_choice`` types as Chat Completions names them."""


class OutputLimits:
    """The most output tokens a model takes, as the catalog (with the project's
    ``[models]`` table) says, read once per model and kept with the server: Claude Code
    asks for Claude's 32,000 or more, which a model with a smaller limit (``gpt-4o``:
    16,384) refuses."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self._known: dict[str, int | None] = {}

    def most(self, spec: str) -> int | None:
        """``spec``'s limit, ``None`` when nobody described the model."""
        if spec not in self._known:
            from nonoka.llm.catalog import project_models

            known = project_models(self.project).get(spec)
            self._known[spec] = None if known is None else known.max_output_tokens
        return self._known[spec]


def translated(request: ChatRequest, body: Mapping[str, Any],
               most: int | None = None) -> ChatRequest:
    """``request`` (parsed from ``body`` for the ``anthropic:`` adapter) with its call
    options in the neutral form, ``max_tokens`` at most ``most``; a ``ValueError``
    names what the body got wrong."""
    return request.model_copy(update={"options": options(body, bool(request.tools), most)})


def options(body: Mapping[str, Any], has_tools: bool,
            most: int | None = None) -> CallOptionsSpec:
    """The call options of a Messages API ``body`` for any adapter: ``max_tokens`` (at
    most ``most``), ``temperature``, ``top_p``, ``top_k``, ``stop_sequences`` as ``stop``,
    ``tool_choice`` (only beside tools: Chat Completions refuses it alone) and structured
    output."""
    asked = int(body["max_tokens"])
    fields: dict[str, Any] = {"max_tokens": asked if most is None else min(asked, most)}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            fields[name] = body[name]
    if isinstance(body.get("stop_sequences"), list) and body["stop_sequences"]:
        fields["stop"] = body["stop_sequences"]
    extra: dict[str, Any] = {}
    choice = body.get("tool_choice")
    if has_tools and isinstance(choice, Mapping):
        fields["tool_choice"] = tool_choice(choice)
        if choice.get("disable_parallel_tool_use") is True and choice.get("type") != "none":
            extra["parallel_tool_calls"] = False
    response_format = _response_format(body.get("output_config"))
    if response_format is not None:
        fields["response_format"] = response_format
    if extra:
        fields["extra"] = extra
    return CallOptionsSpec.model_validate(fields)


def tool_choice(choice: Mapping[str, Any]) -> str | dict[str, Any]:
    """``{"type": "auto"|"any"|"none"|"tool"}`` as Chat Completions' ``auto``,
    ``required``, ``none`` or ``{"type": "function", "function": {"name": ...}}``."""
    kind = choice.get("type")
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(kind, str) and kind in _CHOICES:
        return _CHOICES[kind]
    raise ValueError(f"tool_choice.type: {kind!r} is not one of 'auto', 'any', 'tool', "
                     "'none'")


def _response_format(config: Any) -> dict[str, Any] | None:
    """``output_config.format`` (a JSON schema) as Chat Completions' ``response_format``;
    ``output_config``'s other settings (``effort``) are Anthropic's own."""
    found = config.get("format") if isinstance(config, Mapping) else None
    if not isinstance(found, Mapping) or found.get("type") != "json_schema" or \
            not isinstance(found.get("schema"), Mapping):
        return None
    return {"type": "json_schema",
            "json_schema": {"name": "output", "schema": dict(found["schema"]), "strict": True}}


def overflow_message(failure: Failure) -> str | None:
    """A context overflow another API reported (``context_length_exceeded``) in the
    words Claude Code compacts on, Anthropic's ``prompt is too long: N tokens > M
    maximum``; ``None`` for any other failure. OpenAI's message names the limit first,
    then the tokens asked for."""
    error = provider_error((failure.provider or {}).get("body"))
    if error is None or error.get("code") != "context_length_exceeded":
        return None
    said = str(error.get("message") or failure.message)
    numbers = [n.replace(",", "") for n in _NUMBER.findall(said)]
    if len(numbers) >= 2:
        return f"prompt is too long: {numbers[1]} tokens > {numbers[0]} maximum"
    return f"prompt is too long: {said}"
