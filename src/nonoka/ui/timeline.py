"""A session's event log as the timeline and the per-turn usage the pages draw.

Durations are read off the log, which stamps every event when it is written: a model
call took the time since the event before it in its turn, a tool result the time since
its call, a ``finish`` the time since its request. A request that never finished before
the next one began is flagged: that is what a killed process leaves behind.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nonoka.ui.data import EventRecord

OK_FINISHES = ("stop", "tool_calls")


@dataclass
class Row:
    seq: int
    at: float
    kind: str
    label: str
    text: str
    tone: str = ""
    """``request``, ``model``, ``tool``, ``ok``, ``warn``, ``error``, ``recovery`` or ``muted``."""
    duration: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    detail: str = ""
    turn: int = 0


@dataclass
class Turn:
    number: int
    started: float
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    model_calls: int = 0
    finish: str = ""
    ended: float | None = None


@dataclass
class Timeline:
    rows: list[Row] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    @property
    def flagged(self) -> int:
        return sum(1 for r in self.rows if r.tone in ("warn", "error", "recovery"))


def build(events: Sequence[EventRecord]) -> Timeline:
    timeline = Timeline()
    calls: dict[str, float] = {}
    request_at: float | None = None
    previous: float | None = None
    for event in events:
        if event.kind == "request":
            if request_at is not None:
                timeline.rows.append(Row(event.seq, event.at, "interrupted", "interrupted",
                                         "the request above never finished: its process "
                                         "ended mid-turn", tone="error",
                                         turn=len(timeline.turns)))
            request_at = event.at
            timeline.turns.append(Turn(len(timeline.turns) + 1, event.at))
        elif not timeline.turns:  # a log written without requests (a library run)
            timeline.turns.append(Turn(1, event.at))
        row = _row(event, previous, request_at, calls)
        row.turn = len(timeline.turns)
        _count(timeline.turns[-1], event)
        if event.kind == "finish":
            request_at = None
        timeline.rows.append(row)
        previous = event.at
    return timeline


def _count(turn: Turn, event: EventRecord) -> None:
    data = event.data
    if event.kind == "model_call":
        turn.model_calls += 1
        turn.input_tokens += _int(data.get("input_tokens"))
        turn.output_tokens += _int(data.get("output_tokens"))
        turn.cost += _float(data.get("cost_usd"))
    elif event.kind == "finish":
        turn.finish = str(data.get("finish_reason", ""))
        turn.ended = event.at


def _row(event: EventRecord, previous: float | None, request_at: float | None,
         calls: dict[str, float]) -> Row:
    data, kind = event.data, event.kind
    row = Row(event.seq, event.at, kind, kind.replace("_", " "), "", tone="muted")
    if kind == "request":
        tools = ", ".join(str(t) for t in data.get("tools") or []) or "none"
        purpose = data.get("purpose", "chat")
        row.text = (f"{data.get('source', 'bridge')} · {purpose} · "
                    f"{data.get('messages', 0)} message(s) · tools: {tools}")
        row.tone = "request"
    elif kind == "session":
        if data.get("recovery_reason"):
            row.label, row.tone = "recovered", "recovery"
            row.text = f"session recovered ({data['recovery_reason']})"
        else:
            row.text = "new session" if data.get("new") else "continued the session"
    elif kind == "model_call":
        row.tone, row.label = "model", "model call"
        row.text = str(data.get("model", "?"))
        row.input_tokens = _int(data.get("input_tokens"))
        row.output_tokens = _int(data.get("output_tokens"))
        row.cost = _float(data.get("cost_usd"))
        row.duration = None if previous is None else event.at - previous
    elif kind == "tool_call":
        row.tone, row.label = "tool", "tool call"
        row.text = f"{data.get('tool_name', '?')} (run by {data.get('executed_by', '?')})"
        row.detail = str(data.get("arguments", ""))
        calls[str(data.get("tool_call_id"))] = event.at
    elif kind == "tool_result":
        failed = bool(data.get("is_error"))
        row.tone, row.label = ("error", "tool error") if failed else ("ok", "tool result")
        row.text = str(data.get("tool_name", "?"))
        row.detail = str(data.get("content", ""))
        started = calls.get(str(data.get("tool_call_id")))
        row.duration = None if started is None else event.at - started
    elif kind in ("warning", "error"):
        row.tone = "warn" if kind == "warning" else "error"
        row.text = f"{data.get('code', '?')}: {data.get('message', '')}"
    elif kind == "finish":
        reason = str(data.get("finish_reason", "?"))
        row.tone = "ok" if reason in OK_FINISHES else "error"
        row.text = reason
        row.input_tokens = _int(data.get("input_tokens"))
        row.output_tokens = _int(data.get("output_tokens"))
        row.cost = _float(data.get("cost_usd")) or None
        row.duration = None if request_at is None else event.at - request_at
    elif kind == "cancel":
        row.tone, row.label = "warn", "cancelled"
        row.text = f"{data.get('detail', '')} ({data.get('source', '?')})"
    elif kind == "replay":
        row.tone = "recovery"
        row.text = (f"answer stored by an ended process replayed ({data.get('entries', 0)} "
                    "entries)")
    else:
        row.label, row.text = _plain(kind, data, row.label)
    return row


def _plain(kind: str, data: dict[str, Any], label: str) -> tuple[str, str]:
    """The label and text of an event shown without numbers."""
    if kind == "partial_answer":  # its text shows whole (redacted whole, not piece by
        # piece) at the conversation's end when no stored answer follows
        return "streamed", f"{len(str(data.get('text', ''))):,} characters of the answer"
    if kind == "early_request":
        return "early request", str(data.get("outcome", "?"))
    return label, json.dumps(data, ensure_ascii=False)[:400]


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value,
                                                                            bool) else 0.0
