"""Token estimates for working-memory budgets, on the standard library only.

The bridge's early dispatch checks a budget before pydantic is loaded, so the estimate a
stored entry carries is computed here, once.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

ENTRY_OVERHEAD = 4
"""Tokens a chat message costs beyond its text (role, separators)."""


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (about four characters a token), good enough for budgets."""
    return (len(text) + 3) // 4


def entry_tokens(content: str, call_argument_chars: int = 0) -> int:
    """The estimate a conversation entry carries: its text, its tool-call arguments, overhead."""
    return estimate_tokens(content) + call_argument_chars // 4 + ENTRY_OVERHEAD
