"""What the scripted server sends back: the ``chat.completion`` and streamed
``chat.completion.chunk`` shapes, with the fields vendors add to them.

A ``Reply`` carries what a plain ``ModelResponse`` cannot: reasoning streamed as DeepSeek
does (``reasoning_content``) or as OpenRouter does (``reasoning``), Gemini's thought
signature on a tool call (``extra_content.google.thought_signature``), and usage details
(``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``).
A ``ModelResponse`` step is served as the ``Reply`` with none of these.

Internal: the public names are re-exported by ``nonoka.testing.server``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nonoka.llm.base import ModelResponse
from nonoka.state.messages import ToolCall

ReasoningField = Literal["reasoning_content", "reasoning", "reasoning_details"]
"""Where a ``Reply`` streams its reasoning: ``reasoning_content`` (DeepSeek, Kimi, GLM,
SGLang), ``reasoning`` (vLLM, OpenRouter's text), or ``reasoning_details``: OpenRouter's
``reasoning`` text together with its structured ``reasoning_details`` (one
``reasoning.text`` detail, its signature in the last piece)."""


@dataclass(frozen=True)
class Reply:
    """A scripted answer with reasoning, signed tool calls and detailed usage.

    ``reasoning`` streams before the text in ``reasoning_field`` (``"reasoning_content"``,
    DeepSeek; ``"reasoning"``, vLLM; ``"reasoning_details"``, OpenRouter's text and
    signed details). ``thought_signatures`` maps a tool call's id
    to the signature sent with it. ``cached_tokens`` and ``reasoning_tokens``, when set,
    appear in the usage details. ``finish_reason`` defaults to ``"tool_calls"`` when
    there are tool calls, else ``"stop"``.
    """

    text: str = ""
    reasoning: str = ""
    reasoning_field: ReasoningField = "reasoning_content"
    tool_calls: Sequence[ToolCall] = ()
    thought_signatures: Mapping[str, str] = field(default_factory=dict)
    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    finish_reason: str | None = None
    model: str = ""
    raw_usage: Mapping[str, Any] | None = None
    """Usage fields sent as given over the counted ones (a broken endpoint's NaN...)."""

    @classmethod
    def of(cls, response: ModelResponse, **extra: Any) -> Reply:
        """The reply for a ``ModelResponse`` (from ``text``, ``call``, ``calls``), with
        ``extra`` fields set: ``Reply.of(call("f", id="c1"), thought_signatures={...})``."""
        base: dict[str, Any] = {
            "text": response.text, "tool_calls": tuple(response.tool_calls),
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
            "cost_usd": response.usage.cost_usd, "finish_reason": response.finish_reason,
            "model": response.model,
        }
        return cls(**{**base, **extra})

    @property
    def finish(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


def as_reply(step: ModelResponse | Reply | str) -> Reply:
    """Any answering step as a ``Reply``."""
    if isinstance(step, Reply):
        return step
    if isinstance(step, str):
        return Reply(text=step)
    return Reply.of(step)


def chunks(reply: Reply, model: str, include_usage: bool, size: int,
           number: int) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects a vendor streams for ``reply`` (``number``
    makes the completion's id)."""
    head = {"id": f"chatcmpl-scripted-{number}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model, "system_fingerprint": "fp_scripted"}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**head, "choices": [choice], **({"usage": None} if include_usage else {})}

    first_content = "" if reply.text or not reply.tool_calls else None
    yield chunk({"role": "assistant", "content": first_content, "refusal": None})
    for piece in pieces(reply.reasoning, size):
        if reply.reasoning_field == "reasoning_content":
            yield chunk({"content": None, "reasoning_content": piece})
        elif reply.reasoning_field == "reasoning_details":
            yield chunk({"reasoning": piece, "reasoning_details": [
                {"type": "reasoning.text", "text": piece, "format": DETAILS_FORMAT,
                 "index": 0}]})
        else:
            yield chunk({"reasoning": piece})
    if reply.reasoning and reply.reasoning_field == "reasoning_details":
        yield chunk({"reasoning_details": [
            {"type": "reasoning.text", "signature": details_signature(reply.reasoning),
             "format": DETAILS_FORMAT, "index": 0}]})
    for piece in pieces(reply.text, size):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        opening = {"index": index, **tool_call(call, reply.thought_signatures, arguments="")}
        yield chunk({"tool_calls": [opening]})
        for piece in pieces(call.arguments, max(1, len(call.arguments) // 3)):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, reply.finish)
    if include_usage:
        yield {**head, "choices": [], "usage": usage(reply)}


def completion(reply: Reply, model: str, number: int) -> dict[str, Any]:
    """The ``chat.completion`` object a vendor returns when not streaming."""
    message: dict[str, Any] = {"role": "assistant",
                               "content": reply.text or (None if reply.tool_calls else ""),
                               "refusal": None}
    if reply.reasoning and reply.reasoning_field == "reasoning_details":
        message["reasoning"] = reply.reasoning
        message["reasoning_details"] = reasoning_details(reply.reasoning)
    elif reply.reasoning:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [tool_call(c, reply.thought_signatures)
                                 for c in reply.tool_calls]
    return {
        "id": f"chatcmpl-scripted-{number}", "object": "chat.completion",
        "created": int(time.time()), "model": model, "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": reply.finish}],
        "usage": usage(reply),
    }


DETAILS_FORMAT = "anthropic-claude-v1"


def details_signature(text: str) -> str:
    """The signature this server gives a reasoning text (opaque, checked on the way back)."""
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha256(b"details\x00" + text.encode()).digest()).decode()


def reasoning_details(text: str) -> list[dict[str, Any]]:
    """The ``reasoning_details`` of a whole reasoning text, as a client that joined the
    streamed pieces holds them (and must send them back)."""
    return [{"type": "reasoning.text", "text": text, "format": DETAILS_FORMAT, "index": 0,
             "signature": details_signature(text)}]


def tool_call(call: ToolCall, signatures: Mapping[str, str],
              arguments: str | None = None) -> dict[str, Any]:
    """One tool call on the wire; with its thought signature the way Gemini sends it."""
    wire: dict[str, Any] = {"id": call.id, "type": "function", "function": {
        "name": call.name, "arguments": call.arguments if arguments is None else arguments}}
    if call.id in signatures:
        wire["extra_content"] = {"google": {"thought_signature": signatures[call.id]}}
    return wire


def usage(reply: Reply) -> dict[str, Any]:
    wire: dict[str, Any] = {"prompt_tokens": reply.input_tokens,
                            "completion_tokens": reply.output_tokens,
                            "total_tokens": reply.input_tokens + reply.output_tokens}
    if reply.cached_tokens is not None:
        wire["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    if reply.reasoning_tokens is not None:
        wire["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    if reply.cost_usd is not None:
        wire["cost"] = reply.cost_usd  # as OpenRouter reports it
    return {**wire, **(reply.raw_usage or {})}


def pieces(value: str, size: int) -> Iterator[str]:
    for start in range(0, len(value), size):
        yield value[start:start + size]
