"""Small formats the pages share: times, durations, token counts, money."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from urllib.parse import urlencode

NONE = "\u2013"
"""An en dash: what a cell shows for no value."""


def tokens(count: int | float | None) -> str:
    value = int(count or 0)
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


def money(usd: float | None) -> str:
    if not usd:
        return NONE
    if usd >= 1:
        return f"${usd:,.2f}"
    return f"${usd:.4f}" if usd >= 0.001 else f"${usd:.6f}"


def ago(timestamp: float | None, now: float | None = None) -> str:
    """``"3 min ago"``; the date for anything older than a month."""
    if not timestamp:
        return NONE
    seconds = max(0.0, (time.time() if now is None else now) - timestamp)
    if seconds < 10:
        return "just now"
    if seconds >= 30 * 86400:
        return time.strftime("%Y-%m-%d", time.localtime(timestamp))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def stamp(timestamp: float | None) -> str:
    """A full local date and time, for tooltips and the detail rows."""
    if not timestamp:
        return NONE
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def clock(timestamp: float) -> str:
    """Time of day with milliseconds, for timeline rows."""
    millis = int((timestamp % 1) * 1000)
    return time.strftime("%H:%M:%S", time.localtime(timestamp)) + f".{millis:03d}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def number(value: int | float | None) -> str:
    return f"{int(value or 0):,}"


def is_long(text: str, chars: int = 800, lines: int = 14) -> bool:
    """Whether ``text`` is folded away (long tool results and arguments)."""
    return len(text) > chars or text.count("\n") >= lines


def first_line(text: str, width: int = 100) -> str:
    line = next((part for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def pretty_json(text: str) -> str:
    """Tool-call arguments indented for reading; text that is not JSON as it is."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def link(params: Mapping[str, str], **changes: object) -> str:
    """``/?...``: the current query string with ``changes`` (``None`` removes a key)."""
    merged = {k: v for k, v in params.items() if v not in ("", None)}
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = str(value)
    return "/?" + urlencode(merged) if merged else "/"
