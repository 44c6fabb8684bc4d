"""What the scripted server sends on ``POST /v1/responses``: OpenAI's Responses API.

A step becomes a response's output items (``prepare``): a ``ResponsesReply`` lists them
in order (reasoning items, message texts, function calls, in any order); a ``Reply``,
``ModelResponse`` or plain text gives its reasoning as one reasoning item (its summary),
then its text as a message, then its tool calls. ``response_events`` streams them as the
API does: ``response.created``, ``response.in_progress``, per item
``response.output_item.added`` / ``...done`` with the item's own events between
(reasoning summary parts and ``response.reasoning_summary_text.delta``, a content part
and ``response.output_text.delta``, ``response.function_call_arguments.delta`` /
``.done``; a ``HostedItem``'s: ``response.web_search_call.in_progress`` / ``searching`` /
``completed`` for a web search, ``response.custom_tool_call_input.delta`` / ``.done``
for a custom tool's call, none for the others; each of those events checked against
the official ``openai`` SDK's event types), then ``response.completed`` (or
``response.incomplete``) with the usage. A reply's ``hold`` stops the stream before one
of its items until the test lets it go on.
Every event carries its ``sequence_number``; the SSE ``event:`` line names its type.

Reasoning items carry ``encrypted_content`` when the request asked for it
(``include: ["reasoning.encrypted_content"]``): an opaque token only this server
verifies. The ``openai_reasoning`` strict mode (``ResponsesProduced.refusal``) answers
as OpenAI does when a client drops or alters that reasoning:

- a function call of the current turn (after the last user message) sent back without
  the reasoning item that preceded it: HTTP 400, ``Item 'fc_…' of type 'function_call'
  was provided without its required 'reasoning' item: 'rs_…'.`` (``param: "input"``);
- a reasoning item whose ``encrypted_content`` differs from the one sent, anywhere in
  the input: HTTP 400 ``invalid_encrypted_content``, ``The encrypted content gAAA...xx==
  could not be verified.``;
- a reasoning item without ``encrypted_content`` in a ``store: false`` request: HTTP 404,
  ``Item with id 'rs_…' not found. Items are not persisted when `store` is set to
  false. …``;
- a reasoning item that is the last input item or is followed by a user message or a
  tool result: HTTP 400, ``Item 'rs_…' of type 'reasoning' was provided without its
  required following item.``

The wording of each is OpenAI's as quoted in public bug reports of clients that hit them
(its documentation does not list them); which turn the missing-reasoning check covers is
not documented: this server checks the current turn, where a dropped item certainly
breaks the call.

Internal: the public names are re-exported by ``nonoka.testing.server``.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nonoka.state.messages import ToolCall
from nonoka.testing.replies import pieces
from nonoka.testing.steps import (
    HostedItem,
    HttpError,
    ReasoningItem,
    ResponseFailed,
    ResponsesReply,
)

RESPONSES_STRICT_MODES = ("openai_reasoning",)
"""The strict modes a ``ScriptedResponsesServer`` can enforce."""

ENCRYPTED = "reasoning.encrypted_content"


@dataclass(frozen=True)
class Prepared:
    """A response ready to be sent: its id, the output items with the server's ids and
    encrypted reasoning, the answer they came from."""

    id: str
    items: tuple[dict[str, Any], ...]
    reply: ResponsesReply


def response_id(number: int, token: str) -> str:
    return f"resp_{token}{number:06x}"


def prepare(reply: ResponsesReply, number: int, token: str) -> Prepared:
    """The output items of ``reply`` with ids (and the encrypted content of its
    reasoning: sent only when the request asks for it)."""
    base = f"{token}{number:06x}"
    items: list[dict[str, Any]] = []
    for index, output in enumerate(reply.output):
        if isinstance(output, ReasoningItem):
            rs = f"rs_{base}{index:02x}"
            items.append({"id": rs, "type": "reasoning",
                          "summary": [{"type": "summary_text", "text": text}
                                      for text in output.summary],
                          "encrypted_content": encrypt(rs, token, output.summary)})
        elif isinstance(output, HostedItem):
            items.append(dict(output.item))
        elif isinstance(output, ToolCall):
            items.append({"id": f"fc_{base}{index:02x}", "type": "function_call",
                          "status": "completed", "arguments": output.arguments,
                          "call_id": output.id, "name": output.name})
        else:
            items.append({"id": f"msg_{base}{index:02x}", "type": "message",
                          "status": "completed",
                          "content": [{"type": "output_text", "annotations": [],
                                       "logprobs": [], "text": output}],
                          "role": "assistant"})
    return Prepared(response_id(number, token), tuple(items), reply)


def encrypt(rs: str, token: str, summary: Sequence[str]) -> str:
    """An opaque token in the shape OpenAI's has (``gAAAAAB…``), bound to the item and
    to this server."""
    raw = f"{rs}|{token}|{len(summary)}|{sum(map(len, summary))}".encode()
    return "gAAAAAB" + base64.urlsafe_b64encode(raw * 3).decode()


def _visible(item: dict[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """The item as this request gets it: encrypted reasoning only when asked for."""
    if item["type"] != "reasoning" or ENCRYPTED in (request.get("include") or ()):
        return item
    return {k: v for k, v in item.items() if k != "encrypted_content"}


def response_object(prepared_id: str, model: str, request: Mapping[str, Any], *,
                    status: str, output: Sequence[dict[str, Any]] = (),
                    usage: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
                    incomplete: str | None = None) -> dict[str, Any]:
    """The ``response`` object, echoing the request's settings as the API does."""
    reasoning = request.get("reasoning") or {}
    return {
        "id": prepared_id, "object": "response", "created_at": int(time.time()),
        "status": status, "background": False, "error": error,
        "incomplete_details": None if incomplete is None else {"reason": incomplete},
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"), "max_tool_calls": None,
        "model": model, "output": list(output),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "service_tier": "default", "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": list(request.get("tools") or ()), "top_logprobs": 0,
        "top_p": request.get("top_p", 1.0), "truncation": "disabled", "usage": usage,
        "user": None, "metadata": {},
    }


