"""Strict modes: refuse what the real services refuse when a client drops what they sent.

``deepseek_thinking``: DeepSeek's thinking mode needs the ``reasoning_content`` of an
assistant message that called tools passed back with it; without it the API answers
HTTP 400 ``invalid_request_error``. The check covers tool calls this server sent in a
``Reply`` with ``reasoning_field="reasoning_content"``.

``reasoning_back``: a thinking model served behind an OpenAI-compatible endpoint (Kimi,
GLM, vLLM or SGLang serving one, OpenRouter with signed reasoning) needs the reasoning of
an assistant message that called tools back in the field it was streamed in
(``reasoning_content``, ``reasoning``, or ``reasoning_details`` unchanged, signature
included); without it the endpoint answers HTTP 400 ``invalid_request_error``. It covers
every ``Reply`` with reasoning and tool calls, whatever its ``reasoning_field``.

``gemini_signatures``: Gemini 3 signs tool calls (``extra_content.google.thought_signature``)
and validates them on the way back: a signature that comes back altered is "corrupted"
wherever it is; a missing one is refused for the calls of the current turn (after the
last user message), as Gemini checks only that turn. Both are HTTP 400
``INVALID_ARGUMENT`` in the list-wrapped body Gemini's OpenAI-compatible endpoint sends.

Internal: ``STRICT_MODES`` is re-exported by ``nonoka.testing.server``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from nonoka.testing.replies import Reply, reasoning_details
from nonoka.testing.steps import HttpError

STRICT_MODES = ("deepseek_thinking", "gemini_signatures", "reasoning_back")
"""The strict modes a ``ScriptedOpenAIServer`` can enforce."""

DEEPSEEK_REASONING_MISSING = {"error": {
    "message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
    "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}

GEMINI_DOCS = "https://ai.google.dev/gemini-api/docs/thought-signatures"


def gemini_error(message: str) -> HttpError:
    return HttpError(400, [{"error": {"code": 400, "message": message,
                                      "status": "INVALID_ARGUMENT"}}])


def gemini_signature_missing(name: str, position: int) -> HttpError:
    return gemini_error(
        "Function call is missing a thought_signature in functionCall parts. This is "
        "required for tools to work correctly, and missing thought_signature may lead to "
        f"degraded model performance. Additional data, function call `default_api:{name}` , "
        f"position {position}. Please refer to {GEMINI_DOCS} for more details.")


def reasoning_not_back(index: int, field: str) -> HttpError:
    return HttpError(400, {"error": {
        "message": (f"messages[{index}]: an assistant message with tool_calls must carry the "
                    f"{field} the model produced, unchanged, when thinking is enabled"),
        "type": "invalid_request_error", "param": f"messages.{index}.{field}",
        "code": "invalid_request_error"}})


def checked_modes(modes: Collection[str],
                  allowed: Collection[str] = STRICT_MODES) -> frozenset[str]:
    unknown = sorted(set(modes) - set(allowed))
    if unknown:
        raise ValueError(f"unknown strict mode {unknown[0]!r}; use one of "
                         f"{', '.join(allowed)}")
    return frozenset(modes)


class Produced:
    """What the server sent that a client must send back, by tool call id.

    Owned by one server; the server calls it under its lock.
    """

    def __init__(self) -> None:
        self.with_reasoning: set[str] = set()
        self.signatures: dict[str, str] = {}
        self.reasoning: dict[str, tuple[str, Any]] = {}
        """A call id: the field its message's reasoning came in, and what it held."""

    def note(self, reply: Reply) -> None:
        if reply.reasoning and reply.reasoning_field == "reasoning_content":
            self.with_reasoning.update(call.id for call in reply.tool_calls)
        if reply.reasoning:
            field = reply.reasoning_field
            sent = (reasoning_details(reply.reasoning) if field == "reasoning_details"
                    else reply.reasoning)
            self.reasoning.update((call.id, (field, sent)) for call in reply.tool_calls)
        self.signatures.update(reply.thought_signatures)

    def refusal(self, body: dict[str, Any], modes: frozenset[str]) -> HttpError | None:
        """The error the real service answers ``body`` with, or ``None`` when it is fine."""
        raw = body.get("messages")
        messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
        if "deepseek_thinking" in modes:
            refused = self._deepseek(messages)
            if refused is not None:
                return refused
        if "reasoning_back" in modes:
            refused = self._reasoning_back(messages)
            if refused is not None:
                return refused
        if "gemini_signatures" in modes:
            return self._gemini(messages)
        return None

    def _deepseek(self, messages: list[dict[str, Any]]) -> HttpError | None:
        for message in messages:
            if message.get("role") != "assistant" or message.get("reasoning_content"):
                continue
            if any(call.get("id") in self.with_reasoning for call in _calls(message)):
                return HttpError(400, DEEPSEEK_REASONING_MISSING)
        return None

    def _reasoning_back(self, messages: list[dict[str, Any]]) -> HttpError | None:
        for index, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            for call in _calls(message):
                expected = self.reasoning.get(str(call.get("id")))
                if expected is not None and message.get(expected[0]) != expected[1]:
                    return reasoning_not_back(index, expected[0])
        return None

    def _gemini(self, messages: list[dict[str, Any]]) -> HttpError | None:
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"),
                        default=-1)
        for index, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            for call in _calls(message):
                expected = self.signatures.get(str(call.get("id")))
                if expected is None:
                    continue
                sent = _signature(call)
                if sent is None and index > last_user:
                    function = call.get("function")
                    name = function.get("name") if isinstance(function, dict) else None
                    return gemini_signature_missing(str(name), _position(messages, index))
                if sent is not None and sent != expected:
                    return gemini_error("Corrupted thought signature.")
        return None


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _signature(call: dict[str, Any]) -> Any:
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    return google.get("thought_signature") if isinstance(google, dict) else None


def _position(messages: list[dict[str, Any]], index: int) -> int:
    """Where Gemini counts ``messages[index]`` among its contents, from 1: system
    messages go elsewhere, and a run of tool results is one content."""
    position, previous = 0, None
    for message in messages[:index + 1]:
        role = message.get("role")
        if role in ("system", "developer") or (role == "tool" and previous == "tool"):
            continue
        position, previous = position + 1, role
    return position
