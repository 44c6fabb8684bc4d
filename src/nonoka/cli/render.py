"""How the human commands print: rich tables and colour on a terminal, plain text in a pipe.

Piped output is for ``grep`` and scripts, so it has no escape codes and no box drawing;
``--json`` is for programs. ``rich`` is imported only when a terminal is there to use it.
Every field that comes from outside (titles, model output, tool results, event data)
goes through ``safe_text`` first: credentials masked, control characters escaped.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import click

from nonoka.cli.safe_text import printable, shown
from nonoka.events import (
    RunEvent,
    RunWarning,
    TextDelta,
    ToolCallFinished,
    ToolCallRequested,
)
from nonoka.redact import redact
from nonoka.state.entries import MemoryEntry
from nonoka.store.records import EventRecord, SessionRecord, UsageSummary
from nonoka.turn.lineage import parent_line
from nonoka.turn.partial import PARTIAL, Unfinished, unfinished_answers
from nonoka.turn.status import LiveStatus

if TYPE_CHECKING:
    from nonoka.ops.files import SessionFile

SHORT_ID = 8
TITLE_WIDTH = 48
EVENT_TEXT_WIDTH = 100


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream if stream is not None else sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def print_json(value: Any) -> None:
    """JSON with credentials masked; ``json`` escapes C0 controls, DEL and C1 are ours."""
    text = json.dumps(redact(value), indent=2, ensure_ascii=False, default=str)
    click.echo(_C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


_C1 = re.compile("[\x7f-\x9f]")


# -- small formats -----------------------------------------------------------------------


def short_id(session_id: str) -> str:
    return session_id[:SHORT_ID]


def ago(timestamp: float, now: float | None = None) -> str:
    """``"3m ago"``: how long since ``timestamp``, in the largest unit that fits."""
    seconds = max(0.0, (time.time() if now is None else now) - timestamp)
    if seconds < 5:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            if unit == "d" and seconds >= 30 * 86400:
                return _local("%Y-%m-%d", timestamp)
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def _local(form: str, timestamp: float) -> str:
    """``timestamp`` as local time; a stored time no clock can show (edited by hand) is
    shown as the number it is."""
    try:
        return time.strftime(form, time.localtime(timestamp))
    except (OverflowError, ValueError, OSError):
        return f"{timestamp:g} (not a time)"


def tokens(count: int) -> str:
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def cost(usd: float | None) -> str:
    if not usd:
        return "-"
    if usd >= 1:
        return f"${usd:.2f}"
    return f"${usd:.4f}" if usd >= 0.001 else f"${usd:.6f}"


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters, safe to print."""
    line = shown(" ".join(str(text).split()), one_line=True)
    return line if len(line) <= width else line[:width - 3] + "..."


def clock(timestamp: float, now: float | None = None) -> str:
    """The time of day for today's events, with the date for older ones."""
    today = time.strftime("%Y-%m-%d", time.localtime(now if now is not None else time.time()))
    day = _local("%Y-%m-%d", timestamp)
    return _local("%H:%M:%S" if day == today else "%Y-%m-%d %H:%M:%S", timestamp)


# -- sessions list -------------------------------------------------------------------------

LIST_COLUMNS = ("ID", "TITLE", "STATUS", "TURNS", "TOKENS", "COST", "LAST ACTIVE")
_RIGHT = {"TURNS", "TOKENS", "COST"}
STATUS_STYLES = {"completed": "green", "failed": "red", "running": "yellow",
                 "paused": "cyan", "cancelled": "magenta", "created": "dim",
                 "interrupted": "bold yellow"}


def session_row(record: SessionRecord, now: float | None = None) -> tuple[str, ...]:
    title = record.title or "(untitled)"
    if record.purpose != "chat":
        title = f"[{record.purpose}] {title}"
    return (shown(short_id(record.session_id), one_line=True), clip(title, TITLE_WIDTH),
            shown(record.status, one_line=True), str(record.turn_count),
            tokens(record.input_tokens + record.output_tokens), cost(record.cost_usd),
            ago(record.last_active, now))


