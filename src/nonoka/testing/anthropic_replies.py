"""What the scripted Anthropic server sends back: the Messages API's ``message`` object
and its server-sent events, exactly as Anthropic streams them, and its errors.

An ``AnthropicReply`` is a scripted answer: text, ``Thinking`` blocks (signed, or
redacted), tool calls, the stop reason and usage. A plain ``ModelResponse`` or a string
is served as the ``AnthropicReply`` with its text and calls, and the OpenAI server's
``Reply`` with its reasoning as one thinking block.

Internal: the public names are re-exported by ``nonoka.testing.server``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nonoka.llm.base import ModelResponse
from nonoka.state.messages import ToolCall
from nonoka.testing.replies import Reply, pieces
from nonoka.testing.steps import HttpError


@dataclass(frozen=True)
class Thinking:
    """One thinking block of a scripted answer: its ``text`` and ``signature`` (by
    default the server signs the text: ``sign(text)``), or, with ``redacted_data``, a
    ``redacted_thinking`` block holding that opaque data."""

    text: str = ""
    signature: str | None = None
    redacted_data: str | None = None

    def block(self) -> dict[str, Any]:
        """The block as the API returns it."""
        if self.redacted_data is not None:
            return {"type": "redacted_thinking", "data": self.redacted_data}
        signature = self.signature if self.signature is not None else sign(self.text)
        return {"type": "thinking", "thinking": self.text, "signature": signature}


def sign(text: str) -> str:
    """The scripted server's signature of a thinking text (opaque, like Anthropic's)."""
    digest = hashlib.sha256(b"nonoka-scripted-thinking\x00" + text.encode()).digest()
    return base64.b64encode(digest).decode()


@dataclass(frozen=True)
class AnthropicReply:
    """A scripted Messages API answer.

    ``thinking`` blocks come first, then ``text``, then ``tool_calls`` (each call's
    ``arguments`` must be a JSON object). ``stop_reason`` defaults to ``tool_use`` with
    calls, else ``end_turn``. Usage: ``input_tokens`` is Anthropic's (the tokens after
    the last cache breakpoint) and ``cache_read_tokens`` / ``cache_write_tokens`` the
    cached ones; left ``None``, the server counts them from the request and its
    breakpoints (about four characters a token). ``output_tokens`` likewise, from what
    the reply holds; ``thinking_tokens`` from the thinking text.
    """

    text: str = ""
    thinking: Sequence[Thinking] = ()
    tool_calls: Sequence[ToolCall] = ()
    stop_reason: str | None = None
    stop_sequence: str | None = None
    """The stop sequence the answer ended at (with ``stop_reason="stop_sequence"``)."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    thinking_tokens: int | None = None
    model: str = ""
    raw_usage: Mapping[str, Any] | None = None
    """Usage fields sent as given over the counted ones (a broken endpoint's NaN...)."""

    @classmethod
    def of(cls, step: ModelResponse | Reply | str, **extra: Any) -> AnthropicReply:
        """The reply for a ``ModelResponse`` (``text``, ``call``, ``calls``), an OpenAI
        ``Reply`` (its reasoning as one signed thinking block) or a text."""
        if isinstance(step, str):
            return cls(**{"text": step, **extra})
        base: dict[str, Any] = {"text": step.text, "tool_calls": tuple(step.tool_calls),
                                "model": step.model}
        if isinstance(step, Reply) and step.reasoning:
            base["thinking"] = (Thinking(step.reasoning),)
        return cls(**{**base, **extra})

    @property
    def stop(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "end_turn"

    def content(self) -> list[dict[str, Any]]:
        """The answer's content blocks, as the API returns them."""
        blocks = [t.block() for t in self.thinking]
        if self.text:
            blocks.append({"type": "text", "text": self.text})
        blocks.extend({"type": "tool_use", "id": call.id, "name": call.name,
                       "input": _input(call)} for call in self.tool_calls)
        return blocks

    def counted_output(self) -> tuple[int, int]:
        """Output and thinking tokens: as scripted, else about four characters a token."""
        thought = self.thinking_tokens
        if thought is None:
            thought = sum(_tokens(t.text or t.redacted_data or "") for t in self.thinking)
        output = self.output_tokens
        if output is None:
            output = thought + _tokens(self.text) + sum(
                _tokens(c.name + c.arguments) for c in self.tool_calls)
        return max(output, 1), min(thought, max(output, 1))


def as_anthropic(step: AnthropicReply | ModelResponse | Reply | str) -> AnthropicReply:
    return step if isinstance(step, AnthropicReply) else AnthropicReply.of(step)


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _input(call: ToolCall) -> dict[str, Any]:
    value = json.loads(call.arguments or "{}")
    if not isinstance(value, dict):
        raise ValueError(f"tool call {call.id}: Anthropic tool input must be a JSON object")
    return value


@dataclass(frozen=True)
class StreamError:
    """Start a streamed answer (with ``partial_text``), then send an ``error`` event, as
    Anthropic does when it is overloaded mid-stream, and end the stream."""

    type: str = "overloaded_error"
    message: str = "Overloaded"
    partial_text: str = ""


# -- usage ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheUsage:
    """What a request costs in input tokens: ``input`` after the last breakpoint (Anthropic's
    ``input_tokens``), ``read`` from the cache, ``write_5m`` and ``write_1h`` written."""

    input: int
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0


def usage(reply: AnthropicReply, counted: CacheUsage) -> dict[str, Any]:
    """The ``usage`` object of the answer (scripted fields win over counted ones)."""
    read = counted.read if reply.cache_read_tokens is None else reply.cache_read_tokens
    if reply.cache_write_tokens is None:
        write_5m, write_1h = counted.write_5m, counted.write_1h
    else:
        write_5m, write_1h = reply.cache_write_tokens, 0
    output, thought = reply.counted_output()
    wire: dict[str, Any] = {
        "input_tokens": counted.input if reply.input_tokens is None else reply.input_tokens,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": write_5m,
                           "ephemeral_1h_input_tokens": write_1h},
        "output_tokens": output,
        "service_tier": "standard",
    }
    if reply.thinking:
        wire["output_tokens_details"] = {"thinking_tokens": thought}
    return {**wire, **(reply.raw_usage or {})}


