"""The tools the crash workers run: each reports its start before doing anything.

A test kills a worker once a start is reported, then counts the starts to see which calls
ran again on resume: ``lookup`` is idempotent (re-run), ``send_email`` is not (its unknown
outcome is recorded instead).
"""

from __future__ import annotations

from collections.abc import Callable

from nonoka import Tool, tool

Started = Callable[[str, str], None]
"""Called with the tool's name and its key argument when a call starts."""


def marked_tools(started: Started) -> list[Tool]:
    """``lookup`` (safe to repeat) and ``send_email`` (not), both reporting to ``started``."""

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Look a key up (safe to repeat)."""
        started("lookup", key)
        return f"value-{key}"

    @tool
    def send_email(to: str) -> str:
        """Send an email (not safe to repeat)."""
        started("send_email", to)
        return f"sent to {to}"

    return [lookup, send_email]
