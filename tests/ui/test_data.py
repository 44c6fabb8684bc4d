"""The ui's one reader of nonoka's data, on a real SQLite file and the real PostgreSQL."""

from __future__ import annotations

import base64
import json
import random
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nonoka.state.entries import MemoryEntry
from nonoka.state.plan import Plan, Step
from nonoka.state.session_state import SessionState, SessionStatus, StepResult, StepStatus
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.ui.data import NotAvailableError, SessionQuery, UiData
from tests.pg import schema_url, temp_schema


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        with temp_schema() as schema:
            yield schema_url(schema)


@pytest.fixture
async def data(database: str | None, tmp_path: Path) -> AsyncIterator[UiData]:
    async with open_project_stores(tmp_path, database) as stores:
        yield UiData(stores)


async def add(stores: ProjectStores, title: str, *, status: str = "completed",
              entries: int = 0, last_active: float, tokens: int = 0,
              metadata: dict[str, object] | None = None, plan: bool = False) -> str:
    sid = str(uuid.uuid4())
    memory = [MemoryEntry.make("user" if i % 2 == 0 else "assistant", f"{title} entry {i}")
              for i in range(entries)]
    state = SessionState(session_id=sid, status=SessionStatus(status), memory_entries=memory)
    if plan:
        state = state.model_copy(update={
            "current_plan": Plan(steps=[Step(id="a", tool="t"), Step(id="b", prompt="{{a}}")]),
            "step_statuses": {"a": StepStatus.COMPLETED}})
    await stores.checkpoints.save_session(state)
    if plan:
        await stores.checkpoints.save_step_result(sid, "a", StepResult(output={"n": 1}))
    await stores.index.upsert_session(SessionRecord(
        session_id=sid, title=title, model="openai:m", status=status, last_active=last_active,
        created_at=last_active - 10, input_tokens=tokens, message_count=entries,
        metadata={"purpose": "chat", **(metadata or {})}))
    return sid


async def test_listing_filters_searches_sorts_and_pages(data: UiData) -> None:
    stores = data.stores
    now = time.time()
    ids = [await add(stores, f"chat {i}", last_active=now - i, tokens=i * 10,
                     status="failed" if i % 3 == 0 else "completed") for i in range(7)]
    title = await add(stores, "a title request", last_active=now + 5,
                      metadata={"purpose": "title"})
    deep = await add(stores, "quiet one", entries=3, last_active=now - 100)
    page = await data.list_sessions(SessionQuery(limit=3))
    assert [r.session_id for r in page.rows] == ids[:3] and page.total == 8
    assert page.prev_cursor is None and page.next_cursor
    seen = list(page.rows)
    while page.next_cursor:
        page = await data.list_sessions(SessionQuery(limit=3, after=page.next_cursor))
        seen += page.rows
    assert [r.session_id for r in seen] == [*ids, deep]
    back = await data.list_sessions(SessionQuery(limit=3, before=page.prev_cursor))
    assert [r.session_id for r in back.rows] == ids[3:6] and back.next_cursor

    everything = await data.list_sessions(SessionQuery(everything=True, limit=1))
    assert everything.rows[0].session_id == title and everything.total == 9
    failed = await data.list_sessions(SessionQuery(status="failed"))
    assert {r.session_id for r in failed.rows} == {ids[0], ids[3], ids[6]}
    by_tokens = await data.list_sessions(SessionQuery(sort="tokens", limit=2))
    assert [r.session_id for r in by_tokens.rows] == [ids[6], ids[5]]
    by_tokens = await data.list_sessions(SessionQuery(sort="tokens", limit=2,
                                                      after=by_tokens.next_cursor))
    assert [r.session_id for r in by_tokens.rows] == [ids[4], ids[3]]
    window = await data.list_sessions(SessionQuery(since=now - 2.5, until=now - 0.5))
    assert [r.session_id for r in window.rows] == [ids[1], ids[2]]
    # Search: titles, id prefixes and the conversation's text; LIKE wildcards are literal.
    assert [r.session_id for r in (await data.list_sessions(
        SessionQuery(text="QUIET"))).rows] == [deep]
    assert [r.session_id for r in (await data.list_sessions(
        SessionQuery(text="one entry 2"))).rows] == [deep]
    assert [r.session_id for r in (await data.list_sessions(
        SessionQuery(text=ids[4][:8]))).rows] == [ids[4]]
    assert (await data.list_sessions(SessionQuery(text="chat_%"))).rows == []
    assert (await data.list_sessions(SessionQuery(after="not a cursor"))).total == 8