def print_sessions(records: Sequence[SessionRecord], now: float | None = None) -> None:
    rows = [session_row(r, now) for r in records]
    if is_terminal():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console(highlight=False)
        # Only the title gives way on a narrow terminal; the other cells are short.
        widths = [max([len(name), *(len(row[i]) for row in rows)])
                  for i, name in enumerate(LIST_COLUMNS)]
        room = max(10, console.width - (sum(widths) - widths[1]) - 2 * (len(widths) - 1))
        table = Table(box=None, header_style="bold", pad_edge=False)
        for name in LIST_COLUMNS:
            table.add_column(name, justify="right" if name in _RIGHT else "left",
                             no_wrap=True, style="dim" if name == "ID" else None)
        for row in rows:
            cells = (*row[:1], clip(row[1], room), *row[2:])
            table.add_row(*(Text(cell, style=STATUS_STYLES.get(cell, "") if i == 2 else "")
                            for i, cell in enumerate(cells)))
        console.print(table)
    else:
        _plain_table(LIST_COLUMNS, rows)


def _plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows,
                                                                           strict=False)]
    for row in (header, *rows):
        cells = [str(cell).rjust(width) if name in _RIGHT else str(cell).ljust(width)
                 for cell, width, name in zip(row, widths, header, strict=True)]
        click.echo("  ".join(cells).rstrip())


def print_tree(records: Sequence[SessionRecord], now: float | None = None) -> None:
    """Sessions as a forest of lineages: each branch under the session it forked from."""
    for line in tree_lines(records, now):
        click.echo(line)


def tree_lines(records: Sequence[SessionRecord], now: float | None = None) -> list[str]:
    """The lines of ``print_tree``: roots newest first, branches and subagents oldest
    first beneath (a subagent's session under its parent's line: ``parent_line``)."""
    known = {r.session_id for r in records}
    children: dict[str, list[SessionRecord]] = {}
    roots: list[SessionRecord] = []
    for record in records:
        parent = record.metadata.get("forked_from") or parent_line(record, records)
        if parent in known:
            children.setdefault(str(parent), []).append(record)
        else:
            roots.append(record)
    lines: list[str] = []
    shown: set[str] = set()

    def walk(record: SessionRecord, lead: str, branch: str) -> None:
        shown.add(record.session_id)
        row = session_row(record, now)
        at = record.metadata.get("fork_point")
        where = f"@{at} " if record.metadata.get("forked_from") and at is not None else ""
        if not record.metadata.get("forked_from") and record.metadata.get(
                "host_parent_session_id"):
            where = "subagent "
        lines.append(f"{lead}{branch}{row[0]}  {where}{row[1]}  {row[2]} · {row[3]} turn(s)"
                     f" · {row[6]}")
        kids = sorted([k for k in children.get(record.session_id, [])
                       if k.session_id not in shown], key=lambda r: r.created_at)
        below = lead + ("" if not branch else "   " if branch == "└─ " else "│  ")
        for i, kid in enumerate(kids):
            walk(kid, below, "└─ " if i == len(kids) - 1 else "├─ ")

    for root in roots:
        walk(root, "", "")
    for record in records:  # parents in a loop (index rows edited by hand): no root
        if record.session_id not in shown:
            walk(record, "", "")
    return lines


def print_candidates(candidates: Sequence[SessionRecord]) -> None:
    """The sessions an ambiguous prefix matched, on stderr, full ids first."""
    for record in candidates:
        click.echo(f"  {shown(record.session_id, one_line=True)}  "
                   f"{clip(record.title or '(untitled)', 40)}  "
                   f"({ago(record.last_active)})", err=True)


# -- sessions show --------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionDetail:
    """One session as ``sessions show`` presents it."""

    record: SessionRecord
    events: list[EventRecord]
    usage: UsageSummary
    branches: list[str] = field(default_factory=list)
    """The sessions forked from this one, oldest first."""
    live: LiveStatus | None = None
    """What the session is doing now (``record.status`` shows its status already)."""
    entries: list[MemoryEntry] | None = None
    """The conversation, when asked for (``--entries``)."""
    files: list[SessionFile] = field(default_factory=list)
    """The files the conversation holds, in order (named, never their bytes)."""
    parent_line: str | None = None
    """A subagent's session: the session of the conversation that started it."""
    subagents: list[str] = field(default_factory=list)
    """The sessions of the subagents this session's conversation started, oldest first."""

    def as_json(self) -> dict[str, Any]:
        holder = self.live.as_json() if self.live is not None else None
        shown = {"session": {**self.record.model_dump(mode="json"), "holder": holder},
                 "lineage": {**lineage_fields(self.record), "branches": self.branches,
                             "parent_line": self.parent_line, "subagents": self.subagents},
                 "files": [f.as_json() for f in self.files],
                 "events": [e.model_dump(mode="json") for e in self.events],
                 "usage": self.usage.model_dump(mode="json")}
        if self.entries is not None:
            shown["entries"] = [entry_json(n, e) for n, e in enumerate(self.entries, 1)]
        return shown


