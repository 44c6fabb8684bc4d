"""Tokens and cost per turn as small bar charts, drawn as SVG on the server.

No chart library and no inline style: the geometry is computed here and the colours
come from the stylesheet, which the page's content security policy allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nonoka.ui import format as fmt
from nonoka.ui.timeline import Turn

WIDTH, HEIGHT = 560, 150
LEFT, BOTTOM, TOP = 44, 18, 10
MAX_BARS = 120


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    segments: list[tuple[float, float, str]]
    """``(y, height, css class)`` from the bottom up."""
    tip: str
    label: str


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    top_label: str
    total: str
    width: int = WIDTH
    height: int = HEIGHT
    base: int = HEIGHT - BOTTOM
    left: int = LEFT
    top: int = TOP


def tokens_chart(turns: Sequence[Turn]) -> Chart:
    shown = list(turns)[-MAX_BARS:]
    peak = max((t.input_tokens + t.output_tokens for t in shown), default=0)
    bars = []
    for i, turn in enumerate(shown):
        parts = [(turn.input_tokens, "in"), (turn.output_tokens, "out")]
        bars.append(_bar(i, len(shown), parts, peak,
                         f"turn {turn.number}: {fmt.number(turn.input_tokens)} in / "
                         f"{fmt.number(turn.output_tokens)} out tokens", str(turn.number)))
    total = sum(t.input_tokens + t.output_tokens for t in turns)
    return Chart("Tokens per turn", bars, fmt.tokens(peak), f"{fmt.tokens(total)} total")


def cost_chart(turns: Sequence[Turn]) -> Chart:
    shown = list(turns)[-MAX_BARS:]
    peak = max((t.cost for t in shown), default=0.0)
    bars = [_bar(i, len(shown), [(t.cost, "cost")], peak,
                 f"turn {t.number}: {fmt.money(t.cost)}", str(t.number))
            for i, t in enumerate(shown)]
    return Chart("Cost per turn", bars, fmt.money(peak),
                 f"{fmt.money(sum(t.cost for t in turns))} total")


def _bar(index: int, count: int, parts: Sequence[tuple[float, str]], peak: float, tip: str,
         label: str) -> Bar:
    room = WIDTH - LEFT - 8
    slot = room / max(count, 1)
    width = max(2.0, min(36.0, slot * 0.7))
    x = LEFT + 4 + index * slot + (slot - width) / 2
    scale = (HEIGHT - BOTTOM - TOP) / peak if peak > 0 else 0.0
    y = float(HEIGHT - BOTTOM)
    segments = []
    for value, css in parts:
        height = value * scale
        if height > 0:
            y -= height
            segments.append((round(y, 2), round(height, 2), css))
    every = max(1, count // 12)
    return Bar(round(x, 2), round(width, 2), segments, tip,
               label if index % every == 0 else "")
