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

import json

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    Identity = tuple[Any, ...]
    """``(role, tool_call_id, text, files, calls, reasoning)``: ``identity``'s answer."""

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


# -- message identity: what makes two messages "the same message" ----------------------------
#
# Written once, here, for every place that compares a host's history with a stored
# conversation: the reconciliation (``nonoka.bridge.reconcile``), the rule that finds a
# retried first turn (``nonoka.bridge.choose``), what a history brings to a session
# (``nonoka.bridge.history``) and the early dispatch's check of a host's copy
# (``same_history``). A message is all of its parts: its role, its text, its files (by
# their bytes), the tool calls it makes (id, name and arguments), the call a tool result
# answers, and its reasoning. What hosts re-encode is not a difference: whitespace in text
# and reasoning, the formatting of tool-call arguments (compared as JSON values), and
# provider metadata (opaque, sent back as received or not at all). Reasoning a host does
# not send back (a host that never asked for it) is not a difference either; reasoning it
# sends must be the stored reasoning.
#
# Each function takes a message's fields where they are: an entry's ``metadata`` dict,
# a host's raw message dict, or a ``Message`` model (its attributes); parts, reasoning
# and calls as dicts or models alike.

def _field(item: Any, name: str) -> Any:
    """A field of a dict, or an attribute of a model."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _file(part: Any) -> tuple[str, str] | None:
    """A file part as compared: its media type and its bytes (the base64 text, which
    every store restores byte for byte; the stored digest when only that is at hand;
    else its URL). ``None`` for a text part."""
    if _field(part, "type") != "file":
        return None
    data = _field(part, "data")
    if data is None:
        media = _field(part, "media")
        data = "media:" + str(media) if media is not None else "url:" + str(
            _field(part, "url"))
    return str(_field(part, "media_type")), str(data)


def _reasoning(items: Any) -> str:
    """The reasoning of a message as compared: its texts, joined and normalised."""
    return normalised("\n".join(_texts(items)))


def _texts(items: Any) -> list[str]:
    return [str(_field(r, "text") or "") for r in items or ()]


def _call_id(role: str, fields: Any) -> str:
    call_id = _field(fields, "tool_call_id") if fields and role == "tool" else None
    return "" if call_id is None else str(call_id)


def _files(fields: Any) -> tuple[tuple[str, str], ...]:
    return _files_of(_field(fields, "parts") if fields else None)


def _files_of(parts: Any) -> tuple[tuple[str, str], ...]:
    return tuple(f for f in map(_file, parts) if f is not None) if parts else ()


def _calls(role: str, fields: Any) -> tuple[tuple[str, str, str], ...]:
    return _calls_of(_field(fields, "tool_calls") if fields and role == "assistant" else None)


def _calls_of(calls: Any) -> tuple[tuple[str, str, str], ...]:
    return tuple((str(_field(c, "id") or ""), str(_field(c, "name") or ""),
                  str(_field(c, "arguments") or "")) for c in calls) if calls else ()


def _details(fields: Any) -> tuple[Any, Any, Any, Any]:
    """A message's ``tool_call_id``, ``parts``, ``tool_calls`` and ``reasoning``."""
    if type(fields) is dict:
        get = fields.get
        return get("tool_call_id"), get("parts"), get("tool_calls"), get("reasoning")
    if fields is None:
        return _NOTHING
    return (getattr(fields, "tool_call_id", None), getattr(fields, "parts", None),
            getattr(fields, "tool_calls", None), getattr(fields, "reasoning", None))


_NOTHING = (None, None, None, None)


def identity(role: str, content: str, fields: Any) -> Identity:
    """What must agree (``agree``) for two messages to be "the same message" of a
    conversation. ``fields`` holds the message's ``parts``, ``reasoning``, ``tool_calls``
    and ``tool_call_id`` (an entry's metadata, a raw message, a ``Message``)."""
    reasoning = _field(fields, "reasoning") if fields and role == "assistant" else None
    return (role, _call_id(role, fields), normalised(content), _files(fields),
            _calls(role, fields), _reasoning(reasoning) if reasoning else "")


