"""Reconcile the history a host resends with a stored conversation: continue, edit, branch.

A host resends its whole history on every step, and that history is not always the
stored conversation plus something new. Hosts prune old tool outputs, replace a prefix
with a summary, undo to an earlier message, fork, or drop a message whose turn failed;
another front end may have added turns the host never saw. Every request is compared
with the stored conversation message by message and classified:

- ``continuation`` — the stored conversation, then new messages: append them;
- ``edited`` — the host changed the stored part in place (pruned tool outputs, a
  compaction summary instead of a prefix, an unanswered message replaced): the session
  continues, the model sees the host's version, the originals are kept in the timeline;
- ``diverged`` — the histories agree up to ``point`` and then differ (an undo, an edited
  earlier message, a fork): the turn continues in a branch that shares the first
  ``point`` entries;
- ``unrelated`` — not even the first message agrees: a different conversation.

Messages are compared by their identity (``nonoka.bridge.entry_rules.identity``: every
part of a message — text, files, tool calls, reasoning — ignoring what hosts re-encode,
such as whitespace and tool-call argument formatting), skipping what only one side has
(system prompts, nonoka's own summaries and repair notes). Nothing here touches
storage; the bridge acts on the result, and keeps a ``HostComparison`` between requests
so a long history is compared once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from nonoka.bridge.entry_rules import (
    agree,
    identity,
    is_summary,
    nonokas_own,
    normalised,
    same_message,
)
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message
from nonoka.state.prefix_memo import PrefixMemo

if TYPE_CHECKING:
    from nonoka.bridge.entry_rules import Identity as Key


class Lineage(StrEnum):
    """How a request's history relates to a stored conversation."""

    CONTINUATION = "continuation"
    EDITED = "edited"
    DIVERGED = "diverged"
    UNRELATED = "unrelated"


class EditReason(StrEnum):
    """Why a host's history differs from the stored one while continuing it."""

    TOOL_OUTPUT_PRUNED = "tool_output_pruned"
    HISTORY_COMPACTED = "history_compacted"
    UNANSWERED_REPLACED = "unanswered_replaced"


@dataclass(frozen=True)
class Reconciliation:
    """The classification of one request against one stored conversation.

    ``point`` is a stored entry index: for a continuation the number of stored entries,
    for a branch the number of entries the branch shares with the stored conversation.
    ``new`` is what the host adds after the part both sides share (or, for ``edited``,
    after the host's version of the stored part, ``host_view``). ``shared`` counts the
    host messages (system ones excluded) both sides agree on, the measure of a candidate.
    """

    lineage: Lineage
    point: int
    new: list[Message] = field(default_factory=list)
    host_view: list[Message] | None = None
    reason: EditReason | None = None
    edited: list[int] = field(default_factory=list)
    shared: int = 0

    @property
    def ahead(self) -> bool:
        """Whether the host holds answers the store lacks (the store lost turns)."""
        return any(m.role in ("assistant", "tool") for m in self.new)


def _same(entry: MemoryEntry, message: Message) -> bool:
    """Whether a stored entry and a host's message are the same message
    (``entry_rules.same_message``)."""
    return same_message(entry.role, entry.content, entry.metadata,
                        message.role, message.content, message)


class HostComparison:
    """Where the last comparison of a host's history with a stored conversation
    stopped: a long-lived bridge compares the same two, one exchange longer, every turn.
    The bridge's entry point keeps one; ``classify`` without it compares from the start,
    with the same answer."""

    __slots__ = ("hosted", "repeats")

    def __init__(self) -> None:
        self.hosted: PrefixMemo[list[Message]] = PrefixMemo()
        """The host's messages without its system prompts (``_hosted``)."""
        self.repeats: PrefixMemo[int] = PrefixMemo()
        """How many host messages the stored conversation last read repeated."""


def _hosted(messages: Sequence[Message], memo: HostComparison | None) -> list[Message]:
    """The host's messages without its system prompts; a history that extends the one
    the last call filtered is filtered only from where that one ended."""
    resumed = memo.hosted.resume(messages) if memo is not None else None
    start, kept = (0, []) if resumed is None else (resumed[0][0], resumed[1])
    hosted = [*kept, *(m for m in messages[start:] if m.role != "system")]
    if memo is not None:
        memo.hosted.keep(hosted, messages)
    return hosted