async def test_paging_past_a_session_that_stayed_on_top(data: UiData) -> None:
    """The most recent session keeps its place in the list between its turns (its
    ``list_order`` stays older than its ``last_active``): a page that ends on it goes on
    with the next session, not with it again."""
    stores = data.stores
    now = time.time()
    older = [await add(stores, f"older {i}", last_active=now - 100 - i) for i in range(2)]
    top = await add(stores, "busy", last_active=now - 50)
    for n in (40, 30, 0):  # its next turns
        record = await stores.index.get_session(top)
        assert record is not None
        await stores.index.upsert_session(record.model_copy(update={"last_active": now - n}))
    seen: list[str] = []
    page = await data.list_sessions(SessionQuery(limit=1))
    seen += [r.session_id for r in page.rows]
    while page.next_cursor and len(seen) < 10:
        page = await data.list_sessions(SessionQuery(limit=1, after=page.next_cursor))
        seen += [r.session_id for r in page.rows]
    assert seen == [top, *older]
    back = await data.list_sessions(SessionQuery(limit=1, before=page.prev_cursor))
    assert [r.session_id for r in back.rows] == [older[0]]
    back = await data.list_sessions(SessionQuery(limit=1, before=back.prev_cursor))
    assert [r.session_id for r in back.rows] == [top] and back.prev_cursor is None


async def test_a_time_window_reads_only_its_part_of_the_list(data: UiData) -> None:
    """``since``/``until`` keep every session whose last activity falls in the window,
    the top one included while it keeps an older place in the list, and on SQLite read
    the window through the list order's index instead of the whole list."""
    stores = data.stores
    now = time.time()
    old, mid = [await add(stores, t, last_active=now - age)
                for t, age in (("old", 300), ("mid", 200))]
    top = await add(stores, "top", last_active=now - 100)
    record = await stores.index.get_session(top)
    assert record is not None  # its next turn: it keeps its place, an older list_order
    await stores.index.upsert_session(record.model_copy(update={"last_active": now - 10}))

    async def window(since: float | None, until: float | None) -> list[str]:
        page = await data.list_sessions(SessionQuery(since=since, until=until))
        return [r.session_id for r in page.rows]

    assert await window(now - 50, None) == [top]  # after its list_order: still found
    assert await window(now - 250, None) == [top, mid]
    assert await window(None, now - 150) == [mid, old]
    assert await window(None, now - 5) == [top, mid, old]
    assert await window(now - 250, now - 150) == [mid]
    assert await window(now, None) == []
    if data.engine != "sqlite":
        return
    db = stores.checkpoints.connection  # type: ignore[attr-defined]
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        await window(now - 250, now - 150)
    finally:
        db.set_trace_callback(None)
    listing = next(s for s in statements if "ORDER BY list_order" in s)
    plan = " ".join(str(r[-1]) for r in db.execute(f"EXPLAIN QUERY PLAN {listing}"))
    assert "cli_sessions_list_order (list_order>? AND list_order<?)" in plan, plan


@pytest.mark.parametrize(("sort", "key"), [
    ("last_active", "1" + "0" * 30), ("tokens", "-1" + "0" * 30), ("cost", "1e999"),
    ("turns", "NaN"), ("created", '"a title"'), ("title", "12")])
async def test_a_cursor_the_database_cannot_compare_is_ignored(
        data: UiData, sort: str, key: str) -> None:
    """A hand-made cursor (numbers past 64 bits, ``1e999``, ``NaN``, text for a numeric
    key or a number for the title) reads the first page rather than failing."""
    sid = await add(data.stores, "only", last_active=time.time())
    cursor = base64.urlsafe_b64encode(f'[{key}, "x"]'.encode()).decode().rstrip("=")
    for query in (SessionQuery(sort=sort, after=cursor), SessionQuery(sort=sort, before=cursor)):
        page = await data.list_sessions(query)
        assert [r.session_id for r in page.rows] == [sid]


