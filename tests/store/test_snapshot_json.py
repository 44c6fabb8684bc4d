"""The snapshot row's text: the state without its entries, its trace events' JSON kept."""

from __future__ import annotations

import json

from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import TraceEvent
from nonoka.store.base import SNAPSHOT_EXCLUDE, decode_state, snapshot_json
from nonoka.store.reuse import DecodedSnapshots, SnapshotTexts


def test_the_snapshot_is_the_state_as_pydantic_writes_it_as_the_trace_slides() -> None:
    texts = SnapshotTexts()  # what one store keeps between its saves
    session = Session("snap")
    session.memory.append(MemoryEntry.make("user", "hi \u2028 \"quoted\" 数据"))
    for n in range(120):  # past the kept window: old events leave, new ones come
        session.trace.append(TraceEvent(kind="step", detail=f"event {n} \n ö", at=n + 0.5))
        state = session.to_state()
        text = snapshot_json(state, texts)
        assert json.loads(text) == json.loads(state.model_dump_json(exclude=SNAPSHOT_EXCLUDE))
        decoded = decode_state("snap", text, [], state.revision, state.memory_entries)
        assert decoded.trace == state.trace
    empty = Session("empty").to_state()
    assert json.loads(snapshot_json(empty, texts))["trace"] == []


def test_a_trace_event_is_known_by_all_its_fields() -> None:
    """Kept texts are found by the event's field values: a field added to ``TraceEvent``
    must join that key."""
    assert set(TraceEvent.model_fields) == {"kind", "detail", "at"}


def _expected(state: object) -> object:
    from nonoka.state.session_state import SessionState

    assert isinstance(state, SessionState)
    return json.loads(state.model_dump_json(exclude=SNAPSHOT_EXCLUDE))


def test_the_trace_text_follows_a_sliding_full_window_and_any_other_change() -> None:
    """The kept trace text is reused only for the same events: a window that slides by
    a few events, by more than are looked for, or a trace replaced by other events (or
    by equal copies, as a loaded session has) all give the state's own JSON."""
    from nonoka.state.session_state import TRACE_LIMIT

    texts = SnapshotTexts()  # what one store keeps between its saves
    session = Session("slide")
    for n in range(TRACE_LIMIT + 150):
        session.add_trace("step", f"event {n}")
        if n % 3 == 0 or n > TRACE_LIMIT + 100:
            state = session.to_state()
            assert json.loads(snapshot_json(state, texts)) == _expected(state)
    for n in range(100):  # more new events at once than the end is searched for
        session.add_trace("burst", f"burst {n}")
    state = session.to_state()
    assert json.loads(snapshot_json(state, texts)) == _expected(state)
    session.trace[5] = TraceEvent(kind="edited", detail="in the middle")
    state = session.to_state()
    assert json.loads(snapshot_json(state, texts)) == _expected(state)
    session.trace = [e.model_copy() for e in session.trace]
    state = session.to_state()
    assert json.loads(snapshot_json(state, texts)) == _expected(state)
    session.trace = []
    assert json.loads(snapshot_json(session.to_state(), texts))["trace"] == []


def test_the_plan_text_is_the_current_plans() -> None:
    """A plan's JSON is kept with the plan object: a new plan (a new object, even one
    equal to an old one) is written as it is, and no plan is ``null``."""
    from nonoka.state.plan import Plan, Step

    texts = SnapshotTexts()  # what one store keeps between its saves
    session = Session("plan")
    for n in range(3):
        session.current_plan = Plan(steps=[Step(id=f"s{i}", tool="run", args={"n": n})
                                           for i in range(n + 1)])
        for _ in range(2):
            state = session.to_state()
            assert json.loads(snapshot_json(state, texts)) == _expected(state)
    session.current_plan = None
    assert json.loads(snapshot_json(session.to_state(), texts))["current_plan"] is None


def test_a_snapshot_row_read_again_gives_the_same_state_with_the_entries_given() -> None:
    """A session read several times a turn decodes its snapshot row once; a changed row
    or revision is decoded afresh, and a state holding values a reader could change in
    place (extension state) is never handed out twice. Without the store's
    ``DecodedSnapshots`` every read decodes the row."""
    kept = DecodedSnapshots()
    session = Session("again")
    session.trace.append(TraceEvent(kind="step", detail="one", at=1.0))
    text = snapshot_json(session.to_state())
    first = [MemoryEntry.make("user", "a")]
    second = [*first, MemoryEntry.make("assistant", "b")]
    one = decode_state("again", text, [], 3, first, kept)
    two = decode_state("again", text, [], 3, second, kept)
    assert list(one.memory_entries) == first and list(two.memory_entries) == second
    assert two.trace is one.trace  # the row was not decoded again
    assert decode_state("again", text, [], 3, second).trace is not one.trace  # nothing kept
    assert decode_state("again", text, [], 4, second, kept).trace is not one.trace
    session.trace.append(TraceEvent(kind="step", detail="two", at=2.0))
    changed = decode_state("again", snapshot_json(session.to_state()), [], 3, second, kept)
    assert [e.detail for e in changed.trace] == ["one", "two"]

    session.extension_state["ext"] = {"items": [1]}
    text = snapshot_json(session.to_state())
    mine = decode_state("again", text, [], 5, first, kept)
    mine.extension_state["ext"]["items"].append(2)
    again = decode_state("again", text, [], 5, first, kept)
    assert again.extension_state == {"ext": {"items": [1]}}


def test_the_running_time_is_stored_to_the_millisecond() -> None:
    """A float's full digits change length from one save to the next about every other
    save, which moves the rest of the snapshot (bench/README.md, ``store_size.py``); to
    the millisecond, about half as often (92 against 179 changes here), and it reads
    back as written."""
    import itertools
    import random

    from nonoka.state.ledger import RuntimeUsage

    rng = random.Random(3)
    seconds, lengths, full = 0.0, [], []
    base = Session("clock").to_state()
    for _ in range(400):  # saves of a running session: a few ms to a few s apart
        seconds += rng.uniform(0.002, 3.0)
        runtime = base.runtime_state.model_copy(
            update={"usage": RuntimeUsage(wall_seconds=seconds)})
        text = snapshot_json(base.model_copy(update={"runtime_state": runtime}))
        assert json.loads(text)["runtime_state"]["usage"]["wall_seconds"] == round(seconds, 3)
        lengths.append(len(text))
        full.append(len(repr(seconds)))
    changes = sum(a != b for a, b in itertools.pairwise(lengths))
    full_changes = sum(a != b for a, b in itertools.pairwise(full))
    assert changes < full_changes * 0.6, (changes, full_changes)
