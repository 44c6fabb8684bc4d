"""What a host's history brings to the session it continues, edits or branched into.

``nonoka.bridge.reconcile`` classifies the history against the stored conversation;
this module turns that into the turn's input: the prompt, the host tool results, the
messages stored before them, and — when the host edited the conversation — the version
the model sees from now on. A resent tail that is already stored (the previous process
died after saving it, or the turn failed) is recognised and not added twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nonoka.bridge.entry_rules import nonokas_own, same_message
from nonoka.bridge.reconcile import Lineage, Reconciliation
from nonoka.protocol.turns import joined_prompt, split_after_reply
from nonoka.state.entries import MemoryEntry, dangling_tool_calls
from nonoka.state.messages import Message, ToolResult
from nonoka.turn.service import TurnInput


def host_users(entries: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    """User entries that came from the host (not nonoka's repair notes or summaries)."""
    return [e for e in entries if e.role == "user" and not nonokas_own(e.metadata)]


def split_for_new_session(messages: Sequence[Message]) -> tuple[list[Message], str | None]:
    """History to seed a new session with, and the prompt to run (``None``: just resume).

    Every message but a trailing user one is seeded as it is, one entry each, so the
    host's next resend lines up with the stored conversation message by message.
    """
    if messages and messages[-1].role == "user":
        return list(messages[:-1]), messages[-1].content
    return list(messages), None


def turn_input(rec: Reconciliation, stored: Sequence[MemoryEntry],
               messages: Sequence[Message]) -> TurnInput:
    """What a request brings to a session its history continues or edits (or to the branch
    made for it), from ``rec``, its classification against ``stored``.

    Nothing the session holds is added twice: a message resent after a failed turn is
    already stored, so only what follows it is new. Messages before the prompt are stored
    one entry each; results for the session's pending host calls go in as results.
    """
    if rec.lineage is Lineage.UNRELATED:
        return _appended(stored, messages)
    if rec.lineage is Lineage.DIVERGED or not rec.new:
        # Nothing new, or what is new was stored by a process that died: carry the turn
        # on (retrying it if it failed) or, if it was answered, replay the answer.
        return _resumed(messages)
    replace: list[MemoryEntry] | None = None
    edit: dict[str, Any] | None = None
    base = list(stored)
    if rec.lineage is Lineage.EDITED and rec.host_view is not None:
        replace = [MemoryEntry.from_message(m) for m in rec.host_view]
        edit = _edit_record(rec, stored)
        base = replace
    instructed = _with_host_system(replace if replace is not None else stored, messages)
    if instructed is not None:
        replace, base = instructed, instructed
        edit = edit or {"reason": "system_prompt_changed", "positions": [], "original": [
            {"index": i, "role": "system", "content": e.content[:ORIGINAL_TEXT]}
            for i, e in enumerate(_leading_system(stored))]}
    before, tail = split_after_reply(rec.new)
    seed = list(before)
    if any(m.role == "tool" for m in tail):
        results = _results_for_pending(base, seed, tail)
        prompt = _prompt(tail)
        if results:
            if isinstance(prompt, Message):  # a prompt with files: its own entry
                return TurnInput("tool_results", None, tuple(results), seed=seed,
                                 replace=replace, edit=edit, prompt_message=prompt)
            return TurnInput("tool_results", prompt, tuple(results), seed=seed,
                             replace=replace, edit=edit)
        tail = [m for m in tail if m.role == "user"]
    if tail and tail[-1].role == "user":
        last = tail[-1]
        return TurnInput("prompt", last.content, seed=[*seed, *tail[:-1]],
                         replace=replace, edit=edit, prompt_message=whole_prompt(last))
    return TurnInput(reopen=True, seed=[*seed, *tail], replace=replace, edit=edit)


def _results_for_pending(base: Sequence[MemoryEntry], seed: Sequence[Message],
                         tail: Sequence[Message]) -> list[ToolResult]:
    """The tool messages of ``tail`` the session is given as results.

    A call is known by the entry that made it, not by its id alone: some servers number
    calls per answer (``call_0`` every time), so an id an earlier turn's result answered
    may be pending again. A message for a call the last answer made, and nothing answered
    since, is its result (once); one whose id only an earlier result answered is that
    result resent, and left out; any other is passed on, for the runner to refuse
    (``tool_result_mismatch``)."""
    entries = [*base, *(MemoryEntry.from_message(m) for m in seed)]
    waiting = {c.id for c in dangling_tool_calls(entries)[1]}
    answered = {e.tool_call_id for e in entries if e.role == "tool"}
    results: list[ToolResult] = []
    for message in tail:
        call_id = message.tool_call_id or ""
        if message.role != "tool":
            continue
        if call_id in waiting:
            waiting.discard(call_id)  # the first answer counts; a repeat is not one
        elif call_id in answered:
            continue
        results.append(ToolResult(tool_call_id=call_id, content=message.content,
                                  parts=message.parts, is_error=_failed(message)))
    return results


def whole_prompt(message: Message) -> Message | None:
    """The prompt as its own message, when it holds more than its text, so that its
    entry keeps it: files, or what a Messages API client's message says besides them
    (Anthropic's provider metadata: it sent its content as a string); ``None``: its
    text is all (another host's metadata on a prompt is not kept, as before)."""
    return message if message.parts or (message.provider_metadata or {}).get(
        "anthropic") else None


def _failed(message: Message) -> bool:
    """A tool message the host marked as a failed call (Anthropic's ``is_error``, which
    its provider metadata carries)."""
    sent = (message.provider_metadata or {}).get("anthropic") or {}
    return sent.get("is_error") is True


def _prompt(tail: Sequence[Message]) -> str | Message | None:
    """The user text that comes with tool results (the user messages joined), or the
    one user message itself when it carries files."""
    users = [m for m in tail if m.role == "user"]
    if len(users) == 1 and users[0].parts:
        return users[0]
    return joined_prompt(tail)


def _leading_system(items: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    out = []
    for entry in items:
        if entry.role != "system":
            break
        out.append(entry)
    return out


def _with_host_system(stored: Sequence[MemoryEntry],
                      messages: Sequence[Message]) -> list[MemoryEntry] | None:
    """The conversation with the host's system messages in place of the stored ones,
    when the host changed them (a new date, a project's notes, another agent's prompt):
    every step's instructions are the host's. ``None`` when they are the same."""
    host = []
    for message in messages:
        if message.role != "system":
            break
        host.append(message)
    kept = _leading_system(stored)
    if not host or [(m.content, m.parts) for m in host] == [
            (e.content, e.parts) for e in kept]:
        return None
    return [*(MemoryEntry.from_message(m) for m in host), *stored[len(kept):]]


def _resumed(messages: Sequence[Message]) -> TurnInput:
    return TurnInput(reopen=bool(messages) and messages[-1].role != "assistant")


def _appended(stored: Sequence[MemoryEntry], messages: Sequence[Message]) -> TurnInput:
    """A session chosen without its history in the request (a title session, a session
    named by a history with no answer yet): what follows the host's last answer is new,
    unless the stored conversation already ends with it (a process stored it and died)."""
    tail = split_after_reply(messages)[1]
    if any(m.role == "tool" for m in tail):
        return turn_input(Reconciliation(Lineage.CONTINUATION, len(stored), new=tail),
                          stored, messages)
    users = [m for m in tail if m.role == "user"]
    ending = list(stored[len(stored) - len(users):]) if users else []
    if not users or (len(ending) == len(users) and all(
            same_message(e.role, e.content, e.metadata, m.role, m.content, m)
            for e, m in zip(ending, users, strict=True))):
        return _resumed(messages)
    last = users[-1]
    return TurnInput("prompt", last.content, seed=[m for m in tail[:-1] if m.role != "system"],
                     prompt_message=whole_prompt(last))


ORIGINAL_TEXT = 2000
"""An edited entry's original text is kept in the timeline up to this many characters."""


def _edit_record(rec: Reconciliation, stored: Sequence[MemoryEntry]) -> dict[str, Any]:
    """The timeline's ``history_edited`` entry: why, where, and the entries as stored."""
    positions = rec.edited or [i for i, e in enumerate(stored) if e.role != "system"]
    return {"reason": str(rec.reason), "positions": positions, "original": [
        {"index": i, "role": stored[i].role, "content": stored[i].content[:ORIGINAL_TEXT],
         **({"tool_call_id": stored[i].tool_call_id} if stored[i].tool_call_id else {})}
        for i in positions]}