async def test_one_session_snapshot_entries_events_and_revision(data: UiData) -> None:
    stores = data.stores
    sid = await add(stores, "long", entries=120, last_active=time.time(), plan=True)
    assert (await data.get_session(sid[:10])) is not None
    state = await data.snapshot(sid)
    assert state is not None and state.memory_entries == []
    assert state.current_plan is not None and state.completed_steps["a"].output == {"n": 1}
    latest = await data.entries(sid, limit=50)
    assert latest.total == 120 and [r.seq for r in latest.rows] == list(range(70, 120))
    earlier = await data.entries(sid, before=latest.first_seq, limit=50)
    assert [r.seq for r in earlier.rows] == list(range(20, 70))
    assert earlier.rows[0].entry.content == "long entry 20"
    assert (await data.entries(sid, after=119)).rows == []

    revision = await data.revision(sid)
    for i in range(5):
        await stores.events.append_event(sid, "model_call", {"input_tokens": i})
    assert await data.revision(sid) != revision
    assert [e.seq for e in await data.events(sid, limit=2)] == [4, 5]
    assert [e.data["input_tokens"] for e in await data.events(sid, after=3)] == [3, 4]
    assert await data.snapshot("no-such-session") is None
    assert not await data.is_running(sid)


async def test_lineage_is_read_from_index_metadata(data: UiData) -> None:
    stores, now = data.stores, time.time()
    root = await add(stores, "root", entries=4, last_active=now)
    first = await add(stores, "first branch", entries=4, last_active=now,
                      metadata={"forked_from": root, "fork_point": 2})
    second = await add(stores, "second branch", entries=4, last_active=now + 1,
                       metadata={"forked_from": root, "fork_point": 1})
    nested = await add(stores, "nested", entries=4, last_active=now,
                       metadata={"forked_from": first, "fork_point": 3})
    record = await data.get_session(nested)
    assert record is not None
    tree = await data.lineage_of(record)
    assert tree.record.session_id == root and tree.fork_point is None
    assert [c.record.session_id for c in tree.children] == [first, second]
    assert [c.label for c in tree.children] == ["first branch entry 2", "second branch entry 1"]
    assert [c.record.session_id for c in tree.children[0].children] == [nested]
    alone = await data.get_session(await add(stores, "alone", last_active=now))
    assert alone is not None and (await data.lineage_of(alone)).children == []


async def test_a_subagent_is_shown_under_its_parents_line(data: UiData) -> None:
    stores, now = data.stores, time.time()
    parent = await add(stores, "parent", entries=2, last_active=now,
                       metadata={"host_session_id": "ses_parent"})
    child = await add(stores, "child", entries=2, last_active=now + 5,
                      metadata={"host_session_id": "ses_child",
                                "host_parent_session_id": "ses_parent"})
    for sid in (child, parent):
        record = await data.get_session(sid)
        assert record is not None
        tree = await data.lineage_of(record)
        assert tree.record.session_id == parent
        assert [(c.record.session_id, c.subagent) for c in tree.children] == [(child, True)]


async def test_cancel_fork_and_export_go_through_the_library(
        data: UiData) -> None:
    stores = data.stores
    sid = await add(stores, "paused", status="paused", entries=2, last_active=time.time())
    assert await data.cancel_session(sid)
    state = await stores.checkpoints.load_session(sid)
    assert state is not None and state.status == SessionStatus.CANCELLED
    row = await stores.index.get_session(sid)
    assert row is not None and row.status == "cancelled"
    assert [e.kind for e in await data.events(sid)] == ["cancel"]
    assert not await data.cancel_session(sid), "an ended session is not cancelled twice"
    branch = await data.fork_session(sid, 0)  # up to and including entry 0
    forked = await stores.checkpoints.load_session(branch)
    assert forked is not None and (forked.forked_from, forked.fork_point) == (sid, 1)
    with pytest.raises(NotAvailableError, match="outside"):
        await data.fork_session(sid, 7)
    lines = (await data.export_session(sid)).decode().splitlines()
    assert len(lines) > 1 and all(json.loads(line) for line in lines)
    assert sid in lines[1] or any(sid in line for line in lines)


