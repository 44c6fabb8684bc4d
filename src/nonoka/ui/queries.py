"""The numbers and dates in a page's address, checked before they reach a query.

A value the pages never make (``before=abc``, ``before=10**30``, a date the clock cannot
hold) is the caller's mistake: the answer is a 400 naming the parameter and what it
takes, never a 500 from the database or the clock.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import date, datetime

LARGEST = 2**62
"""The largest number a page takes: well inside SQLite's and PostgreSQL's 64 bits."""
_WHOLE = re.compile(r"-?[0-9]{1,19}")


class BadQuery(ValueError):
    """A query parameter the ui does not take; the message is the answer's text."""


def whole(params: Mapping[str, str], name: str, *, low: int = 0,
          high: int = LARGEST) -> int | None:
    """``params[name]`` as a whole number from ``low`` to ``high``; ``None`` if absent."""
    text = params.get(name)
    if text is None or text == "":
        return None
    value = int(text) if _WHOLE.fullmatch(text) else None
    if value is None or not low <= value <= high:
        raise BadQuery(f"nonoka: {name}={_shown(text)} is not a whole number from {low} to "
                       f"{high:,}; use a value the page links to, or leave {name} out")
    return value


def one_of(params: Mapping[str, str], name: str, allowed: Collection[int],
           default: int) -> int:
    """``params[name]``, one of ``allowed`` numbers; ``default`` if absent."""
    text = params.get(name)
    if text is None or text == "":
        return default
    value = int(text) if _WHOLE.fullmatch(text) else None
    if value is None or value not in allowed:
        choices = ", ".join(str(a) for a in sorted(allowed))
        raise BadQuery(f"nonoka: {name}={_shown(text)} is not one of {choices}; use one of "
                       f"those, or leave {name} out")
    return value


def day(params: Mapping[str, str], name: str) -> float | None:
    """``params[name]``, a ``YYYY-MM-DD`` date, as the timestamp of its local midnight."""
    text = params.get(name)
    if not text:
        return None
    try:
        when = date.fromisoformat(text)
        return datetime(when.year, when.month, when.day).timestamp()
    except (ValueError, OverflowError, OSError):
        raise BadQuery(f"nonoka: {name}={_shown(text)} is not a date the ui can search by; "
                       "write it as YYYY-MM-DD, from 1970 on") from None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:39] + "…")