# -- the answer as a message and as a stream ------------------------------------------------------


def message(reply: AnthropicReply, model: str, number: int,
            counted: CacheUsage) -> dict[str, Any]:
    """The ``message`` object the API returns when not streaming."""
    return {"id": message_id(number), "type": "message", "role": "assistant", "model": model,
            "content": reply.content(), "stop_reason": reply.stop,
            "stop_sequence": reply.stop_sequence,
            "usage": usage(reply, counted)}


def message_id(number: int) -> str:
    return f"msg_scripted{number:012d}"


def events(reply: AnthropicReply, model: str, number: int, counted: CacheUsage,
           size: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs Anthropic streams for ``reply``: ``message_start``,
    ``ping``, each block's start, deltas and stop, ``message_delta``, ``message_stop``."""
    full = usage(reply, counted)
    yield start_event(model, number, full)
    yield "ping", {"type": "ping"}
    for index, block in enumerate(reply.content()):
        yield from block_events(index, block, size)
    delta_usage = {k: full[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                        "cache_read_input_tokens", "output_tokens")}
    if "output_tokens_details" in full:
        delta_usage["output_tokens_details"] = full["output_tokens_details"]
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": reply.stop,
                                      "stop_sequence": reply.stop_sequence},
                            "usage": delta_usage}
    yield "message_stop", {"type": "message_stop"}


def start_event(model: str, number: int,
                full_usage: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``message_start``: an empty message with the input usage (output counted so far: 1)."""
    return "message_start", {"type": "message_start", "message": {
        "id": message_id(number), "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {**full_usage, "output_tokens": 1}}}


def block_events(index: int, block: Mapping[str, Any],
                 size: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """One content block: its start (empty), its deltas in pieces of ``size``, its stop."""
    kind = block["type"]

    def delta(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {"type": "content_block_delta", "index": index,
                                       "delta": value}

    if kind == "text":
        opening: dict[str, Any] = {"type": "text", "text": ""}
    elif kind == "thinking":
        opening = {"type": "thinking", "thinking": "", "signature": ""}
    elif kind == "tool_use":
        opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
    else:  # redacted_thinking arrives whole
        opening = dict(block)
    yield "content_block_start", {"type": "content_block_start", "index": index,
                                  "content_block": opening}
    if kind == "text":
        for piece in pieces(block["text"], size):
            yield delta({"type": "text_delta", "text": piece})
    elif kind == "thinking":
        for piece in pieces(block["thinking"], size):
            yield delta({"type": "thinking_delta", "thinking": piece})
        yield delta({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        arguments = json.dumps(block["input"])
        yield delta({"type": "input_json_delta", "partial_json": ""})
        for piece in pieces(arguments, max(1, len(arguments) // 3)):
            yield delta({"type": "input_json_delta", "partial_json": piece})
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


# -- errors -----------------------------------------------------------------------------------


def error_body(kind: str, message: str, number: int = 0) -> dict[str, Any]:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": f"req_scripted{number:012d}"}


def error_kind(status: int) -> str:
    """The error ``type`` Anthropic sends with an HTTP status."""
    return {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
            403: "permission_error", 404: "not_found_error", 413: "request_too_large",
            429: "rate_limit_error", 504: "timeout_error",
            529: "overloaded_error"}.get(status, "api_error")


def anthropic_overloaded() -> HttpError:
    """HTTP 529 ``overloaded_error``: Anthropic's API is temporarily overloaded."""
    return HttpError(529, error_body("overloaded_error", "Overloaded"))


def anthropic_rate_limited(retry_after: float = 1.0) -> HttpError:
    """HTTP 429 ``rate_limit_error`` with a ``retry-after`` header (seconds)."""
    message = ("This request would exceed the rate limit for your organization "
               "(org-scripted) of 30,000 input tokens per minute. For details, refer to: "
               "https://docs.claude.com/en/api/rate-limits. You can see the response headers "
               "for current usage. Please reduce the prompt length or the maximum tokens "
               "requested, or try again later. You may also contact sales at "
               "https://www.anthropic.com/contact-sales to discuss your options for a rate "
               "limit increase.")
    return HttpError(429, error_body("rate_limit_error", message), retry_after=retry_after)


def invalid_request(message: str) -> HttpError:
    """HTTP 400 ``invalid_request_error`` with ``message``."""
    return HttpError(400, error_body("invalid_request_error", message))