def _repeated(stored: Sequence[MemoryEntry], hosted: list[Message],
              memo: HostComparison | None) -> int | None:
    """How many host messages repeat the stored conversation, when they repeat all of it
    as stored, text for text (what nearly every request does); ``None`` when anything
    else may be going on, for the full comparison to settle (``classify`` gives the same
    answer either way). Goes on from where the last call stopped when both sides extend
    what it compared (``nonoka.state.prefix_memo``)."""
    count = len(hosted)
    resumed = memo.repeats.resume(stored, hosted) if memo is not None else None
    start, j = (0, 0) if resumed is None else (resumed[0][0], resumed[1])
    for entry in stored[start:]:
        role = entry.role
        if role == "system":
            continue
        meta = entry.metadata
        if meta and nonokas_own(meta):  # the test first: most entries have no metadata
            if is_summary(meta):
                return None
            continue
        if j == count:
            return None
        message = hosted[j]
        if role != message.role or entry.content != message.content:
            return None
        if (meta or message.parts or message.tool_calls or message.tool_call_id
                or message.reasoning) and not same_message(
                    role, entry.content, meta, role, message.content, message):
            return None
        j += 1
    if not (j or count):
        return None
    if memo is not None:
        memo.repeats.keep(j, stored, hosted[:j])
    return j


def _shape(key: Key) -> Key:
    """A tool result's identity without its output (text and files): what a prune
    leaves unchanged."""
    return key[:2]


def _agree_all(stored: Sequence[Key], hosted: Sequence[Key]) -> bool:
    return len(stored) == len(hosted) and all(map(agree, stored, hosted))


def content_digest(text: str) -> str:
    """A short digest of a message's normalised text (how summaries are recognised)."""
    return hashlib.sha256(normalised(text).encode()).hexdigest()[:32]


def _internal(entry: MemoryEntry) -> bool:
    """Entries only nonoka has: system prompts, its own summaries and repair notes."""
    return entry.role == "system" or nonokas_own(entry.metadata)


def _entry_key(entry: MemoryEntry) -> Key:
    return identity(entry.role, entry.content, entry.metadata)


def _message_key(message: Message) -> Key:
    return identity(message.role, message.content, message)


def classify(stored: Sequence[MemoryEntry], messages: Sequence[Message],
             summaries: Collection[str] = (), memo: HostComparison | None = None
             ) -> Reconciliation:
    """Classify ``messages`` (a host's history) against ``stored`` (a session's entries).

    ``summaries`` are digests (``content_digest``) of compaction summaries the host asked
    for in this conversation; an assistant message carrying one marks a compacted prefix.
    """
    hosted = _hosted(messages, memo)
    same = _repeated(stored, hosted, memo)
    if same is not None:
        return Reconciliation(Lineage.CONTINUATION, len(stored), new=hosted[same:],
                              shared=same)
    return compare(stored, messages, summaries)