def entry_json(position: int, entry: MemoryEntry) -> dict[str, Any]:
    """An entry as ``show --json`` lists it: ``position`` is what ``--at`` takes to keep
    the conversation up to and including it. Credentials are masked."""
    from nonoka.redact import redact_text

    shown: dict[str, Any] = {"position": position, "role": entry.role,
                             "text": redact_text(entry.content)}
    calls = [{"id": c.id, "name": c.name} for c in entry.tool_calls]
    if calls:
        shown["tool_calls"] = calls
    if entry.tool_call_id:
        shown["tool_call_id"] = entry.tool_call_id
    files = [p for p in entry.parts or () if p.type == "file"]
    if files:
        shown["files"] = [{"media_type": f.media_type, "filename": f.filename} for f in files]
    return shown


def entry_line(position: int, entry: MemoryEntry) -> str:
    """One line of ``show --entries``: position, role, and the start of its text."""
    from nonoka.redact import redact_text

    what = redact_text(" ".join(entry.content.split()))
    calls = ", ".join(c.name for c in entry.tool_calls)
    if calls:
        what = f"{what} [calls {calls}]".strip()
    files = [p for p in entry.parts or () if p.type == "file"]
    if files:
        what = f"{what} [{', '.join(f.filename or f.media_type for f in files)}]".strip()
    return f"#{position:<4} {entry.role:<9} {clip(what, 90)}"


def lineage_fields(record: SessionRecord) -> dict[str, Any]:
    """Where a session branched from: ``forked_from``, ``fork_point``, ``fork_reason``."""
    meta = record.metadata
    return {"forked_from": meta.get("forked_from"), "fork_point": meta.get("fork_point"),
            "fork_reason": meta.get("fork_reason"),
            "host_parent_session_id": meta.get("host_parent_session_id")}


EVENT_STYLES = {"request": "bold", "recovered": "magenta", "branch": "magenta",
                "history edited": "magenta", "model call": "cyan",
                "tool call": "blue", "tool result": "green", "tool error": "red",
                "warning": "yellow", "error": "bold red", "finish": "bold",
                "interrupted": "bold yellow"}


def describe_event(event: EventRecord) -> tuple[str, str]:
    """``(label, text)``: one timeline line for an event-log entry; an event whose data
    does not have the shape its kind writes (edited by hand) is shown as its JSON."""
    try:
        return _describe(event)
    except (TypeError, ValueError, KeyError, AttributeError):
        return event.kind, json.dumps(event.data, ensure_ascii=False, default=repr)


def _model_call(data: dict[str, Any]) -> str:
    """A model call's line: its model, tokens, cost, and a finish that cut it short."""
    spent = f"{data.get('model', '?')} · {data.get('input_tokens', 0)} in / " \
            f"{data.get('output_tokens', 0)} out tokens"
    if data.get("cost_usd"):
        spent += f" · {cost(float(data['cost_usd']))}"
    if data.get("finish") not in (None, "stop", "tool_calls"):  # cut short, or filtered
        spent += f" · finish: {data['finish']}"
    return spent


def _describe(event: EventRecord) -> tuple[str, str]:
    data, kind = event.data, event.kind
    if kind == "request":
        tools = ", ".join(str(t) for t in data.get("tools") or []) or "none"
        purpose = "" if data.get("purpose", "chat") == "chat" else f" · {data['purpose']}"
        return "request", (f"{data.get('source', 'bridge')}{purpose} · "
                           f"{data.get('messages', 0)} message(s) · tools: {tools}")
    if kind == "session":
        if data.get("recovery_reason"):
            return "recovered", f"session recovered ({data['recovery_reason']})"
        return "session", "new session" if data.get("new") else "continued"
    if kind == "model_call":
        return "model call", _model_call(data)
    if kind == "tool_call":
        return "tool call", (f"{data.get('tool_name', '?')} {data.get('arguments', '')} "
                             f"(run by {data.get('executed_by', '?')})")
    if kind == "tool_result":
        label = "tool error" if data.get("is_error") else "tool result"
        return label, f"{data.get('tool_name', '?')}: {data.get('content', '')}"
    if kind in ("warning", "error"):
        return kind, f"{data.get('code', '?')}: {data.get('message', '')}"
    if kind in _LINEAGE_EVENTS:
        return _LINEAGE_EVENTS[kind](data)
    if kind == "early_request":
        outcome = data.get("outcome", "?")
        return "early request", f"{outcome}: " + _EARLY_OUTCOMES.get(outcome, "")
    if kind == "finish":
        stopped = f" · stopped by {data['limit']}: {data.get('detail', '')}" if data.get(
            "limit") else ""
        return "finish", (f"{data.get('finish_reason', '?')} · {data.get('input_tokens', 0)} in"
                          f" / {data.get('output_tokens', 0)} out tokens{stopped}")
    return kind, json.dumps(data, ensure_ascii=False)