def agree(stored: Identity, hosted: Identity) -> bool:
    """Whether a stored message and a host's are the same message (``identity`` of each).
    Reasoning the host left out agrees with any."""
    return (stored[:4] == hosted[:4] and _same_calls(stored[4], hosted[4])
            and (not hosted[5] or stored[5] == hosted[5]))


def _same_calls(mine: tuple[tuple[str, str, str], ...],
                theirs: tuple[tuple[str, str, str], ...]) -> bool:
    return len(mine) == len(theirs) and all(
        a[:2] == b[:2] and same_arguments(a[2], b[2]) for a, b in zip(mine, theirs, strict=True))


def _same_call_list(mine: Any, theirs: Any) -> bool:
    """``_same_calls`` of two lists of calls (dicts or models), without building tuples."""
    mine, theirs = mine or (), theirs or ()
    if len(mine) != len(theirs):
        return False
    for a, b in zip(mine, theirs, strict=True):
        if (str(_field(a, "id") or "") != str(_field(b, "id") or "")
                or str(_field(a, "name") or "") != str(_field(b, "name") or "")
                or not same_arguments(str(_field(a, "arguments") or ""),
                                      str(_field(b, "arguments") or ""))):
            return False
    return True


def same_message(role: str, content: str, fields: Any,
                 hosted_role: str, hosted_content: str, hosted_fields: Any) -> bool:
    """``agree(identity(...), identity(...))``, computed only as far as needed: the text
    is compared as it is before it is normalised, and each other part only when either
    message has it (the hot loop of a comparison)."""
    if role != hosted_role or (content != hosted_content
                               and normalised(content) != normalised(hosted_content)):
        return False
    call_id, parts, calls, _ = mine = _details(fields)
    hosted_call_id, hosted_parts, hosted_calls, told = _details(hosted_fields)
    if role == "tool" and str(call_id or "") != str(hosted_call_id or ""):
        return False
    if (parts or hosted_parts) and _files_of(parts) != _files_of(hosted_parts):
        return False
    if role != "assistant":
        return True
    if (calls or hosted_calls) and not _same_call_list(calls, hosted_calls):
        return False
    if not told or _texts(mine[3]) == _texts(told):
        return True
    told_text = _reasoning(told)
    return not told_text or _reasoning(mine[3]) == told_text


def same_arguments(mine: str, theirs: str) -> bool:
    """Whether two tool-call argument texts are the same arguments: the same text, or
    the same JSON value (a host parses what the model wrote and writes it again)."""
    return mine == theirs or _arguments(mine) == _arguments(theirs)


def _arguments(text: str) -> str:
    """Tool-call arguments as compared: their JSON value, keys sorted (a number with
    no fraction as an integer, as JavaScript writes it; an argument text that is not
    JSON, which a host may send back as a JSON string, as that text)."""
    value: Any = text
    for _ in range(2):
        if not isinstance(value, str):
            break
        if not value.strip():
            return "{}"
        try:
            value = json.loads(value, parse_float=_number)
        except ValueError:
            return normalised(value)
    if isinstance(value, str):
        return normalised(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _number(text: str) -> float | int:
    number = float(text)
    return int(number) if number.is_integer() and abs(number) < 2 ** 53 else number


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


def stored_identity(entry: Mapping[str, Any]) -> Identity:
    """``identity`` of a stored entry row (``{"role", "content", "metadata"}``)."""
    return identity(entry["role"], entry.get("content") or "", entry.get("metadata") or {})


def hosted_identity(message: Mapping[str, Any]) -> Identity:
    """``identity`` of a host's raw message dict."""
    return identity(message["role"], message.get("content") or "", message)


def same_history(entries: Sequence[Mapping[str, Any]],
                 messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a host's history (raw messages) is the stored conversation (entry rows),
    message for message (``agree``), system prompts and nonoka's own entries aside. Two
    conversations that began alike, or one the host edited (a pruned tool output, a
    file sent again smaller), differ."""
    mine = [e for e in entries
            if e["role"] != "system" and not nonokas_own(e.get("metadata") or {})]
    theirs = [m for m in messages if m["role"] != "system"]
    return len(mine) == len(theirs) and all(
        same_message(e["role"], e.get("content") or "", e.get("metadata") or {},
                     m["role"], m.get("content") or "", m)
        for e, m in zip(mine, theirs, strict=True))


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
