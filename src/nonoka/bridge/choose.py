"""Which stored conversation a request's history belongs to, and how it relates to it.

The decision chain (``nonoka.bridge.handler``) names the candidates — the session the
request names, then the sessions with its conversation key (branches share it), most
recently active first — and this module classifies the history against each
(``nonoka.bridge.reconcile``): the first candidate the history continues or edits wins;
otherwise the candidate sharing the longest prefix with it is the one to branch from.
Nothing here writes; the handler acts on the verdict.

It also keeps the digests of the compaction summaries a host asked for in a chat
session's index row, so a later request that starts from such a summary is recognised
as the same conversation, edited.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from nonoka.bridge.entry_rules import same_message
from nonoka.bridge.reconcile import (
    HostComparison,
    Lineage,
    Reconciliation,
    classify,
    content_digest,
)
from nonoka.runtime.session import Session
from nonoka.state.messages import Message
from nonoka.store.records import SessionIndex, SessionRecord

SUMMARIES_KEY = "compaction_summaries"
SUMMARIES_KEPT = 8
"""A chat session remembers the digests of its last few compaction summaries."""


@dataclass(frozen=True)
class Match:
    """A stored session and the classification of the request's history against it."""

    session: Session
    rec: Reconciliation

    @property
    def continues(self) -> bool:
        """Whether the turn goes on in this session itself (appended, edited or replayed)."""
        rec = self.rec
        if rec.lineage in (Lineage.CONTINUATION, Lineage.EDITED):
            return True
        # The host resent only part of what is stored, and what it lacks is the answer to
        # its last message (a process stored it and died before the host heard it).
        return rec.lineage is Lineage.DIVERGED and not rec.new and not any(
            e.role == "user" for e in self.session.memory.entries[rec.point:])

    @property
    def branchable(self) -> bool:
        """Whether a branch at ``rec.point`` is this conversation going another way.

        The histories must part at something the host said (a user message or a tool
        result) or where the host's history ends: a different *answer* at that point means
        the host's conversation never ran in this session (two chats that both began with
        "hi")."""
        rec = self.rec
        return rec.lineage is Lineage.DIVERGED and rec.shared > 0 and (
            not rec.new or rec.new[0].role in ("user", "tool"))


@dataclass(frozen=True)
class Verdict:
    """The candidate the history continues (``found``), else the one to branch from."""

    found: Match | None = None
    branch: Match | None = None


def summaries_of(record: SessionRecord | None) -> list[str]:
    """The digests of the compaction summaries recorded for a chat session."""
    if record is None:
        return []
    value = record.metadata.get(SUMMARIES_KEY)
    return [str(v) for v in value] if isinstance(value, list) else []


def judge(candidates: Sequence[tuple[Session, Sequence[str]]],
          messages: Sequence[Message], memo: HostComparison | None = None) -> Verdict:
    """Classify ``messages`` against each candidate (a session and its summary digests)."""
    branch: Match | None = None
    for session, summaries in candidates:
        match = Match(session, classify(session.memory.entries, messages, summaries, memo))
        if match.continues:
            return Verdict(found=match)
        if match.branchable and (branch is None or match.rec.shared > branch.rec.shared):
            branch = match
    return Verdict(branch=branch)


def unanswered_first_turn(session: Session, messages: Sequence[Message]) -> bool:
    """Whether ``session`` is a first turn that never got an answer, holding exactly the
    user messages of ``messages``, every part of each (a host retrying a failed first
    turn; the same words with another file are another turn)."""
    entries = [e for e in session.memory.entries if e.role != "system"]
    hosted = [m for m in messages if m.role != "system"]
    return bool(hosted) and len(entries) == len(hosted) and all(
        e.role == "user" and same_message(e.role, e.content, e.metadata,
                                          m.role, m.content, m)
        for e, m in zip(entries, hosted, strict=True))


def summary_digests(messages: Sequence[Message]) -> set[str]:
    """Digests of the assistant messages of a history (what a recorded summary may be)."""
    return {content_digest(m.content) for m in messages if m.role == "assistant"}


OWNER_SCOPE_KEY = "owner_scope"
"""Index-row metadata: the owner (a salted digest of an API key's owner, as ``nonoka
serve`` gives it) whose requests made the session; absent for the local owner's."""


async def compacted_sessions(index: SessionIndex, messages: Sequence[Message],
                             project: str, recent: int = 20,
                             owner_scope: str | None = None) -> list[str]:
    """Recently active chat sessions of ``project`` and of ``owner_scope`` one of whose
    recorded summaries the history carries.

    For a request after a compaction that lost its session id: the summary opens a
    history whose conversation key is no longer the session's. The rule reads what a
    history says, so it looks only at the sessions of the same project and owner: a
    summary another owner's client sends word for word never reaches that owner's line."""
    digests = summary_digests(messages)
    if not digests:
        return []
    rows = [r for r in await index.list_sessions(limit=recent * 5)
            if in_project(r, project) and r.metadata.get(OWNER_SCOPE_KEY) == owner_scope]
    return [r.session_id for r in rows[:recent] if digests.intersection(summaries_of(r))]


def in_project(record: SessionRecord, project: str) -> bool:
    """Whether a session belongs to the project ``project`` (a resolved directory): the
    directory its index row records (``cwd``) is that one. Several projects may share
    one database (a team's PostgreSQL schema); a rule that finds a session by what a
    history says, not by an id the host holds, looks only at the project's own."""
    recorded = record.metadata.get("cwd")
    if not isinstance(recorded, str) or not recorded:
        return False
    return recorded == project or os.path.realpath(recorded) == project


async def remember_summary(index: SessionIndex, chat_id: str, summary: str) -> bool:
    """Record a compaction summary's digest in the chat session's index row (bounded);
    ``False`` when there is no such chat session."""
    record = await index.get_session(chat_id)
    if record is None or record.purpose != "chat":
        return False
    kept = [d for d in summaries_of(record) if d != content_digest(summary)]
    kept = [*kept, content_digest(summary)][-SUMMARIES_KEPT:]
    await index.upsert_session(record.model_copy(update={
        "metadata": {**record.metadata, SUMMARIES_KEY: kept}, "last_active": time.time()}))
    return True