_LINEAGE_EVENTS: dict[str, Callable[[dict[str, Any]], tuple[str, str]]] = {
    "forked": lambda data: ("branch", (
        f"branched from {short_id(str(data.get('forked_from', '?')))} at entry "
        f"{data.get('fork_point', '?')} ({data.get('reason', '?')})")),
    "branched": lambda data: ("branch", (
        f"branch {short_id(str(data.get('session_id', '?')))} made at entry "
        f"{data.get('fork_point', '?')} ({data.get('reason', '?')})")),
    "history_edited": lambda data: ("history edited", (
        f"{data.get('reason', '?')}: the host changed {len(data.get('positions') or [])} "
        "stored entr(y/ies); the originals are kept in this event")),
}

_EARLY_OUTCOMES = {
    "used": "the model request left before the runtime had loaded",
    "mismatch": "the request sent early was not the turn's; dropped, the runtime sent its own",
    "unused": "the request sent early was dropped: the turn made no model call",
}


def _timeline(events: Sequence[EventRecord], now: float | None) -> list[tuple[str, str, str]]:
    """``(time, label, text)`` rows; a request that never logged ``finish`` before the next
    one began is marked, since that is what a killed process leaves behind, and so is an
    answer streamed but never stored (``nonoka.turn.partial``), where it was cut short."""
    rows: list[tuple[str, str, str]] = []
    open_request = False
    unfinished = dict(unfinished_answers(events))
    for n, event in enumerate(events):
        if n in unfinished:
            rows.append(_interrupted_answer(unfinished[n], now))
        if event.kind == PARTIAL:
            continue  # shown whole, above, when no stored answer follows
        if event.kind == "request":
            if open_request:
                rows.append(("", "interrupted", "the request above never finished (its "
                             "process ended mid-turn)"))
            open_request = True
        elif event.kind == "finish":
            open_request = False
        label, text = describe_event(event)
        rows.append((clock(event.at, now), shown(label, one_line=True), shown(text)))
    if len(events) in unfinished:
        rows.append(_interrupted_answer(unfinished[len(events)], now))
    return rows


def _interrupted_answer(answer: Unfinished, now: float | None) -> tuple[str, str, str]:
    """What the model streamed of an answer it never finished (the process died, or the
    call failed): never stored as an answer, shown as what the person saw."""
    return (clock(answer.at, now), "interrupted answer", shown(answer.text))


def _metadata(detail: SessionDetail, now: float | None) -> list[tuple[str, str]]:
    record = detail.record
    status = record.status
    if detail.live is not None and detail.live.holder:
        status += f" ({detail.live.holder})"
    elif status == "interrupted":
        status += " (its process ended mid-turn; the next turn repairs it)"
    rows = [("session", record.session_id), ("title", record.title or "(untitled)"),
            ("status", status), ("model", record.model or "-"),
            ("created", f"{clock(record.created_at, now)} ({ago(record.created_at, now)})"),
            ("last active", f"{clock(record.last_active, now)} ({ago(record.last_active, now)})"),
            ("turns", f"{record.turn_count} ({record.message_count} messages stored)"),
            ("tokens", f"{record.input_tokens} in / {record.output_tokens} out"),
            ("cost", cost(record.cost_usd))]
    if record.purpose != "chat":
        rows.append(("purpose", record.purpose))
    if record.conversation_key:
        rows.append(("conversation key", record.conversation_key[:16] + "..."))
    lineage = lineage_fields(record)
    if lineage["forked_from"]:
        rows.append(("forked from", f"{lineage['forked_from']} at entry "
                                    f"{lineage['fork_point']} ({lineage['fork_reason']})"))
    if lineage["host_parent_session_id"]:
        parent = detail.parent_line
        rows.append(("subagent of", f"{parent} (host session "
                                    f"{lineage['host_parent_session_id']})" if parent else
                     f"host session {lineage['host_parent_session_id']}"))
    if detail.subagents:
        rows.append(("subagents", ", ".join(short_id(b) for b in detail.subagents)))
    if detail.branches:
        rows.append(("branches", ", ".join(short_id(b) for b in detail.branches)))
    rows += [("files" if n == 0 else "", f"{f.label} at entry {f.position}")
             for n, f in enumerate(detail.files[:MAX_FILES_SHOWN])]
    if len(detail.files) > MAX_FILES_SHOWN:
        rows.append(("", f"... and {len(detail.files) - MAX_FILES_SHOWN} more (--json lists "
                         "them all)"))
    return [(name, shown(value, one_line=True)) for name, value in rows]


