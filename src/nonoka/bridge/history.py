"""Reconcile the history a host resends every turn with what the session has stored.

The stored conversation is authoritative; the request's history only tells what is new:
the trailing user message(s) after the host's last assistant message, or the trailing
tool results. A resent tail that is already stored (the previous process died after
saving it) is recognised and not added twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from nonoka.messages import MemoryEntry, Message, ToolResult
from nonoka.protocol.turns import joined_prompt, split_after_reply


@dataclass(frozen=True)
class TurnPlan:
    """What a request asks of a session.

    ``prompt``: a new user message; ``tool_results``: results for pending host calls
    (optionally with a user message that came along); ``resume``: nothing new — carry on.
    """

    kind: Literal["prompt", "tool_results", "resume"]
    prompt: str | None = None
    results: list[ToolResult] = field(default_factory=list)


def plan_turn(stored: Sequence[MemoryEntry], messages: Sequence[Message]) -> TurnPlan:
    """Decide what the request adds to the stored conversation.

    A request the host retries after a process died mid-turn carries what that process
    already stored (the prompt, the tool results): it is recognised and the turn resumes
    (or its stored answer is replayed) instead of the prompt being added a second time.
    """
    tail = split_after_reply(messages)[1]
    prompt = joined_prompt(tail)
    tool_messages = [m for m in tail if m.role == "tool"]
    if tool_messages:
        answered = {e.tool_call_id for e in stored if e.role == "tool"}
        fresh = [ToolResult(tool_call_id=m.tool_call_id or "", content=m.content)
                 for m in tool_messages if m.tool_call_id not in answered]
        if fresh or (prompt is not None and not prompt_is_stored(stored, messages, prompt)):
            return TurnPlan("tool_results", prompt=prompt, results=fresh)
        return TurnPlan("resume")
    if prompt is None or prompt_is_stored(stored, messages, prompt):
        return TurnPlan("resume")
    return TurnPlan("prompt", prompt=prompt)


def host_users(entries: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    """User entries that came from the host (not nonoka's repair notes or summaries)."""
    return [e for e in entries if e.role == "user" and not e.metadata.get("contract_repair")
            and not e.metadata.get("summary")]


def prompt_is_stored(stored: Sequence[MemoryEntry], messages: Sequence[Message],
                     prompt: str) -> bool:
    """Whether the request's trailing prompt is the session's last stored user message.

    True when a process stored it and died (before or after answering). The same text
    sent again as a new turn is told apart by counting: the stored session then holds
    fewer user messages than the request (the new one is missing). The trailing run of
    user messages counts as one, since it is stored joined. Only an exact count says
    "stored", so a new prompt is never mistaken for a stored one.
    """
    users = host_users(stored)
    if not users or users[-1].content != prompt:
        return False
    if stored[-1].role == "user":
        return True  # saved by a process that died before answering
    tail = split_after_reply(messages)[1]
    sent = sum(1 for m in messages if m.role == "user") - sum(
        1 for m in tail if m.role == "user") + 1
    return len(users) == sent


def split_for_new_session(messages: Sequence[Message]) -> tuple[list[Message], str | None]:
    """History to seed a new session with, and the prompt to run (``None``: just resume)."""
    if messages and messages[-1].role == "user":
        tail = split_after_reply(messages)[1]
        users_at_end = len(tail) - next(
            (i for i in range(len(tail) - 1, -1, -1) if tail[i].role != "user"), -1) - 1
        cut = len(messages) - users_at_end
        return list(messages[:cut]), joined_prompt(messages[cut:])
    return list(messages), None


def matches_stored(stored: Sequence[MemoryEntry], messages: Sequence[Message]) -> bool:
    """Whether a request's history plausibly continues a stored conversation.

    Every user message the session stored must appear, in order, at the start of the
    request's user messages (anywhere, once compaction dropped the oldest). Two
    conversations that both began with "hi" share a conversation key but diverge at their
    second user message, so neither is mistaken for the other.
    """
    stored_users = [e.content for e in host_users(stored)]
    request_users = [m.content for m in messages if m.role == "user"]
    if not stored_users or len(stored_users) > len(request_users):
        return False
    if not any(e.metadata.get("summary") for e in stored):
        return request_users[: len(stored_users)] == stored_users
    # After a compaction the oldest user messages are gone: the rest must still line up.
    width = len(stored_users)
    return any(request_users[i:i + width] == stored_users
               for i in range(len(request_users) - width + 1))