def usage_object(reply: ResponsesReply) -> dict[str, Any]:
    return {"input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens,
                                     "cache_write_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": reply.input_tokens + reply.output_tokens,
            **(reply.raw_usage or {})}


def final_response(prepared: Prepared, model: str,
                   request: Mapping[str, Any]) -> dict[str, Any]:
    """The whole response (what a request without ``stream`` gets, and what
    ``response.completed`` carries)."""
    reply = prepared.reply
    return response_object(prepared.id, model, request,
                           status="incomplete" if reply.incomplete else "completed",
                           output=[_visible(i, request) for i in prepared.items],
                           usage=usage_object(reply), incomplete=reply.incomplete)


class _Sequence:
    def __init__(self) -> None:
        self._next = itertools.count()

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(self._next), **fields}


def response_events(prepared: Prepared, model: str, request: Mapping[str, Any],
                    size: int, flush: Callable[[], None] = lambda: None
                    ) -> Iterator[dict[str, Any]]:
    """The events of a streamed response, in the order the API sends them; ``flush``
    sends those given so far, before the reply's ``hold``."""
    seq = _Sequence()
    started = response_object(prepared.id, model, request, status="in_progress")
    yield seq.event("response.created", response=started)
    yield seq.event("response.in_progress", response=started)
    hold = prepared.reply.hold
    for index, item in enumerate(prepared.items):
        if hold is not None and hold[0] == index:
            flush()
            hold[1].wait(60)
        yield from _item_events(seq, index, _visible(item, request), size)
    final = final_response(prepared, model, request)
    kind = "response.incomplete" if prepared.reply.incomplete else "response.completed"
    yield seq.event(kind, response=final)


