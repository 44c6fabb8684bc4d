"""A response's turn as the Responses API streams it, every event numbered.

The order is OpenAI's: ``response.created`` and ``response.in_progress``; for each
output item ``response.output_item.added``, its part's ``added``, the deltas, the
``done`` events innermost first, ``response.output_item.done``; then one of
``response.completed``, ``response.incomplete`` or ``response.failed`` with the whole
response. Text and reasoning stream as the model sends them, and the items of the
hosted tools the upstream ran (a web search's with its ``response.web_search_call.*``
events) as the upstream sends them, each at its place: a search streamed before the
message citing it comes before it, as in ``GET``. The answer's function and custom
tools' calls follow, whole when the answer is. The items each ``done`` event carries are
built by the same function as the stored response's (``nonoka.serve.items``), from the
answer the turn stored, so a stream ends with exactly what ``GET`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nonoka.llm.responses import SEPARATOR
from nonoka.serve.ids import ENTRY_REASONING
from nonoka.serve.items import (
    assistant_items,
    call_item,
    call_output_item,
    message_id,
    message_item,
    output_text,
    reasoning_item,
    summary_text,
)
from nonoka.serve.model import Answering
from nonoka.serve.reasoning import sealed
from nonoka.state.messages import ToolCall

Emit = Callable[[dict[str, Any]], None]


@dataclass
class _Slot:
    """An item of the answer being made, as streamed so far."""

    kind: str
    index: int
    item_id: str | None
    text: list[str] = field(default_factory=list)
    done: bool = False


class ResponseEvents:
    """Turns one response's turn into numbered events, handed to ``emit``; takes the
    upstream's hosted items' events (``run.on_item``) as they come."""

    def __init__(self, emit: Emit, run: Answering) -> None:
        self._emit = emit
        self.run = run
        run.on_item = self.hosted
        self.sequence = 0
        self.outputs = 0
        """Output items announced so far."""
        self._slots: list[_Slot] = []
        """The items of the answer being made, in the order they were announced."""
        self._open: dict[str, _Slot] = {}
        """Its message and reasoning while their text streams, by kind."""
        self._hosted: dict[int, _Slot] = {}
        """Its hosted tools' items, by the upstream's output index."""
        self._next_entry = 0
        """The entry a result nonoka stores after the last answer will be."""

    def event(self, kind: str, **fields: Any) -> None:
        self._emit({"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1

    def started(self, response: dict[str, Any]) -> None:
        self.event("response.created", response=response)
        self.event("response.in_progress", response=response)

    def text(self, delta: str) -> None:
        if "message" not in self._open and any(s.kind == "message" for s in self._slots):
            delta = delta.removeprefix(SEPARATOR)  # the adapter's, between two messages
            if not delta:
                return
        slot = self._item("message")
        slot.text.append(delta)
        self.event("response.output_text.delta", item_id=slot.item_id,
                   output_index=slot.index, content_index=0, delta=delta, logprobs=[])

    def reasoning(self, delta: str) -> None:
        if any(s.kind == "message" or (s.kind == "reasoning" and s.done)
               for s in self._slots):
            return  # reasoning after the answer's text, or a search, is stored, not streamed
        slot = self._item("reasoning")
        slot.text.append(delta)
        self.event("response.reasoning_summary_text.delta", item_id=slot.item_id,
                   output_index=slot.index, summary_index=0, delta=delta)

    def hosted(self, upstream: dict[str, Any]) -> None:
        """An event of a hosted tool's item as the upstream sent it, at the item's place
        in this response. Its item's announcement ends the message streaming before it
        (the upstream's next text is another message)."""
        at = upstream.get("output_index")
        if not isinstance(at, int) or self.run.point is None:
            return
        fields = {k: v for k, v in upstream.items()
                  if k not in ("type", "sequence_number", "output_index")}
        kind = str(upstream.get("type"))
        slot = self._hosted.get(at)
        if slot is None:
            if kind != "response.output_item.added":
                return
            self._close("reasoning")
            self._close("message")
            item = fields.get("item") or {}
            slot = _Slot(str(item.get("type")), self.outputs, item.get("id"))
            self.outputs += 1
            self._slots.append(slot)
            self._hosted[at] = slot
        elif slot.done:
            return
        self.event(kind, output_index=slot.index, **fields)
        slot.done = kind == "response.output_item.done"

    def _close(self, kind: str) -> None:
        """The open item of ``kind`` is done, with what it streamed: the next item has
        begun. Reasoning stays open when the client asked for its ``encrypted_content``,
        which the answer's end gives."""
        if kind == "reasoning" and self.run.sealed_reasoning:
            return
        slot = self._open.pop(kind, None)
        if slot is None:
            return
        text = "".join(slot.text)
        self._done(message_item(slot.item_id or "", text) if kind == "message"
                   else reasoning_item(slot.item_id or "", text), slot.index)
        slot.done = True

    def _item(self, kind: str) -> _Slot:
        """The answer's item of ``kind`` being streamed, announced on its first delta."""
        found = self._open.get(kind)
        if found is not None:
            return found
        run = self.run
        assert run.point is not None
        index = self.outputs
        self.outputs += 1
        if kind == "message":
            self._close("reasoning")
            number = sum(s.kind == "message" for s in self._slots)
            item_id = message_id(run.point, run.offset, number)
            self.event("response.output_item.added", output_index=index,
                       item=message_item(item_id, None, "in_progress"))
            self.event("response.content_part.added", item_id=item_id, output_index=index,
                       content_index=0, part=output_text(""))
        else:
            item_id = run.point.item_id("rs_", run.offset, ENTRY_REASONING)
            self.event("response.output_item.added", output_index=index,
                       item=reasoning_item(item_id, None))
            self.event("response.reasoning_summary_part.added", item_id=item_id,
                       output_index=index, summary_index=0, part=summary_text(""))
        found = _Slot(kind, index, item_id)
        self._open[kind] = found
        self._slots.append(found)
        return found

    def answered(self) -> None:
        """The answer is stored: its items are done (those not streamed are announced
        now: function calls, an empty message), at the places they were streamed at."""
        run = self.run
        assert run.point is not None
        answer = run.answers[-1]
        reasoning = "".join(part.text for part in answer.reasoning)
        seal = sealed(answer.reasoning) if run.sealed_reasoning and answer.reasoning else None
        streamed = list(self._slots)
        for item in assistant_items(answer.text, answer.tool_calls, reasoning, run.point,
                                    run.offset, sealed=seal,
                                    provider=answer.provider_metadata):
            kind = item["type"]
            slot = next((s for s in streamed if s.kind == kind and (
                s.item_id == item.get("id") or kind in ("message", "reasoning"))), None)
            if slot is not None:
                streamed.remove(slot)
                if not slot.done:
                    self._done(item, slot.index)
            elif kind == "function_call":
                self._call(item)
            elif kind not in ("message", "reasoning"):
                self._other(item)
            else:
                self._whole(item)
        for slot in streamed:  # streamed, then not kept
            if slot.done or slot.kind not in ("message", "reasoning"):
                continue
            whole = "".join(slot.text)
            self._done(message_item(slot.item_id or "", whole) if slot.kind == "message"
                       else reasoning_item(slot.item_id or "", whole), slot.index)
        self._slots.clear()
        self._open.clear()
        self._hosted.clear()
        self._next_entry = run.entry + 1

    def _done(self, item: dict[str, Any], index: int) -> None:
        item_id = item["id"]
        if item["type"] == "message":
            part = item["content"][0]
            self.event("response.output_text.done", item_id=item_id, output_index=index,
                       content_index=0, text=part["text"], logprobs=[])
            self.event("response.content_part.done", item_id=item_id, output_index=index,
                       content_index=0, part=part)
        else:
            part = item["summary"][0] if item["summary"] else summary_text("")
            self.event("response.reasoning_summary_text.done", item_id=item_id,
                       output_index=index, summary_index=0, text=part["text"])
            self.event("response.reasoning_summary_part.done", item_id=item_id,
                       output_index=index, summary_index=0, part=part)
        self.event("response.output_item.done", output_index=index, item=item)

    def _whole(self, item: dict[str, Any]) -> None:
        """An item no delta announced: added, its part, done."""
        index = self.outputs
        self.outputs += 1
        item_id = item["id"]
        if item["type"] == "message":
            self.event("response.output_item.added", output_index=index,
                       item=message_item(item_id, None, "in_progress"))
            self.event("response.content_part.added", item_id=item_id, output_index=index,
                       content_index=0, part=output_text(""))
            text = item["content"][0]["text"]
            if text:
                self.event("response.output_text.delta", item_id=item_id,
                           output_index=index, content_index=0, delta=text, logprobs=[])
        else:
            self.event("response.output_item.added", output_index=index,
                       item=reasoning_item(item_id, None))
            self.event("response.reasoning_summary_part.added", item_id=item_id,
                       output_index=index, summary_index=0, part=summary_text(""))
            text = item["summary"][0]["text"] if item["summary"] else ""
            if text:
                self.event("response.reasoning_summary_text.delta", item_id=item_id,
                           output_index=index, summary_index=0, delta=text)
        self._done(item, index)

    def _call(self, item: dict[str, Any]) -> None:
        index = self.outputs
        self.outputs += 1
        item_id = item["id"]
        call = ToolCall(id=item["call_id"], name=item["name"], arguments="")
        self.event("response.output_item.added", output_index=index,
                   item=call_item(item_id, call, "in_progress"))
        if item["arguments"]:
            self.event("response.function_call_arguments.delta", item_id=item_id,
                       output_index=index, delta=item["arguments"])
        self.event("response.function_call_arguments.done", item_id=item_id,
                   output_index=index, arguments=item["arguments"])
        self.event("response.output_item.done", output_index=index, item=item)

    def _other(self, item: dict[str, Any]) -> None:
        """A custom tool's call (its input as deltas) or a hosted tool's item, whole."""
        index = self.outputs
        self.outputs += 1
        where = {"item_id": item.get("id"), "output_index": index}
        if item["type"] == "custom_tool_call":
            self.event("response.output_item.added", output_index=index,
                       item={**item, "input": ""})
            if item["input"]:
                self.event("response.custom_tool_call_input.delta", **where,
                           delta=item["input"])
            self.event("response.custom_tool_call_input.done", **where, input=item["input"])
        elif item["type"] == "web_search_call":
            self.event("response.output_item.added", output_index=index,
                       item={**item, "status": "in_progress"})
            for stage in ("in_progress", "searching", "completed"):
                self.event(f"response.web_search_call.{stage}", **where)
        else:
            self.event("response.output_item.added", output_index=index, item=item)
        self.event("response.output_item.done", output_index=index, item=item)

    def tool_output(self, call: ToolCall, content: str) -> None:
        """A call nonoka answered itself after an answer (a tool the client did not
        offer): its output is part of the response's output."""
        run = self.run
        if run.point is None or not run.answers:
            return  # a result stored before the answer is part of the input
        offset = self._next_entry - run.point.start
        self._next_entry += 1
        item = call_output_item(run.point.item_id("fco_", offset, 0), call.id, content, None)
        index = self.outputs
        self.outputs += 1
        self.event("response.output_item.added", output_index=index, item=item)
        self.event("response.output_item.done", output_index=index, item=item)

    def replay(self, response: dict[str, Any], first: dict[str, Any]) -> None:
        """A stored response's events, as its stream gave them (a client's retry of a
        request whose response is stored): ``first`` is its ``in_progress`` form."""
        self.started(first)
        self.given(response)

    def given(self, response: dict[str, Any]) -> None:
        """``response``'s output items, each streamed whole, then its final event."""
        for item in response["output"]:
            if item["type"] == "function_call":
                self._call(item)
            elif item["type"] in ("message", "reasoning"):
                self._whole(item)
            else:
                self._other(item)
        self.finished(response)

    def finished(self, response: dict[str, Any]) -> None:
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"
                }.get(response["status"], "response.failed")
        self.event(kind, response=response)
