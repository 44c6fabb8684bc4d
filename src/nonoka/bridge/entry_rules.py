"""The rules both of the bridge's paths apply to a conversation, on plain values.

A turn is decided twice: by early dispatch (``nonoka.bridge.early``), on the raw
request and the stored rows before the runtime loads, and by the runtime path
(``nonoka.bridge.reconcile``, ``history``, ``next_call``), on validated models. When
the two disagree nothing fails — a turn just loses its early request — so every rule
they share is written once, here, on the standard library alone: on a role, a text, an
entry's metadata dict, a raw message dict. ``tests/bridge/test_early_dispatch.py``
holds the two paths to the same answers on generated histories.

Internal: this module's layout may change.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

ROLES = ("system", "user", "assistant", "tool")
"""The roles a message may have (``nonoka.state.messages.Role``)."""


def nonokas_own(meta: Mapping[str, Any]) -> bool:
    """Whether an entry is one nonoka added and the host never saw: a compaction summary
    or a repair note (kept in the conversation, left out of every comparison)."""
    return bool(meta) and bool(meta.get("summary") or meta.get("contract_repair"))


def is_summary(meta: Mapping[str, Any]) -> bool:
    """Whether an entry is a compaction summary nonoka wrote."""
    return bool(meta) and bool(meta.get("summary"))


def plain(role: str, meta: Mapping[str, Any]) -> bool:
    """Whether the host's copy of an entry is exactly its wire message: not nonoka's
    own, and no field the wire shape leaves out (a call id on a non-tool message,
    calls on a non-assistant one)."""
    return not meta or not (nonokas_own(meta)
                            or (role != "tool" and meta.get("tool_call_id") is not None)
                            or (role != "assistant" and meta.get("tool_calls")))


def normalised(text: str) -> str:
    """A message's text as compared: runs of whitespace are one space (hosts re-wrap)."""
    return " ".join(text.split())


def comparison_key(role: str, content: str, call_ids: Sequence[str] = (),
                   tool_call_id: str | None = None) -> tuple[str, ...]:
    """What must agree for two messages to be "the same message" of a conversation:
    the role, the normalised text, and the tool-call ids that tie calls to results."""
    if role == "assistant":
        return ("assistant", normalised(content), *call_ids)
    if role == "tool":
        return ("tool", tool_call_id or "", normalised(content))
    return (role, normalised(content))


def well_formed(message: object) -> bool:
    """Whether the runtime's validation (``nonoka.state.messages.Message``) accepts a
    raw message dict: a known role, text content, a tool message's call id, and tool
    calls with string ids, names and arguments."""
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        return False
    call_id, calls = message.get("tool_call_id"), message.get("tool_calls")
    if not isinstance(message.get("content", ""), str) or not isinstance(call_id, str | None):
        return False
    if message["role"] == "tool" and not call_id:
        return False
    return calls is None or (isinstance(calls, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("name"), str)
        and isinstance(c.get("arguments", ""), str) for c in calls))


def stored_key(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """``comparison_key`` of a stored entry row (``{"role", "content", "metadata"}``)."""
    meta = entry.get("metadata") or {}
    call_id = meta.get("tool_call_id")
    return comparison_key(entry["role"], entry.get("content") or "",
                          [str(c.get("id", "")) for c in meta.get("tool_calls") or []],
                          None if call_id is None else str(call_id))


def hosted_key(message: Mapping[str, Any]) -> tuple[str, ...]:
    """``comparison_key`` of a host's raw message dict."""
    return comparison_key(message["role"], message.get("content") or "",
                          [c["id"] for c in message.get("tool_calls") or []],
                          message.get("tool_call_id"))


def same_history(entries: Sequence[Mapping[str, Any]],
                 messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a host's history (raw messages) is the stored conversation (entry rows),
    message for message by ``comparison_key``, system prompts and nonoka's own entries
    aside. Two conversations that began alike, or one the host edited (a pruned tool
    output), differ."""
    mine = [stored_key(e) for e in entries
            if e["role"] != "system" and not nonokas_own(e.get("metadata") or {})]
    theirs = [hosted_key(m) for m in messages if m["role"] != "system"]
    return mine == theirs


def leading_system(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text of the system messages a conversation starts with (entry rows or raw
    messages): the instructions a host gives every step."""
    out = []
    for item in items:
        if item.get("role") != "system":
            break
        out.append(item.get("content") or "")
    return out


def same_instructions(entries: Sequence[Mapping[str, Any]],
                      messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the host's system messages are the stored ones: when they are not, the
    runtime replaces the stored ones first (``history._with_host_system``), so a body
    built from the stored rows would not be the one it sends."""
    return leading_system(entries) == leading_system(messages)