async def test_paging_stays_fast_at_100000_sessions(tmp_path: Path) -> None:
    """A page 2,000 sessions deep costs what the first page costs, less than half of
    reading the list whole: counted in SQLite's virtual-machine steps (its progress handler), not
    in time, so a busy machine cannot fail it and a query that scans would."""
    async with open_project_stores(tmp_path):
        pass  # creates and migrates the file
    rng = random.Random(7)
    rows = []
    for i in range(100_000):
        meta = {"conversation_key": f"k{i}", "purpose": "title" if i % 50 == 0 else "chat"}
        rows.append((str(uuid.UUID(int=rng.getrandbits(128))), f"session {i}", "openai:m",
                     1e9 + i, 1e9 + rng.random() * 1e7, rng.choice(["completed", "failed"]),
                     i % 7, i % 13, i * 3, i, i * 1e-5, json.dumps(meta)))
    with sqlite3.connect(tmp_path / ".nonoka" / "sessions.db") as db:
        db.executemany("INSERT INTO cli_sessions (session_id, title, model, created_at, "
                       "last_active, status, turn_count, message_count, input_tokens, "
                       "output_tokens, cost_usd, metadata) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    async with open_project_stores(tmp_path) as stores:
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        connection = stores.checkpoints.connection  # type: ignore[attr-defined]
        connection.set_progress_handler(count, 100)
        connection.execute("SELECT max(title || metadata) FROM cli_sessions").fetchall()
        whole = steps[0]  # reading every row once
        data = UiData(stores)
        costs = []
        query = SessionQuery(limit=50)
        previous: float | None = None
        for _ in range(40):  # 2,000 sessions deep, by cursor
            steps[0] = 0
            page = await data.list_sessions(query)
            costs.append(steps[0])
            assert len(page.rows) == 50 and page.more_than_cap
            for record in page.rows:
                assert previous is None or record.last_active <= previous
                previous = record.last_active
            query = SessionQuery(limit=50, after=page.next_cursor)
        failed = await data.list_sessions(SessionQuery(status="failed", limit=50))
        assert {r.status for r in failed.rows} == {"failed"}
        connection.set_progress_handler(None, 0)
    assert max(costs) <= 2 * costs[0] + 10, f"a deeper page cost more: {costs}"
    # A page reads at most the count's cap of rows, never the whole list.
    assert max(costs) * 2 < whole, f"a page cost {max(costs)} steps, the whole list {whole}"


async def test_text_search_finds_a_branch_by_the_entries_it_shares(data: UiData) -> None:
    """A branch's first entries are stored with the session it came from: searching their
    text finds the branch too (and a branch of the branch), but not a branch made before
    them."""
    from nonoka.turn.lineage import fork_session

    stores, now = data.stores, time.time()
    root = await add(stores, "root", entries=6, last_active=now)
    shares = await fork_session(stores, root, 4, reason="test")  # entries 0..3
    nested = await fork_session(stores, shares, 3, reason="test")  # entries 0..2 of root
    before = await fork_session(stores, root, 2, reason="test")  # entries 0..1

    async def found(text: str) -> set[str]:
        rows = (await data.list_sessions(SessionQuery(text=text, everything=True))).rows
        return {r.session_id for r in rows}

    assert await found("root entry 2") == {root, shares, nested}
    assert await found("root entry 3") == {root, shares}
    assert await found("root entry 5") == {root}
    assert before in await found("root entry 1")


async def test_an_answer_cut_short_long_ago_is_found_past_the_events_window(
        data: UiData) -> None:
    """The page shows the latest 500 events; an answer cut short before them is still
    shown, and only its pieces (and what closed them) are read, not the copies a stored
    answer followed."""
    from nonoka.ui.pages import TIMELINE_EVENTS, cut_short

    stores = data.stores
    sid = await add(stores, "long log", entries=2, last_active=time.time())
    log = stores.events.append_event
    await log(sid, "request", {"messages": 1})
    await log(sid, "partial_answer", {"text": "a copy of "})
    await log(sid, "partial_answer", {"text": "a stored answer"})
    await log(sid, "model_call", {"model": "m"})
    await log(sid, "finish", {"finish_reason": "stop"})
    await log(sid, "request", {"messages": 3})
    await log(sid, "partial_answer", {"text": "once upon "})
    await log(sid, "warning", {"code": "w", "message": "not a closing entry"})
    await log(sid, "partial_answer", {"text": "a time"})
    await log(sid, "error", {"code": "model_error", "message": "cut"})
    for n in range(TIMELINE_EVENTS + 20):
        await log(sid, "warning", {"code": "w", "message": f"later {n}"})
    await log(sid, "request", {"messages": 5})
    await log(sid, "partial_answer", {"text": "still going"})

    window = await data.events(sid, limit=TIMELINE_EVENTS)
    assert all(e.kind != "partial_answer" or e.data["text"] == "still going" for e in window)
    found = await data.unfinished_events(sid)
    assert [e.kind for e in found] == ["partial_answer", "partial_answer", "error",
                                       "partial_answer"]
    shown = [(c.text, c.label) for c in cut_short(found, running=False)]
    assert shown == [("once upon a time", "interrupted: the turn ended mid-answer"),
                     ("still going", "interrupted: the process ended mid-answer")]
    assert await data.unfinished_events(str(uuid.uuid4())) == []
