"""The next-call template: after a turn, what the session's next turn will send.

Early dispatch (``nonoka.bridge.early``) sends a continuing turn's model request before
the runtime loads, from a template stored after the turn before: the request body
around its messages, the digest of the body for the stored conversation, whether that
conversation is plain (its host copy is exactly its wire messages), and the conditions
under which the runtime would send exactly that. This module writes the template, once
the turn is answered and the runtime is loaded; ``early`` only reads it, on the
standard library.

The digest is taken over what the turn's early request sent plus the entries added
since, when the runtime used that request and only appended to the conversation;
otherwise it goes on from where the last template's stopped (``memo``, kept by a
long-lived bridge), or encodes every stored entry.

Internal: this module's layout may change.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nonoka.bridge.early import (
    TEMPLATE_VERSION,
    Dispatched,
    body_digest,
    enabled,
    new_digest,
    request_conditions,
    with_tail,
)
from nonoka.bridge.entry_rules import plain
from nonoka.llm.wire import file_parts
from nonoka.protocol.frames import Purpose

if TYPE_CHECKING:
    from nonoka.llm.base import CallOptions, ChatModel
    from nonoka.runtime.session import Session
    from nonoka.runtime.tools import Tool
    from nonoka.state.entries import MemoryEntry
    from nonoka.state.prefix_memo import PrefixMemo
    from nonoka.store.next_calls import NextCallStore

async def remember_next_call(store: NextCallStore | None, session: Session, model: ChatModel,
                             tools: Sequence[Tool], options: CallOptions | None,
                             request: Mapping[str, Any],
                             early: Dispatched | None = None, *,
                             memo: PrefixMemo[tuple[str, Any, bool, int]] | None = None,
                             wire: PrefixMemo[str] | None = None) -> bool:
    """Store the template of ``session``'s next turn, when one can be known.

    ``store`` is the project's next-call store (``None``: the engine keeps none),
    ``session`` is the session as stored after the turn, ``tools`` and ``request`` what
    ran it, ``early`` what dispatch sent for it. A finished turn expects a prompt; a turn
    paused for host tool calls expects their results. Returns whether a template was
    stored.
    """
    from nonoka.llm.base import AdoptsInflight
    from nonoka.state.entries import dangling_tool_calls
    from nonoka.state.session_state import SessionStatus

    entries = session.memory.entries
    limits = session.limits
    if (not enabled(os.environ) or store is None
            or not isinstance(model, AdoptsInflight)
            or request.get("purpose") not in (None, Purpose.CHAT) or not entries
            or entries[-1].role != "assistant" or session.exceeded() is not None
            or limits.wall_timeout_seconds is not None
            or session.runtime.deadline_at is not None):
        return False
    # When the turn only appended to what its early request sent, the calls that stored
    # conversation left open were exactly the ones this turn answered (``_expects``), so
    # only what came after it can leave calls open.
    reused = _reused(entries, session, early)
    pending = dangling_tool_calls(entries[early.stored:] if reused and early else entries)[1]
    by_name = {t.name: t for t in tools}
    if session.status == SessionStatus.COMPLETED and not pending:
        kind = "prompt"
    elif session.status == SessionStatus.PAUSED and pending and all(
            c.name in by_name and by_name[c.name].executed_by == "host" for c in pending):
        kind = "tool_results"
    else:
        return False
    if any(e.role == "tool" and file_parts(e.metadata) for e in entries):
        return False  # a tool result's files follow their run: left to the runtime
    frame = model.frame([t.spec for t in tools], options)
    budget = limits.max_context_tokens
    template = {
        "v": TEMPLATE_VERSION,
        "kind": kind,
        "pending": [c.id for c in pending],
        "model": model.name,
        **request_conditions(request),
        "headroom": None if budget is None else budget - session.memory.total_tokens,
        "head": frame.head,
        "tail": frame.tail,
        "generation": session.memory.generation,
        # As ``_dispatch`` rebuilds it from stored rows: no message models are built.
        **_conversation(entries, early if reused else None, frame.head, frame.tail, memo,
                        wire),
    }
    return store.save_next_call(session.session_id, session.revision, json.dumps(template))


def _plain(entry: MemoryEntry) -> bool:
    """``entry_rules.plain`` of an entry model."""
    return plain(entry.role, entry.metadata)


def _reused(entries: Sequence[MemoryEntry], session: Session,
            early: Dispatched | None) -> bool:
    """Whether this turn's model request was the early one and the memory was only
    appended to since (its generation is the same): then the conversation starts with
    the messages that request sent."""
    return (early is not None and early.outcome == "used" and len(entries) >= early.count
            and early.generation == session.memory.generation)


def _conversation(entries: Sequence[MemoryEntry], early: Dispatched | None, head: str,
                  tail: str, memo: PrefixMemo[tuple[str, Any, bool, int]] | None,
                  wire: PrefixMemo[str] | None) -> dict[str, Any]:
    """The template's ``digest`` of the next body (between ``head`` and ``tail``, the
    wire messages of ``entries``) and whether they are ``plain``.

    ``early``, when the conversation starts with what its request sent (``_reused``):
    those messages are encoded already and known plain or not, so only the entries after
    them are encoded and checked here. Without it (a long-lived bridge's later turns),
    the digest and the check go on from where the last template's stopped, when the
    conversation extends that one (``nonoka.state.prefix_memo``)."""
    if early is None:
        return _resumed_conversation(entries, head, tail, memo, wire)
    from nonoka.llm.wire import entry_wire_message

    start, known = early.count, early.messages
    plain = early.plain and all(_plain(e) for e in entries[early.stored:early.count])
    rest = entries[start:]
    encoded = json.dumps([entry_wire_message({"role": e.role, "content": e.content,
                                              "metadata": e.metadata}) for e in rest])[1:-1]
    plain = plain and all(_plain(e) for e in rest)
    if early.hashed is not None and early.hashed[0] == head:  # hashed as far as this
        hashed = early.hashed[1].copy()
        hashed.update(known[early.stored_text:].encode())
        if encoded:
            hashed.update((", " + encoded if known else encoded).encode())
        return {"plain": plain, "digest": with_tail(hashed, tail)}
    messages = ", ".join(part for part in (known, encoded) if part)
    return {"plain": plain, "digest": body_digest(head + messages + tail)}


def _resumed_conversation(entries: Sequence[MemoryEntry], head: str, tail: str,
                          memo: PrefixMemo[tuple[str, Any, bool, int]] | None,
                          wire: PrefixMemo[str] | None) -> dict[str, Any]:
    """``_conversation`` for a turn that sent no early request: the body's text is the
    adapter's (``wire_text``, resumed with ``wire``), its digest and plainness resumed
    with ``memo``."""
    from nonoka.llm.openai import wire_text

    messages = wire_text(entries, wire)
    resumed = memo.resume(entries) if memo is not None else None
    if resumed is not None and resumed[1][0] == head:
        (start,), (_, hashed, plain, length) = resumed
        hashed = hashed.copy()
    else:
        start, hashed, plain, length = 0, new_digest(head), True, 0
    hashed.update(messages[length:].encode())
    plain = plain and all(_plain(e) for e in entries[start:])
    if memo is not None:
        memo.keep((head, hashed, plain, len(messages)), entries)
    return {"plain": plain, "digest": with_tail(hashed, tail)}
