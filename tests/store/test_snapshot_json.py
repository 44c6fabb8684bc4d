"""The snapshot row's text: the state without its entries, its trace events' JSON kept."""

from __future__ import annotations

import json

from nonoka.messages import MemoryEntry
from nonoka.session import Session
from nonoka.state import TraceEvent
from nonoka.store.base import SNAPSHOT_EXCLUDE, decode_state, snapshot_json


def test_the_snapshot_is_the_state_as_pydantic_writes_it_as_the_trace_slides() -> None:
    session = Session("snap")
    session.memory.append(MemoryEntry.make("user", "hi \u2028 \"quoted\" 数据"))
    for n in range(120):  # past the kept window: old events leave, new ones come
        session.trace.append(TraceEvent(kind="step", detail=f"event {n} \n ö", at=n + 0.5))
        state = session.to_state()
        text = snapshot_json(state)
        assert json.loads(text) == json.loads(state.model_dump_json(exclude=SNAPSHOT_EXCLUDE))
        decoded = decode_state("snap", text, [], state.revision, state.memory_entries)
        assert decoded.trace == state.trace
    empty = Session("empty").to_state()
    assert json.loads(snapshot_json(empty))["trace"] == []


def test_a_trace_event_is_known_by_all_its_fields() -> None:
    """Kept texts are found by the event's field values: a field added to ``TraceEvent``
    must join that key."""
    assert set(TraceEvent.model_fields) == {"kind", "detail", "at"}