def compare(stored: Sequence[MemoryEntry], messages: Sequence[Message],
            summaries: Collection[str] = ()) -> Reconciliation:
    """``classify`` without its shortcut for a history that repeats the stored one text
    for text: the whole comparison (``tests/bridge/test_reconcile.py`` holds the two
    equal on generated histories)."""
    hosted = [m for m in messages if m.role != "system"]
    positions: list[int] = []
    summarised = False
    for index, entry in enumerate(stored):
        meta = entry.metadata
        if nonokas_own(meta):
            summarised = summarised or is_summary(meta)
        elif entry.role != "system":
            positions.append(index)
    offset = 0
    if summarised:
        skeys = [_entry_key(stored[i]) for i in positions]
        offset = _compacted_offset(stored, positions, skeys,
                                   [_message_key(m) for m in hosted]) or 0
    limit = min(len(positions), len(hosted) - offset)
    p = 0
    while p < limit and _same(stored[positions[p]], hosted[offset + p]):
        p += 1
    if p == len(positions) and (positions or hosted[offset:]):
        return Reconciliation(Lineage.CONTINUATION, len(stored),
                              new=hosted[offset + p:], shared=p)
    skeys = [_entry_key(stored[i]) for i in positions]
    rkeys_seen = [_message_key(m) for m in hosted[offset:]]
    compacted = _host_compaction(hosted, summaries)
    if compacted is not None and compacted > offset + p:
        # The host replaced a prefix the store still holds with a summary it asked for.
        # A summary the stored conversation already holds is one more shared entry: a
        # divergence after it (an undo, a fork) is decided by where the histories part.
        # A summary in the user's words that ends the history (Codex compacting in the
        # middle of a turn) is what the model is asked to go on from: it is new.
        if compacted == len(hosted) and hosted[-1].role == "user":
            compacted -= 1
        return Reconciliation(Lineage.EDITED, len(stored), new=hosted[compacted:],
                              host_view=_with_system(messages, hosted[:compacted]),
                              reason=EditReason.HISTORY_COMPACTED, shared=p)
    pruned = _pruned(stored, positions, skeys, rkeys_seen, p)
    if pruned is not None:
        end = offset + len(skeys)
        return Reconciliation(Lineage.EDITED, len(stored), new=hosted[end:],
                              host_view=_with_system(messages, hosted[:end]),
                              reason=EditReason.TOOL_OUTPUT_PRUNED, edited=pruned, shared=p)
    if offset == 0 and p > 0 and _unanswered(stored, positions[p:]) and not any(
            m.role == "tool" for m in hosted[p:p + 1]):
        return Reconciliation(Lineage.EDITED, len(stored), new=hosted[p:],
                              host_view=_with_system(messages, hosted[:p]),
                              reason=EditReason.UNANSWERED_REPLACED,
                              edited=positions[p:], shared=p)
    if p == 0:
        return Reconciliation(Lineage.UNRELATED, 0)
    point = positions[p]  # the first stored host entry the request does not agree with
    return Reconciliation(Lineage.DIVERGED, point, new=hosted[offset + p:], shared=p)


def _compacted_offset(stored: Sequence[MemoryEntry], positions: list[int], skeys: list[Key],
                      rkeys: list[Key]) -> int | None:
    """Where the stored conversation starts in the host's, after nonoka compacted its own
    copy (its oldest entries replaced by a summary the host never saw)."""
    if not skeys or not any(is_summary(e.metadata) for e in stored):
        return None
    first = skeys[0]
    for start in range(len(rkeys)):
        if agree(first, rkeys[start]) and _agree_all(skeys, rkeys[start:start + len(skeys)]):
            return start
    return None


def _host_compaction(hosted: list[Message], summaries: Collection[str]) -> int | None:
    """The index after the last message that carries a known summary: an assistant
    message (OpenCode's), or a user message (Claude Code opens the conversation after a
    compaction with the summary in the user's words; ``nonoka.serve.claude_code``)."""
    if not summaries:
        return None
    for index in range(len(hosted) - 1, -1, -1):
        message = hosted[index]
        if message.role in ("assistant", "user") and \
                content_digest(message.content) in summaries:
            return index + 1
    return None


def _pruned(stored: Sequence[MemoryEntry], positions: list[int], skeys: list[Key],
            rkeys: list[Key], p: int) -> list[int] | None:
    """Stored entry indexes whose tool output the host replaced, when that is the only
    difference; ``None`` otherwise."""
    if len(rkeys) < len(skeys):
        return None
    edited: list[int] = []
    for i in range(p, len(skeys)):
        if agree(skeys[i], rkeys[i]):
            continue
        role = stored[positions[i]].role
        if role != "tool" or _shape(skeys[i]) != _shape(rkeys[i]):
            return None
        edited.append(positions[i])
    return edited or None


def _unanswered(stored: Sequence[MemoryEntry], rest: list[int]) -> bool:
    """Whether the stored entries at ``rest`` are user messages nothing answered."""
    return bool(rest) and all(stored[i].role == "user" for i in rest) and not any(
        e.role == "assistant" for e in stored[rest[0]:])


def _with_system(messages: Sequence[Message], hosted: list[Message]) -> list[Message]:
    """The host's version of the conversation: its leading system messages, then ``hosted``."""
    lead = []
    for message in messages:
        if message.role != "system":
            break
        lead.append(message)
    return lead + hosted
