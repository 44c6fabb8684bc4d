"""What Claude Code's Messages API requests are for, and how its compactions read.

Claude Code names its conversation (``nonoka.serve.messages.claude_session``), and
besides the main loop's requests it sends requests of its own:

- **side requests** (titles, summaries, checks; its small Haiku model, no tools): each runs
  as a ``title`` request, in a session of its own that lists hide (``nonoka sessions
  list --all`` shows them), never a turn of the conversation's line;
- **a compaction** (``/compact``, or automatically when the context is full): the whole
  conversation and, last, a user text starting ``CRITICAL: Respond with TEXT ONLY``
  that asks for ``<analysis>`` and ``<summary>``. It runs as a ``compaction`` request
  naming the line's session, and its answer is recorded there as Claude Code will show
  it (``shown_summary``);
- **the turn after a compaction** opens with one user text: a lead-in, the summary,
  and a note on where the transcript is. ``continued_parts`` cuts it into the three,
  so the summary is a message of its own that the line's recorded summary matches:
  the bridge then edits the line in place (a compaction, as OpenCode's), instead of
  starting a new session.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

CLAUDE_CODE_AGENT = "claude-cli/"
"""How Claude Code's user agent starts."""
COMPACTION_PROMPT = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools."
"""How Claude Code's compaction prompt starts."""
CONTINUED = ("This session is being continued from a previous conversation that ran out "
             "of context.")
"""How the first user text after a compaction starts."""
_REMINDER_END = "</system-reminder>\n"
_NOTE = "\n\nIf you need specific details from before compaction"
_ANALYSIS = re.compile(r"<analysis>[\s\S]*?</analysis>")
_SUMMARY = re.compile(r"<summary>([\s\S]*?)</summary>")


def _texts(message: Any) -> list[str]:
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(b.get("text", "")) for b in content
            if isinstance(b, dict) and b.get("type") == "text"]


def is_compaction(body: Mapping[str, Any]) -> bool:
    """A Claude Code compaction: its last user message ends with the summary prompt."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    last = messages[-1]
    texts = _texts(last)
    return bool(texts) and last.get("role") == "user" and \
        texts[-1].lstrip().startswith(COMPACTION_PROMPT)


def is_side_request(body: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """A request of Claude Code's besides its main loop: from Claude Code (its user
    agent), to a Haiku model (its small fast model), without tools. Its main loop,
    subagents and compactions send their tools; ``--tools ""`` sends none to the main
    model, and stays a conversation."""
    agent = headers.get("user-agent", "")
    return agent.startswith(CLAUDE_CODE_AGENT) and not body.get("tools") and \
        "haiku" in str(body.get("model", "")).lower()


def shown_summary(answer: str) -> str:
    """A compaction's answer as Claude Code shows it after the lead-in: without its
    ``<analysis>``, the ``<summary>`` as ``Summary:`` and its text."""
    text = _ANALYSIS.sub("", answer, count=1)
    found = _SUMMARY.search(text)
    if found is not None:
        text = text[:found.start()] + "Summary:\n" + found.group(1).strip() + \
            text[found.end():]
    return re.sub(r"\n\n+", "\n\n", text).strip()


def continued_parts(text: str) -> list[str] | None:
    """The first user text after a compaction as its lead-in, its summary and the rest
    (``None`` for any other text); joined, they are the text again."""
    if not text.startswith(CONTINUED):
        return None
    start = len(CONTINUED)
    reminder = text.find(_REMINDER_END, start)
    if reminder != -1 and "<system-reminder>" in text[start:reminder]:
        start = reminder + len(_REMINDER_END)
    else:
        blank = text.find("\n\n", start)
        start = blank + 2 if blank != -1 else len(text)
    end = text.find(_NOTE, start)
    end = len(text) if end == -1 else end
    if not text[start:end].strip():
        return None
    return [text[:start], text[start:end], text[end:]]
