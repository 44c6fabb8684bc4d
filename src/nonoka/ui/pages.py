"""What each page shows, gathered from ``UiData`` into plain objects the templates draw."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nonoka.redact import redact_text
from nonoka.turn.partial import unfinished_answers
from nonoka.ui import charts, graph, queries, timeline
from nonoka.ui import format as fmt
from nonoka.ui.data import (
    SORTS,
    STATUSES,
    EntryPage,
    EventRecord,
    LineageNode,
    SessionPage,
    SessionQuery,
    SessionRecord,
    SessionState,
    UiData,
    UsageSummary,
    parent_of,
)

PAGE_SIZES = (25, 50, 100)
FIRST_ENTRIES = 40
"""Conversation entries on a session page's first screen; earlier ones load on demand."""
TIMELINE_EVENTS = 500
LIVE_ENTRIES = 500
"""At most this many new entries are appended to a live page at once."""


# -- the sessions page ------------------------------------------------------------------------


@dataclass
class ListView:
    query: SessionQuery
    page: SessionPage
    form: dict[str, str]
    statuses: tuple[str, ...] = STATUSES
    sorts: tuple[str, ...] = tuple(SORTS)
    sizes: tuple[int, ...] = PAGE_SIZES
    elapsed_ms: float = 0.0


def query_from(params: dict[str, str]) -> tuple[SessionQuery, dict[str, str]]:
    """A ``SessionQuery`` from the page's query string. Unknown words (a sort, a status)
    fall back to the defaults; a number or date out of range raises ``BadQuery``."""
    sort = params.get("sort", "last_active")
    sort = sort if sort in SORTS else "last_active"
    order = params.get("order", "asc" if sort == "title" else "desc")
    status = params.get("status", "")
    size = queries.one_of(params, "n", PAGE_SIZES, 50)
    since, until = queries.day(params, "from"), queries.day(params, "to")
    form = {"q": params.get("q", "")[:200], "status": status if status in STATUSES else "",
            "from": params["from"] if since is not None else "",
            "to": params["to"] if until is not None else "",
            "sort": sort, "order": "asc" if order == "asc" else "desc",
            "all": "1" if params.get("all") else "", "n": str(size)}
    query = SessionQuery(
        text=form["q"], status=form["status"], since=since,
        until=until + 86400 if until is not None else None, sort=sort,
        descending=form["order"] == "desc", after=params.get("after") or None,
        before=params.get("before") or None, everything=bool(form["all"]),
        limit=size)
    return query, form


async def list_view(data: UiData, params: dict[str, str]) -> ListView:
    query, form = query_from(params)
    started = time.perf_counter()
    page = await data.list_sessions(query)
    return ListView(query, page, form, elapsed_ms=(time.perf_counter() - started) * 1000)


# -- the session page --------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerRow:
    name: str
    used: str
    limit: str
    fraction: float | None
    """``used / limit`` when there is a limit (may exceed 1)."""

    @property
    def percent(self) -> float:
        return min(100.0, max(0.0, (self.fraction or 0.0) * 100))

    @property
    def tone(self) -> str:
        if self.fraction is None:
            return ""
        return "error" if self.fraction >= 1 else "warn" if self.fraction >= 0.8 else "ok"


@dataclass(frozen=True)
class CutShort:
    """An answer a turn streamed but never stored (``nonoka.turn.partial``), as the
    conversation's end shows it."""

    text: str
    """Redacted whole (its pieces were one by one, as they were logged)."""
    at: float
    label: str
    streaming: bool = False
    """The session runs now and its log ends with it: the answer is still streaming."""


@dataclass
class SessionView:
    record: SessionRecord
    usage: UsageSummary
    state: SessionState | None
    entries: EntryPage
    timeline: timeline.Timeline
    plan: graph.PlanGraph | None
    ledger: list[LedgerRow]
    lineage: LineageNode
    charts: list[charts.Chart]
    revision: str
    running: bool
    actions: bool
    parent: SessionRecord | None = None
    events_shown: int = 0
    cut_short: list[CutShort] = field(default_factory=list)
    """Answers streamed but never stored, shown after the conversation."""
    extras: dict[str, str] = field(default_factory=dict)


async def session_view(data: UiData, record: SessionRecord, *, actions: bool) -> SessionView:
    sid = record.session_id
    revision = await data.revision(sid)
    state = await data.snapshot(sid)
    entries = await data.entries(sid, limit=FIRST_ENTRIES)
    events = await data.events(sid, limit=TIMELINE_EVENTS)
    line = timeline.build(events)
    lineage = await data.lineage_of(record)
    parent_id = parent_of(record)
    parent = await data.get_session(parent_id) if parent_id else None
    running = await data.is_running(sid)
    return SessionView(
        record=record, usage=await data.usage(sid), state=state, entries=entries,
        timeline=line, plan=graph.build(state) if state is not None else None,
        ledger=ledger(state) if state is not None else [], lineage=lineage,
        charts=[charts.tokens_chart(line.turns), charts.cost_chart(line.turns)],
        revision=revision, running=running, actions=actions,
        parent=parent, events_shown=len(events),
        cut_short=cut_short(await data.unfinished_events(sid), running))


def cut_short(events: list[EventRecord], running: bool) -> list[CutShort]:
    """The answers ``events`` (``UiData.unfinished_events``) hold that were streamed and
    never stored: by the same rule as ``nonoka sessions show``; a session running now is
    still streaming the one its log ends with."""
    shown = []
    for _, answer in unfinished_answers(events):
        streaming = running and answer.ended_by == ""
        label = ("streaming: the answer so far" if streaming else
                 "interrupted: the process ended mid-answer" if answer.process_ended else
                 "interrupted: the turn ended mid-answer")
        shown.append(CutShort(redact_text(answer.text), answer.at, label, streaming))
    return shown


def ledger(state: SessionState) -> list[LedgerRow]:
    """The runtime ledger against its limits, one row per budget."""
    runtime = state.runtime_state
    limits, usage = runtime.limits, runtime.usage
    rows = [
        _row("Model turns", usage.model_turns, limits.max_model_turns, fmt.number),
        _row("Tool calls", usage.tool_calls, limits.max_tool_calls, fmt.number),
        _row("Tokens", usage.total_tokens, limits.max_total_tokens, fmt.number),
        _row("Cost", usage.cost_usd, limits.max_cost_usd, fmt.money),
        _row("Running time", usage.wall_seconds, limits.wall_timeout_seconds, fmt.duration),
    ]
    if runtime.deadline_at is not None:
        left = runtime.deadline_at - time.time()
        rows.append(LedgerRow("Deadline", fmt.stamp(runtime.deadline_at),
                              "passed" if left <= 0 else f"{fmt.duration(left)} left",
                              None))
    if limits.max_context_tokens is not None:
        rows.append(LedgerRow("Context budget", "", f"{fmt.number(limits.max_context_tokens)}"
                              " tokens", None))
    return rows


def _row(name: str, used: float, limit: float | None,
         render: Callable[[float], str]) -> LedgerRow:
    text = render(used) if used or limit else "0"
    if limit is None:
        return LedgerRow(name, text, "no limit", None)
    return LedgerRow(name, text, render(limit), used / limit if limit else 1.0)
