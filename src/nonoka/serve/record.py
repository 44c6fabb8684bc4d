"""What a stored response is made of, and where it is: its record rides on its answer.

A response's answer is the assistant entry (entries, when the model was called more than
once) its turn stored. The model the turn runs (``nonoka.serve.model.StampedModel``)
adds to each answer, under its ``provider_metadata`` key ``nonoka_serve`` (which every
model adapter ignores: each reads its own key), the response's id and how the answer
ended; the first answer also carries what the response was asked with (``Asked``), so
``GET`` can echo it. Nothing else is written for a response: no table, no index row,
no second write. The tools a response was given are written once per line and referred
to while they stay the same (``{"at": entry}``), so a long chain of an agent's turns
does not store its tool definitions again every turn.

``locate`` finds a response in its session's entries from its id alone: its input
starts at the id's entry, its answers are the entries stamped with its id, and its
output runs from the first of them to the last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nonoka.serve.hosted import client_calls
from nonoka.serve.ids import ENTRY_MESSAGE, ResponsePoint
from nonoka.serve.included import with_image_urls
from nonoka.serve.items import entry_items, message_item
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import ToolCall
from nonoka.store.records import EventRecord
from nonoka.turn.partial import unfinished_answers

STAMP = "nonoka_serve"
"""The ``provider_metadata`` key of a response's stamp on its answers."""
DELETED = "serve_deleted"
"""The session index metadata key listing a session's responses taken out of the API."""

ECHOED = ("tool_choice", "temperature", "top_p", "max_output_tokens", "parallel_tool_calls",
          "text", "reasoning", "truncation", "metadata", "safety_identifier",
          "prompt_cache_key", "user", "service_tier", "top_logprobs", "presence_penalty",
          "frequency_penalty", "max_tool_calls", "background")
"""The request fields a response echoes, kept when the request set them."""


@dataclass(frozen=True)
class Asked:
    """What a response was asked with, as ``GET`` echoes it."""

    model: str
    created_at: int
    previous_response_id: str | None = None
    instructions: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    params: dict[str, Any] | None = None
    """The ``ECHOED`` fields the request set."""
    stored: bool = True
    """``store`` as the request gave it: a ``store: false`` exchange is kept in its
    session, but the response is not found by its id."""

    def stamp(self, tools_at: int | None) -> dict[str, Any]:
        """The record's form on the first answer; ``tools_at``: the entry whose record
        holds the same tools, when an earlier response of the line gave them."""
        record: dict[str, Any] = {"model": self.model, "created_at": self.created_at}
        if self.previous_response_id:
            record["previous_response_id"] = self.previous_response_id
        if self.instructions is not None:
            record["instructions"] = self.instructions
        if tools_at is not None:
            record["tools"] = {"at": tools_at}
        elif self.tools:
            record["tools"] = list(self.tools)
        if self.params:
            record["params"] = dict(self.params)
        if not self.stored:
            record["store"] = False
        return record

    def logged(self, tools_at: int | None) -> dict[str, Any]:
        """The record as the response's timeline entry keeps it: its tools by name only
        (a timeline is read by people; the definitions are in the answer's record)."""
        record = self.stamp(tools_at)
        if isinstance(record.get("tools"), list):
            record["tools"] = {"names": [str(tool.get("name") or tool.get("type"))
                                         for tool in self.tools]}
        return record

    @classmethod
    def from_stamp(cls, record: dict[str, Any], tools: Sequence[dict[str, Any]]) -> Asked:
        return cls(model=str(record.get("model", "")),
                   created_at=int(record.get("created_at", 0)),
                   previous_response_id=record.get("previous_response_id"),
                   instructions=record.get("instructions"), tools=tuple(tools),
                   params=dict(record.get("params") or {}),
                   stored=record.get("store") is not False)


def stamp_of(entry: MemoryEntry) -> dict[str, Any] | None:
    """The response stamp on an answer, if a served response wrote it."""
    if entry.role != "assistant":
        return None
    meta = entry.metadata.get("provider_metadata")
    found = meta.get(STAMP) if isinstance(meta, dict) else None
    return found if isinstance(found, dict) and isinstance(found.get("id"), str) else None