def _item_events(seq: _Sequence, index: int, item: dict[str, Any],
                 size: int) -> Iterator[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "reasoning":
        yield seq.event("response.output_item.added", output_index=index,
                        item={"id": item["id"], "type": "reasoning", "summary": []})
        for number, part in enumerate(item["summary"]):
            text = part["text"]
            yield seq.event("response.reasoning_summary_part.added", **where,
                            summary_index=number, part={"type": "summary_text", "text": ""})
            for piece in pieces(text, size):
                yield seq.event("response.reasoning_summary_text.delta", **where,
                                summary_index=number, delta=piece)
            yield seq.event("response.reasoning_summary_text.done", **where,
                            summary_index=number, text=text)
            yield seq.event("response.reasoning_summary_part.done", **where,
                            summary_index=number, part={"type": "summary_text", "text": text})
    elif item["type"] == "message":
        text = item["content"][0]["text"]
        yield seq.event("response.output_item.added", output_index=index, item={
            "id": item["id"], "type": "message", "status": "in_progress", "content": [],
            "role": "assistant"})
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        yield seq.event("response.content_part.added", **where, content_index=0, part=part)
        for piece in pieces(text, size):
            yield seq.event("response.output_text.delta", **where, content_index=0,
                            delta=piece, logprobs=[])
        yield seq.event("response.output_text.done", **where, content_index=0, text=text,
                        logprobs=[])
        yield seq.event("response.content_part.done", **where, content_index=0,
                        part={**part, "text": text})
    elif item["type"] == "web_search_call":
        yield _checked(seq.event("response.output_item.added", output_index=index,
                                 item={**item, "status": "in_progress"}))
        for stage in ("in_progress", "searching", "completed"):
            yield _checked(seq.event(f"response.web_search_call.{stage}", **where))
    elif item["type"] == "custom_tool_call":
        text = item["input"]
        yield _checked(seq.event("response.output_item.added", output_index=index,
                                 item={**item, "input": ""}))
        for piece in pieces(text, max(1, len(text) // 3)):
            yield _checked(seq.event("response.custom_tool_call_input.delta", **where,
                                     delta=piece))
        yield _checked(seq.event("response.custom_tool_call_input.done", **where, input=text))
    elif item["type"] != "function_call":
        yield _checked(seq.event("response.output_item.added", output_index=index, item=item))
    else:
        arguments = item["arguments"]
        yield seq.event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})
        for piece in pieces(arguments, max(1, len(arguments) // 3)):
            yield seq.event("response.function_call_arguments.delta", **where, delta=piece)
        yield seq.event("response.function_call_arguments.done", **where,
                        arguments=arguments)
    yield seq.event("response.output_item.done", output_index=index, item=item)


def _checked(event: dict[str, Any]) -> dict[str, Any]:
    """``event``, held to the ``openai`` SDK's stream event types."""
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    TypeAdapter(ResponseStreamEvent).validate_python(event)
    return event


def failed_events(failure: ResponseFailed, prepared_id: str, model: str,
                  request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """A response that starts and then fails."""
    seq = _Sequence()
    started = response_object(prepared_id, model, request, status="in_progress")
    yield seq.event("response.created", response=started)
    yield seq.event("response.in_progress", response=started)
    if failure.as_error_event:
        yield seq.event("error", code=failure.code, message=failure.message, param=None)
        return
    error = {"code": failure.code, "message": failure.message}
    yield seq.event("response.failed", response=response_object(
        prepared_id, model, request, status="failed", error=error))


def partial_events(text: str, prepared_id: str, model: str, request: Mapping[str, Any],
                   size: int) -> Iterator[dict[str, Any]]:
    """The start of a response whose connection drops after ``text``."""
    seq = _Sequence()
    started = response_object(prepared_id, model, request, status="in_progress")
    yield seq.event("response.created", response=started)
    item_id = f"msg_{prepared_id.removeprefix('resp_')}00"
    yield seq.event("response.output_item.added", output_index=0, item={
        "id": item_id, "type": "message", "status": "in_progress", "content": [],
        "role": "assistant"})
    for piece in pieces(text, size):
        yield seq.event("response.output_text.delta", item_id=item_id, output_index=0,
                        content_index=0, delta=piece, logprobs=[])


# strict mode ---------------------------------------------------------------------------------


def invalid_request(status: int, message: str, *, param: str | None = "input",
                    code: str | None = None) -> HttpError:
    return HttpError(status, {"error": {"message": message, "type": "invalid_request_error",
                                        "param": param, "code": code}})


def reasoning_missing(fc: str, rs: str) -> HttpError:
    return invalid_request(400, f"Item '{fc}' of type 'function_call' was provided without "
                                f"its required 'reasoning' item: '{rs}'.")


def encrypted_content_invalid(sent: str) -> HttpError:
    shown = f"{sent[:4]}...{sent[-4:]}" if len(sent) > 8 else sent
    return invalid_request(400, f"The encrypted content {shown} could not be verified.",
                           param=None, code="invalid_encrypted_content")


def item_not_persisted(rs: str) -> HttpError:
    return invalid_request(404, f"Item with id '{rs}' not found. Items are not persisted when "
                                "`store` is set to false. Try again with `store` set to "
                                "true, or remove this item from your input.")


def following_item_missing(rs: str) -> HttpError:
    return invalid_request(400, f"Item '{rs}' of type 'reasoning' was provided without its "
                                "required following item.")


REQUEST_FIELDS = frozenset({
    "model", "input", "stream", "tools", "background", "context_management", "conversation",
    "include", "instructions", "max_output_tokens", "max_tool_calls", "metadata",
    "parallel_tool_calls", "previous_response_id", "prompt", "prompt_cache_key",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
    "stream_options", "temperature", "text", "tool_choice", "top_logprobs", "top_p",
    "truncation", "user"})
"""The request fields the Responses API takes (the ``openai`` SDK's
``ResponseCreateParams``): it refuses any other."""


def unknown_parameter(body: Mapping[str, Any]) -> HttpError | None:
    """OpenAI's 400 for a request field the API does not have, as it always answers."""
    for name in body:
        if name not in REQUEST_FIELDS:
            return invalid_request(400, f"Unknown parameter: '{name}'.", param=name,
                                   code="unknown_parameter")
    return None


class ResponsesProduced:
    """The reasoning this server produced, and which function call each preceded.

    Owned by one server; the server calls it under its lock.
    """

    def __init__(self) -> None:
        self.encrypted: dict[str, str] = {}
        self.preceded: dict[str, tuple[str, str]] = {}
        """A call id: the id of the reasoning item before it, and its own item id."""

    def note(self, prepared: Prepared) -> None:
        reasoning: str | None = None
        for item in prepared.items:
            if item["type"] == "reasoning":
                reasoning = item["id"]
                self.encrypted[item["id"]] = item["encrypted_content"]
            elif item["type"] == "function_call" and reasoning is not None:
                self.preceded[item["call_id"]] = (reasoning, item["id"])

    def refusal(self, body: Mapping[str, Any], modes: frozenset[str]) -> HttpError | None:
        """The error OpenAI answers ``body`` with, or ``None`` when it is fine."""
        raw = body.get("input")
        if "openai_reasoning" not in modes or not isinstance(raw, list):
            return None
        items = [i for i in raw if isinstance(i, dict)]
        last_user = max((n for n, i in enumerate(items) if _is_user(i)), default=-1)
        present: set[str] = set()
        for number, item in enumerate(items):
            kind = item.get("type")
            if kind == "reasoning" and item.get("id") in self.encrypted:
                refused = self._reasoning(item, items[number + 1:], body)
                if refused is not None:
                    return refused
                present.add(str(item["id"]))
            elif kind == "function_call" and number > last_user:
                expected = self.preceded.get(str(item.get("call_id")))
                if expected is not None and expected[0] not in present:
                    return reasoning_missing(str(item.get("id") or expected[1]), expected[0])
        return None

    def _reasoning(self, item: dict[str, Any], rest: list[dict[str, Any]],
                   body: Mapping[str, Any]) -> HttpError | None:
        rs = str(item["id"])
        sent = item.get("encrypted_content")
        if sent is None:
            return item_not_persisted(rs) if body.get("store") is False else None
        if sent != self.encrypted[rs]:
            return encrypted_content_invalid(str(sent))
        if not rest or _is_user(rest[0]) or rest[0].get("type") == "function_call_output":
            return following_item_missing(rs)
        return None


def _is_user(item: Mapping[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"
