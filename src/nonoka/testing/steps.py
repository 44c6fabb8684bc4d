"""The steps a scripted server answers with, and how a JSON script spells them.

Besides answers (``ModelResponse``, ``Reply``, plain text; for the Responses API's
server also ``ResponsesReply``, its output items in order, and ``ResponseFailed``, a
stream that fails) a step may be a fault: ``HttpError``, ``Delay``, ``DropConnection``.
``context_length_exceeded``, ``insufficient_quota`` and ``rate_limited`` build the errors
OpenAI sends in those cases, status, headers and body as the official SDK sees them.

Internal: the public names are re-exported by ``nonoka.testing.server``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from nonoka.llm.base import ModelResponse, Usage
from nonoka.state.messages import ToolCall
from nonoka.testing.replies import ReasoningField, Reply, as_reply


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error. ``body`` is JSON (an object, or a list as Gemini sends)
    or raw text; by default an OpenAI-style ``{"error": {...}}`` body is sent."""

    status: int
    body: dict[str, Any] | list[Any] | str | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` before answering with ``then`` (timeouts, cancellation), or,
    given ``until``, until a test sets it: an answer held exactly as long as the test
    needs, however slow the machine (``seconds`` is then only a bound)."""

    seconds: float
    then: Step = ""
    until: threading.Event | None = None

    def wait(self, closing: threading.Event) -> bool:
        """Wait as the step says; whether the server is closing (then: no answer)."""
        if self.until is None:
            return closing.wait(self.seconds)
        deadline = time.monotonic() + self.seconds
        while not self.until.wait(0.05):
            if closing.is_set():
                return True
            if time.monotonic() > deadline:
                break
        return closing.is_set()


@dataclass(frozen=True)
class DropConnection:
    """Start a streamed answer, send ``partial_text``, then close the connection mid-stream."""

    partial_text: str = ""


@dataclass(frozen=True)
class Linger:
    """Answer with ``then``, but never end the stream: keep the connection open (sending
    a keep-alive every ``ping`` seconds when set: an SSE comment, Anthropic's ``ping``
    event) until the client hangs up or the server closes. After a whole answer, an
    endpoint that idles instead of closing; with ``then`` a ``DropConnection``, one
    stuck mid-answer that only pings."""

    then: Any = ""
    """Any answer or fault of the server it is given to (``Step``, ``AnthropicStep``)."""
    ping: float | None = None


@dataclass(frozen=True)
class Paced:
    """Stream ``then`` with ``seconds`` between its events, each written as it is made:
    an answer that takes a while to stream, as a model's does (a kill can land in the
    middle of it). A server's answers otherwise leave in one write."""

    seconds: float
    then: Any = ""
    """Any answer of the server it is given to (``Step``, ``AnthropicStep``)."""


@dataclass(frozen=True)
class Flood:
    """Start a streamed answer and send one ``data:`` line of ``size`` bytes that never
    ends, then hang up: a server that is not speaking Server-Sent Events."""

    size: int


@dataclass(frozen=True)
class ReasoningItem:
    """A reasoning item of a scripted response: its summary parts (empty: the model
    reasoned without a summary, as it often does). Its id and encrypted content are the
    server's."""

    summary: Sequence[str] = ()


@dataclass(frozen=True)
class HostedItem:
    """An output item of a scripted response given whole, as the API sends it: a hosted
    tool's call (``web_search_call``, ``image_generation_call``, ``mcp_call``...) or a
    ``custom_tool_call``. Checked against the official ``openai`` SDK's output item types
    when made, so the server streams only items the API can send."""

    item: Mapping[str, Any]

    def __post_init__(self) -> None:
        from openai.types.responses import ResponseOutputItem
        from pydantic import TypeAdapter

        TypeAdapter(ResponseOutputItem).validate_python(dict(self.item))


OutputItem = ReasoningItem | str | ToolCall | HostedItem
"""A reasoning item, a message's text, or a function call."""


@dataclass(frozen=True)
class ResponsesReply:
    """A scripted Responses API answer: its output items in order, and its usage.

    ``incomplete``: the reason the response stopped early (``"max_output_tokens"``,
    ``"content_filter"``); it then ends with ``response.incomplete``.
    """

    output: Sequence[OutputItem] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    incomplete: str | None = None
    model: str = ""
    raw_usage: Mapping[str, Any] | None = None
    """Usage fields sent as given over the counted ones (a broken endpoint's NaN...)."""
    hold: tuple[int, threading.Event] | None = None
    """``(n, until)``: a stream that stops before its output item ``n`` until a test sets
    ``until`` (60 s at most), so the test sees what a client got of the items before."""

    @classmethod
    def of(cls, step: ModelResponse | Reply | str) -> ResponsesReply:
        """The answer an OpenAI-compatible step stands for: its reasoning (one summary),
        its text, its tool calls."""
        reply = as_reply(step)
        output: list[OutputItem] = []
        if reply.reasoning:
            output.append(ReasoningItem(summary=(reply.reasoning,)))
        if reply.text:
            output.append(reply.text)
        output.extend(reply.tool_calls)
        incomplete = "max_output_tokens" if reply.finish_reason == "length" else None
        return cls(output=tuple(output), input_tokens=reply.input_tokens,
                   output_tokens=reply.output_tokens, cached_tokens=reply.cached_tokens or 0,
                   reasoning_tokens=reply.reasoning_tokens or 0, incomplete=incomplete,
                   model=reply.model, raw_usage=reply.raw_usage)


@dataclass(frozen=True)
class ResponseFailed:
    """A response that starts, then fails in the stream: ``response.failed`` with
    ``error: {code, message}`` (``as_error_event``: an ``error`` event instead)."""

    code: str = "server_error"
    message: str = "The server had an error while processing your request. Sorry about that!"
    as_error_event: bool = False


Step: TypeAlias = ("ModelResponse | Reply | str | HttpError | Delay | DropConnection"
                   " | Linger | Paced | Flood | ResponsesReply | ResponseFailed")
"""What a scripted server answers a request with (``ResponsesReply`` and
``ResponseFailed``: the Responses API's server only)."""


# the errors OpenAI sends -------------------------------------------------------------------


def context_length_exceeded(limit: int = 128000, requested: int = 130000) -> HttpError:
    """HTTP 400 ``context_length_exceeded``: the messages do not fit the model's context."""
    message = (f"This model's maximum context length is {limit} tokens. However, your "
               f"messages resulted in {requested} tokens. Please reduce the length of the "
               "messages.")
    return HttpError(400, {"error": {"message": message, "type": "invalid_request_error",
                                     "param": "messages", "code": "context_length_exceeded"}})


def insufficient_quota() -> HttpError:
    """HTTP 429 ``insufficient_quota``: the account has no credit left (retrying won't help)."""
    message = ("You exceeded your current quota, please check your plan and billing details. "
               "For more information on this error, read the docs: "
               "https://platform.openai.com/docs/guides/error-codes/api-errors.")
    return HttpError(429, {"error": {"message": message, "type": "insufficient_quota",
                                     "param": None, "code": "insufficient_quota"}})


def rate_limited(retry_after: float = 1.0, model: str = "gpt-4o") -> HttpError:
    """HTTP 429 ``rate_limit_exceeded`` with a ``retry-after`` header (seconds)."""
    message = (f"Rate limit reached for {model} in organization org-scripted on tokens per "
               "min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in "
               f"{retry_after:g}s. Visit https://platform.openai.com/account/rate-limits to "
               "learn more.")
    return HttpError(429, {"error": {"message": message, "type": "tokens", "param": None,
                                     "code": "rate_limit_exceeded"}}, retry_after=retry_after)


# the script as JSON ---------------------------------------------------------------------------

_REPLY_KEYS = frozenset({"reasoning_content", "reasoning", "cached_tokens", "reasoning_tokens"})


def step_from_json(value: Any) -> Step:
    """Read one step of a JSON script.

    ``"hi"`` or ``{"text": "hi"}`` (optional ``input_tokens``, ``output_tokens``,
    ``cost_usd``); ``{"tool_calls": [{"id", "name", "arguments"}], "text": ""}`` where
    ``arguments`` is an object or JSON text; ``{"error": 429, "body": ..., "retry_after": 0}``;
    ``{"error": "context_length_exceeded", "limit": ..., "requested": ...}``,
    ``{"error": "insufficient_quota"}``, ``{"error": "rate_limit_exceeded",
    "retry_after": 1}``; ``{"delay": 1.5, ...}`` waits, then answers with the rest of the
    object; ``{"drop": true, "text": "partial"}``.

    An answer with ``reasoning_content`` or ``reasoning`` (text), ``cached_tokens``,
    ``reasoning_tokens``, or a tool call with a ``thought_signature`` is a ``Reply``.
    """
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"a script step must be a string or an object, not {value!r}")
    if "delay" in value:
        rest = {k: v for k, v in value.items() if k != "delay"}
        return Delay(float(value["delay"]), step_from_json(rest) if rest else "")
    if "error" in value:
        return _error_from_json(value)
    if value.get("drop"):
        return DropConnection(str(value.get("text", "")))
    calls = [_call_from_json(i, c) for i, c in enumerate(value.get("tool_calls") or [], 1)]
    if "text" not in value and not calls:
        raise ValueError(f"unknown script step {value!r}")
    signatures = {call.id: str(c["thought_signature"])
                  for call, c in zip(calls, value.get("tool_calls") or [], strict=True)
                  if c.get("thought_signature") is not None}
    if signatures or _REPLY_KEYS & value.keys():
        return _reply_from_json(value, calls, signatures)
    usage = Usage(input_tokens=int(value.get("input_tokens", 10)),
                  output_tokens=int(value.get("output_tokens", 5)),
                  cost_usd=value.get("cost_usd"))
    return ModelResponse(text=str(value.get("text", "")), tool_calls=calls, usage=usage,
                         finish_reason="tool_calls" if calls else "stop")


def _error_from_json(value: dict[str, Any]) -> HttpError:
    kind = value["error"]
    if kind == "context_length_exceeded":
        return context_length_exceeded(int(value.get("limit", 128000)),
                                       int(value.get("requested", 130000)))
    if kind == "insufficient_quota":
        return insufficient_quota()
    if kind == "rate_limit_exceeded":
        return rate_limited(float(value.get("retry_after", 1.0)),
                            str(value.get("model", "gpt-4o")))
    if isinstance(kind, str):
        raise ValueError(f"unknown scripted error {kind!r}: use an HTTP status, "
                         "'context_length_exceeded', 'insufficient_quota' or "
                         "'rate_limit_exceeded'")
    return HttpError(int(kind), value.get("body"), value.get("retry_after"))


def _call_from_json(number: int, value: dict[str, Any]) -> ToolCall:
    arguments = value.get("arguments")
    return ToolCall(id=str(value.get("id") or f"call_{number}"), name=str(value["name"]),
                    arguments=arguments if isinstance(arguments, str)
                    else json.dumps(arguments or {}))


def _reply_from_json(value: dict[str, Any], calls: list[ToolCall],
                     signatures: dict[str, str]) -> Reply:
    field: ReasoningField = "reasoning" if "reasoning" in value else "reasoning_content"
    cached, reasoning = value.get("cached_tokens"), value.get("reasoning_tokens")
    return Reply(text=str(value.get("text", "")), reasoning=str(value.get(field) or ""),
                 reasoning_field=field, tool_calls=tuple(calls), thought_signatures=signatures,
                 input_tokens=int(value.get("input_tokens", 10)),
                 output_tokens=int(value.get("output_tokens", 5)),
                 cost_usd=value.get("cost_usd"),
                 cached_tokens=None if cached is None else int(cached),
                 reasoning_tokens=None if reasoning is None else int(reasoning))


def load_script(path: str | os.PathLike[str]) -> list[Step]:
    """Read a JSON script file: a list of steps in the forms ``step_from_json`` accepts."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: a script must be a JSON list of steps")
    return [step_from_json(step) for step in data]