MAX_FILES_SHOWN = 20


def _usage_line(usage: UsageSummary) -> str:
    details = [f"{n} {what}" for n, what in ((usage.cache_read_tokens, "cache read"),
                                             (usage.cache_write_tokens, "cache write"),
                                             (usage.reasoning_tokens, "reasoning")) if n]
    extra = f" ({', '.join(details)})" if details else ""
    return (f"{usage.model_calls} model call(s) · {usage.input_tokens} in / "
            f"{usage.output_tokens} out tokens{extra} · {cost(usage.cost_usd)} · "
            f"{usage.tool_calls} tool call(s) · {usage.warnings} warning(s) · "
            f"{usage.errors} error(s)")


def print_detail(detail: SessionDetail, now: float | None = None) -> None:
    if detail.entries is not None:
        click.echo(f"entries of {detail.record.session_id} (fork or run with --at N to keep "
                   "#1..#N)")
        for n, entry in enumerate(detail.entries, 1):
            click.echo(shown(entry_line(n, entry), one_line=True))
        click.echo("")
    meta = _metadata(detail, now)
    timeline = _timeline(detail.events, now)
    heading = (f"timeline (last {len(detail.events)} event(s))" if detail.events
               else "timeline: empty")
    if is_terminal():
        _rich_detail(meta, heading, timeline, _usage_line(detail.usage))
        return
    width = max(len(name) for name, _ in meta)
    for name, value in meta:
        click.echo(f"{name.ljust(width)}  {value}")
    click.echo(f"\n{heading}")
    at_width = max((len(at) for at, _, _ in timeline), default=0)
    label_width = max((len(label) for _, label, _ in timeline), default=0)
    for at, label, text in timeline:
        click.echo(f"  {at.ljust(at_width)}  {label.ljust(label_width)}  "
                   f"{clip(text, EVENT_TEXT_WIDTH)}")
    click.echo(f"\nusage  {_usage_line(detail.usage)}")


def _rich_detail(meta: list[tuple[str, str]], heading: str,
                 timeline: list[tuple[str, str, str]], usage: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for name, value in meta:
        style = STATUS_STYLES.get(value.split(" (")[0], "") if name == "status" else ""
        grid.add_row(name, Text(value, style=style))
    console.print(grid)
    console.print(Text("\n" + heading, style="bold"))
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for at, label, text in timeline:
        style = EVENT_STYLES.get(label, "")
        table.add_row(at, Text(label, style=style), Text(clip(text, EVENT_TEXT_WIDTH * 2)))
    console.print(table)
    console.print(Text.assemble("\n", ("usage", "bold"), "  ", usage))


# -- nonoka run --------------------------------------------------------------------------


class StreamPrinter:
    """Shows a turn as it happens: the answer on stdout, tool activity on stderr."""

    def __init__(self) -> None:
        self._mid_line = False

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            click.echo(printable(event.text), nl=False)
            sys.stdout.flush()
            self._mid_line = not event.text.endswith("\n")
        elif isinstance(event, ToolCallRequested):
            self.end_line()
            click.secho(f"[tool] {clip(event.call.name, 60)} {clip(event.call.arguments, 120)}",
                        fg="blue", err=True)
        elif isinstance(event, ToolCallFinished):
            first = clip(event.content, 100)
            click.secho(f"[tool] {clip(event.call.name, 60)} -> {first}", err=True,
                        fg="red" if event.is_error else None, dim=not event.is_error)
        elif isinstance(event, RunWarning):
            self.end_line()
            click.secho(f"warning: {shown(f'{event.code}: {event.message}')}", fg="yellow",
                        err=True)

    def end_line(self) -> None:
        """Finish a half-written answer line before anything else is printed."""
        if self._mid_line:
            click.echo()
            self._mid_line = False
