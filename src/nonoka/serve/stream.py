"""A response's turn as the Responses API streams it, every event numbered.

The order is OpenAI's: ``response.created`` and ``response.in_progress``; for each
output item ``response.output_item.added``, its part's ``added``, the deltas, the
``done`` events innermost first, ``response.output_item.done``; then one of
``response.completed``, ``response.incomplete`` or ``response.failed`` with the whole
response. Text and reasoning stream as the model sends them; the items of the hosted
tools the upstream ran (a web search's with its ``response.web_search_call.*``
events) and the answer's function and custom tools' calls (whole when the answer is)
follow it. The items each ``done`` event carries are
built by the same function as the stored response's (``nonoka.serve.items``), from the
answer the turn stored, so a stream ends with exactly what ``GET`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nonoka.serve.items import (
    assistant_items,
    call_item,
    call_output_item,
    message_item,
    output_text,
    reasoning_item,
    summary_text,
)
from nonoka.serve.model import Answering
from nonoka.serve.reasoning import sealed
from nonoka.state.messages import ToolCall

Emit = Callable[[dict[str, Any]], None]


class ResponseEvents:
    """Turns one response's turn into numbered events, handed to ``emit``."""

    def __init__(self, emit: Emit, run: Answering) -> None:
        self._emit = emit
        self.run = run
        self.sequence = 0
        self.outputs = 0
        """Output items announced so far."""
        self._open: dict[str, tuple[int, str, list[str]]] = {}
        """The items of the answer being streamed, by kind (``message``, ``reasoning``):
        output index, id, text so far."""
        self._next_entry = 0
        """The entry a result nonoka stores after the last answer will be."""

    def event(self, kind: str, **fields: Any) -> None:
        self._emit({"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1

    def started(self, response: dict[str, Any]) -> None:
        self.event("response.created", response=response)
        self.event("response.in_progress", response=response)

    def text(self, delta: str) -> None:
        index, item_id, text = self._item("message")
        text.append(delta)
        self.event("response.output_text.delta", item_id=item_id, output_index=index,
                   content_index=0, delta=delta, logprobs=[])

    def reasoning(self, delta: str) -> None:
        if "message" in self._open:
            return  # reasoning after the answer's text is stored, not streamed
        index, item_id, text = self._item("reasoning")
        text.append(delta)
        self.event("response.reasoning_summary_text.delta", item_id=item_id,
                   output_index=index, summary_index=0, delta=delta)

    def _item(self, kind: str) -> tuple[int, str, list[str]]:
        """The answer's item of ``kind``, announced on its first delta."""
        found = self._open.get(kind)
        if found is not None:
            return found
        run = self.run
        assert run.point is not None
        index = self.outputs
        self.outputs += 1
        if kind == "message":
            item_id = run.point.item_id("msg_", run.offset, 1)
            self.event("response.output_item.added", output_index=index,
                       item=message_item(item_id, None, "in_progress"))
            self.event("response.content_part.added", item_id=item_id, output_index=index,
                       content_index=0, part=output_text(""))
        else:
            item_id = run.point.item_id("rs_", run.offset, 0)
            self.event("response.output_item.added", output_index=index,
                       item=reasoning_item(item_id, None))
            self.event("response.reasoning_summary_part.added", item_id=item_id,
                       output_index=index, summary_index=0, part=summary_text(""))
        self._open[kind] = found = (index, item_id, [])
        return found

    def answered(self) -> None:
        """The answer is stored: its items are done (those no delta announced are
        announced now: function calls, an empty message)."""
        run = self.run
        assert run.point is not None
        answer = run.answers[-1]
        reasoning = "".join(part.text for part in answer.reasoning)
        seal = sealed(answer.reasoning) if run.sealed_reasoning and answer.reasoning else None
        for item in assistant_items(answer.text, answer.tool_calls, reasoning, run.point,
                                    run.offset, sealed=seal,
                                    provider=answer.provider_metadata):
            kind = item["type"]
            opened = self._open.pop(kind, None)
            if kind == "function_call":
                self._call(item)
            elif kind not in ("message", "reasoning"):
                self._other(item)
            elif opened is None:
                self._whole(item)
            else:
                self._done(item, opened[0])
        for kind, (index, item_id, text) in self._open.items():  # streamed, then not kept
            whole = "".join(text)
            self._done(message_item(item_id, whole) if kind == "message"
                       else reasoning_item(item_id, whole), index)
        self._open.clear()
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