@dataclass(frozen=True)
class Left:
    """What the timeline says of a response that has no answer stored: its turn failed,
    or its process died mid-turn (or it is still running in another process)."""

    record: dict[str, Any]
    """The record its timeline entry (``response``) keeps, as an answer's would."""
    status: str
    """``failed``, ``incomplete`` (cut short: its process ended) or ``in_progress``."""
    text: str = ""
    """What its answer had streamed when it was cut short."""
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Located:
    """A stored response: its point, and the entries of its line that are its own."""

    point: ResponsePoint
    entries: Sequence[MemoryEntry]
    first: int
    """The first answer (``end`` when it has none)."""
    end: int
    """The entry after its last answer (after its input, when it has no answer): where a
    continuation starts."""
    left: Left | None = None
    """Set for a response without an answer."""

    @property
    def record(self) -> dict[str, Any]:
        if self.left is not None:
            return dict(self.left.record)
        stamp = stamp_of(self.entries[self.first])
        assert stamp is not None
        return dict(stamp.get("record") or {})

    @property
    def last(self) -> dict[str, Any]:
        """The last answer's stamp (``{}`` for a response without an answer)."""
        if self.left is not None:
            return {}
        stamp = stamp_of(self.entries[self.end - 1])
        assert stamp is not None
        return stamp

    def tools(self) -> list[dict[str, Any]]:
        """The tools the response was given (followed to the record that holds them)."""
        held = self.record.get("tools")
        if isinstance(held, dict) and isinstance(held.get("at"), int) and \
                0 <= held["at"] < len(self.entries):
            stamp = stamp_of(self.entries[held["at"]])
            held = ((stamp or {}).get("record") or {}).get("tools")
        elif isinstance(held, dict) and isinstance(held.get("names"), list):
            held = [{"type": "function", "name": str(name)} for name in held["names"]]
        return list(held) if isinstance(held, list) else []

    def tools_at(self) -> int | None:
        """The entry whose record holds this response's tools, if one does."""
        held = self.record.get("tools")
        if isinstance(held, dict) and isinstance(held.get("at"), int):
            return int(held["at"])
        stored = self.left is None and isinstance(held, list) and held
        return self.first if stored else None

    def pending(self) -> list[ToolCall]:
        """The calls the response ended with, which a continuation must answer."""
        last = self.entries[self.end - 1] if self.left is None else None
        return last.tool_calls if last is not None else []

    def asked(self) -> Asked:
        return Asked.from_stamp(self.record, self.tools())

    def input_items(self, image_urls: bool = False) -> list[dict[str, Any]]:
        """The response's input items (``image_urls``: an image sent by ``file_id``
        with its ``image_url`` too, as ``include`` asks)."""
        custom = self._client_calls(self.point.start, self.first)
        return [with_image_urls(item, self.entries[at]) if image_urls else item
                for at in range(self.point.start, self.first)
                for item in entry_items(self.entries[at], self.point, at - self.point.start,
                                        custom=custom)]

    def output(self, sealed_reasoning: bool = False) -> list[dict[str, Any]]:
        """The response's output items (``sealed_reasoning``: with the reasoning's
        ``encrypted_content``, as the request's ``include`` asked)."""
        if self.left is not None:
            if not self.left.text:
                return []
            item_id = self.point.item_id("msg_", self.end - self.point.start, ENTRY_MESSAGE)
            return [message_item(item_id, self.left.text, "incomplete")]
        custom = self._client_calls(self.first, self.end)
        return [item for at in range(self.first, self.end)
                for item in entry_items(self.entries[at], self.point, at - self.point.start,
                                        sealed_reasoning, custom)]

    def _client_calls(self, start: int, end: int) -> dict[str, str]:
        """``client_calls`` of the history before ``end``, which only the tool outputs
        among entries ``start`` to ``end`` look up: none, and the history is not read."""
        if all(entry.role != "tool" for entry in self.entries[start:end]):
            return {}
        return client_calls(self.entries[:end])

    def usage(self) -> dict[str, Any] | None:
        return None if self.left is not None else usage_of(self.entries[self.first:self.end])


def input_end(entries: Sequence[MemoryEntry], point: ResponsePoint) -> int:
    """Where the input of a response without an answer ends: where the next response on
    its line starts (a continuation of it), else the session's end."""
    from nonoka.serve.ids import parse_response_id

    for at in range(point.start, len(entries)):
        stamp = stamp_of(entries[at])
        if stamp is not None:
            other = parse_response_id(stamp["id"])
            return other.start if other is not None and other.start <= at else at
    return len(entries)


def locate(entries: Sequence[MemoryEntry], point: ResponsePoint) -> Located | None:
    """The answered response ``point`` names in a session's ``entries``, or ``None``.

    Its answers are stamped with its id; the scan stops at an answer stamped by another
    response (or the end), so it reads the response and the next one's input at most.
    """
    rid = point.id
    first = last = None
    for at in range(point.start, len(entries)):
        stamp = stamp_of(entries[at])
        if stamp is None:
            continue
        if stamp["id"] != rid:
            break
        if first is None:
            first = at
        last = at
    if first is None or last is None or not isinstance(
            (stamp_of(entries[first]) or {}).get("record"), dict):
        return None
    return Located(point, entries, first, last + 1)


def usage_of(entries: Sequence[MemoryEntry]) -> dict[str, Any]:
    """The Responses API's usage of the answers among ``entries`` (each keeps its call's)."""
    counts = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
              "reasoning_tokens": 0, "cache_write_tokens": 0}
    for entry in entries:
        spent = entry.metadata.get("usage") if entry.role == "assistant" else None
        if isinstance(spent, dict):
            for name in counts:
                value = spent.get(name)
                counts[name] += value if isinstance(value, int) else 0
    return usage_body(counts["input_tokens"], counts["output_tokens"],
                      counts["cache_read_tokens"], counts["reasoning_tokens"],
                      counts["cache_write_tokens"])


def usage_body(input_tokens: int, output_tokens: int, cached: int = 0,
               reasoning: int = 0, written: int = 0) -> dict[str, Any]:
    """The Responses API's usage object (``cache_write_tokens``: the input tokens
    written to the prompt cache, which the ``openai`` SDK's types require)."""
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": cached,
                                     "cache_write_tokens": written},
            "output_tokens_details": {"reasoning_tokens": reasoning}}


INCOMPLETE = {"length": "max_output_tokens", "max_tokens": "max_output_tokens",
              "content_filter": "content_filter"}
"""A model's finish reason that leaves its response incomplete, and the reason given."""


def resource(point_id: str, asked: Asked, *, status: str, output: list[dict[str, Any]],
             usage: dict[str, Any] | None, completed_at: int | None = None,
             incomplete: str | None = None, error: dict[str, Any] | None = None,
             store: bool = True) -> dict[str, Any]:
    """A response object, every field the Responses API gives."""
    params = asked.params or {}
    return {
        "id": point_id, "object": "response", "created_at": asked.created_at,
        "completed_at": completed_at, "status": status,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "model": asked.model, "previous_response_id": asked.previous_response_id,
        "instructions": asked.instructions, "output": output, "error": error,
        "tools": [_tool(t) for t in asked.tools],
        "tool_choice": params.get("tool_choice", "auto"),
        "truncation": params.get("truncation", "disabled"),
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "text": _text(params.get("text")),
        "top_p": params.get("top_p", 1.0),
        "presence_penalty": params.get("presence_penalty", 0.0),
        "frequency_penalty": params.get("frequency_penalty", 0.0),
        "top_logprobs": params.get("top_logprobs", 0),
        "temperature": params.get("temperature", 1.0),
        "reasoning": _reasoning(params.get("reasoning")), "usage": usage,
        "max_output_tokens": params.get("max_output_tokens"),
        "max_tool_calls": params.get("max_tool_calls"),
        "store": store, "background": params.get("background") is True,
        "service_tier": params.get("service_tier", "default"),
        "metadata": params.get("metadata") or {},
        "safety_identifier": params.get("safety_identifier"),
        "prompt_cache_key": params.get("prompt_cache_key"),
        "user": params.get("user"),
    }


def _text(given: Any) -> dict[str, Any]:
    """The response's ``text``: as asked, with its ``format`` (``{"type": "text"}`` when
    the request gave none, as the Responses API always gives one)."""
    text = dict(given) if isinstance(given, dict) else {}
    if not isinstance(text.get("format"), dict):
        text["format"] = {"type": "text"}
    return {"format": text.pop("format"), **text}


def _reasoning(given: Any) -> dict[str, Any] | None:
    """The request's ``reasoning`` with both of its fields (Codex sends only
    ``summary``; the object always has ``effort`` and ``summary``)."""
    if not isinstance(given, dict):
        return None
    return {"effort": given.get("effort"), "summary": given.get("summary"),
            **{k: v for k, v in given.items() if k not in ("effort", "summary")}}


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the response echoes it: a function tool with all its fields, any
    other (hosted, custom, namespace) as the request gave it."""
    if tool.get("type", "function") != "function":
        return dict(tool)
    return {"type": "function", "name": tool.get("name"),
            "description": tool.get("description"), "parameters": tool.get("parameters"),
            "strict": tool.get("strict")}


RESPONSE_EVENT = "response"
"""The timeline entry a response's turn opens with: its id and its record."""


def left_of(events: Sequence[EventRecord], response_id: str, live: bool) -> Left | None:
    """What a session's timeline (oldest first) says of ``response_id``, a response with
    no answer stored; ``None`` when the timeline never named it. ``live``: whether a
    process still holds the session (then it may still be running)."""
    at = next((n for n, e in enumerate(events) if e.kind == RESPONSE_EVENT
               and isinstance(e.data, dict) and e.data.get("id") == response_id), None)
    if at is None:
        return None
    record = events[at].data.get("record")
    turn: list[EventRecord] = []
    for event in events[at + 1:]:
        if event.kind in ("request", RESPONSE_EVENT):
            break
        turn.append(event)
    failed = next((e.data for e in turn if e.kind == "error" and isinstance(e.data, dict)),
                  None)
    streamed = unfinished_answers(turn)
    text = streamed[0][1].text if streamed else ""
    error = None
    if failed is not None:
        status = "failed"
        error = {"code": str(failed.get("code") or "server_error"),
                 "message": str(failed.get("message") or "the response failed")}
    elif any(e.kind == "finish" and isinstance(e.data, dict)
             and e.data.get("finish_reason") == "cancelled" for e in turn):
        status = "cancelled"
    elif live and not any(e.kind == "finish" for e in turn):
        status = "in_progress"
    else:
        status = "incomplete"
    return Left(record if isinstance(record, dict) else {}, status, text, error)
