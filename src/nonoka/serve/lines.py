"""A Responses request that brings its whole history, placed on a session line.

Codex (and the AI SDK with ``store: false``) never sends ``previous_response_id``: every
request carries the whole conversation. Such a history is placed exactly as a Chat
Completions history is: by the bridge's decision chain (``nonoka.bridge.handler``) — it
continues the session it extends, branches one where it parts from it (a rewind, an
edited message, a compacted history), or starts a new session. Only the decision is the
bridge's; the turn is the Responses API's own (its stamped answers, ids and events).

The client's own session id names the line first — Codex's ``session_id`` /
``session-id`` header, else ``client_metadata.session_id`` — then the names every
client has (``nonoka.serve.chat.session_signal``: ``x-nonoka-session``,
``prompt_cache_key``, ``user``). A name never decides alone against a history that
disagrees with it.

A compaction of a named line (Codex's remote compaction) runs in a session of its own
(``compaction_of`` the line's latest session), as Claude Code's does, so that session
keeps the whole conversation the summary stands for. The next request sends the
``compaction`` item back in place of that conversation: the item names the compaction's
response, hence its session and the line it compacted (``proven_summaries``: the same
owner's, the same client line, the summary the one that response answered), and only
for that line is the summary a known one, so the line is edited in place
(``history_compacted``) instead of branched. A summary's words alone pull no request
onto any line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nonoka.bridge.handler import BridgeHandler
from nonoka.bridge.reconcile import content_digest
from nonoka.protocol.frames import Purpose, conversation_key
from nonoka.protocol.models import BaseEvent, ChatRequest
from nonoka.runtime.session import Session
from nonoka.serve.chat import owned, owned_name, owner_scope, session_signal
from nonoka.serve.compaction import SUMMARY_PREFIX
from nonoka.serve.ids import parse_response_id
from nonoka.serve.keys import owner_of_record
from nonoka.serve.record import DELETED, Located, locate, stamp_of
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message
from nonoka.state.prefix_memo import ConversationPasses
from nonoka.store.project import ProjectStores
from nonoka.store.records import HostSessions, SessionIndex
from nonoka.turn.service import Opening, TurnInput, TurnService

CLIENT_HEADERS = ("session_id", "session-id")
"""The headers Codex names its thread with (older releases used the first)."""


def client_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """A Responses client's own session id: Codex's header, else the ``session_id`` of
    ``client_metadata``."""
    for name in CLIENT_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            return value
    metadata = body.get("client_metadata")
    named = metadata.get("session_id") if isinstance(metadata, dict) else None
    return named.strip() if isinstance(named, str) and named.strip() else None


def line_signal(headers: Mapping[str, str], body: Any) -> str | None:
    """The client's name for the line a whole-history request belongs to."""
    if not isinstance(body, dict):
        return None
    return session_signal(headers, body, client=(("codex", client_session(headers, body)),))


def answered_before(entries: Sequence[MemoryEntry]) -> Located | None:
    """The stored response that answered the history a request sends again (a client
    retrying after losing the stream): the answers after the conversation's last user
    or tool entry, when a response stamped them. Its answer is given again rather than
    asked for twice."""
    asked = max((n for n, e in enumerate(entries) if e.role in ("user", "tool")), default=-1)
    stamp = stamp_of(entries[asked + 1]) if asked + 1 < len(entries) else None
    point = parse_response_id(stamp["id"]) if stamp is not None else None
    found = locate(entries, point) if point is not None else None
    return found if found is not None and found.first == asked + 1 else None


def _ignore(event: BaseEvent) -> None:
    """The decision chain's events: the Responses API reports its own."""


def line_host(signal: str | None, owner: str) -> str | None:
    """The name a client's line is kept under for ``owner``, as ``nonoka.serve.chat.owned``
    makes it."""
    salt = owner_scope(owner)
    return owned_name(salt, signal) if signal and salt is not None else signal or None


def line_lock(host: str) -> str:
    """The name a client line's first session is made under, as a session's lock and
    lease are taken: two first requests of one line (a new Codex thread) decided at
    once would otherwise each start a session; the second, decided again under it,
    finds the first's."""
    return "line-" + hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()[:40]


async def latest_of_line(index: SessionIndex, host: str) -> str | None:
    """The session of the client line ``host`` that was active last (what a compaction
    of the line compacts), or ``None`` when nothing of the line is stored."""
    if not isinstance(index, HostSessions):
        return None
    rows = await index.find_by_host_session(host)
    return rows[0].session_id if rows else None


COMPACTION_OF = "compaction_of"
"""A compaction session's index metadata: the session of the line it compacted."""


async def proven_summaries(turn: TurnService, compactions: Sequence[tuple[str, str]],
                           host: str | None, owner: str) -> dict[str, list[str]]:
    """The line sessions the request's compaction items (``(response id, summary)``,
    as ``nonoka.serve.compaction.read_compaction`` reads them) were made for, each with
    the digest of the summary message the request carries.

    An item counts only when its response is a compaction ``owner`` made (not deleted),
    of a session of this very client line ``host``, and its summary is the one that
    response answered: another owner's item, another line's, or a summary edited on the
    way names no line."""
    proven: dict[str, list[str]] = {}
    if host is None:
        return proven
    index = turn.index
    for response_id, summary in compactions:
        point = parse_response_id(response_id)
        record = await index.get_session(point.session_id) if point is not None else None
        if point is None or record is None or record.purpose != Purpose.COMPACTION:
            continue
        metadata = record.metadata
        line = metadata.get(COMPACTION_OF)
        if owner_of_record(metadata) != owner or response_id in (metadata.get(DELETED) or ()) \
                or not isinstance(line, str):
            continue
        compacted = await index.get_session(line)
        if compacted is None or compacted.host_session_id != host:
            continue
        session = await turn.load(point.session_id)
        found = locate(session.memory.entries, point) if session is not None else None
        if found is None or "".join(e.content for e in found.entries[found.first:found.end]
                                    if e.role == "assistant") != summary:
            continue
        proven.setdefault(line, []).append(content_digest(SUMMARY_PREFIX + summary))
    return proven


class LineDecision(BridgeHandler):
    """The bridge's decision chain alone, for one whole-history request: which session
    the turn runs in and what it brings there; ``start`` is the entry the response's
    input starts at once the decision is made.

    ``compaction_of``: the request is a compaction of that session's line, which runs in
    a session of its own. ``proven``: summary digests the request's own compaction items
    prove for sessions of its line (``proven_summaries``), judged as the summaries a
    host asked for there."""

    def __init__(self, messages: list[Message], signal: str | None, project: Path,
                 spec: str, owner: str, *, compaction_of: str | None = None,
                 proven: Mapping[str, Sequence[str]] | None = None) -> None:
        request = ChatRequest(messages=messages, cwd=str(project), model=spec,
                              host_session_id=signal,
                              conversation_key=conversation_key(messages),
                              purpose=Purpose.COMPACTION if compaction_of else Purpose.CHAT,
                              session_id=compaction_of,
                              request_id=secrets.token_hex(8))
        super().__init__(owned(request, owner), _ignore, owner_scope=owner_scope(owner))
        self._args = (messages, signal, project, spec, owner)
        self._project = str(project)
        self.compaction_of = compaction_of
        self.proven: Mapping[str, Sequence[str]] = proven or {}
        self.start = 0

    def again(self) -> LineDecision:
        """A new decision for the same request, on the same turn service: the session it
        chose changed before the turn could take it (another request's turn ran there)."""
        messages, signal, project, spec, owner = self._args
        fresh = LineDecision(messages, signal, project, spec, owner,
                             compaction_of=self.compaction_of, proven=self.proven)
        fresh._turn = self._turn
        return fresh

    async def _candidates(self, named: Session | None,
                          ids: list[str]) -> list[tuple[Session, list[str]]]:
        """The chain's candidates, with the summaries this request proves for them."""
        found = await super()._candidates(named, ids)
        if not self.proven:
            return found
        out = []
        for session, summaries in found:
            extra = [d for d in self.proven.get(session.session_id, ()) if d not in summaries]
            if extra:
                summaries = [*summaries, *extra]
                self._summaries_by_id[session.session_id] = summaries
            out.append((session, summaries))
        return out

    def service(self, stores: ProjectStores, passes: ConversationPasses, title: str,
                metadata: Mapping[str, Any]) -> TurnService:
        """The turn service the decision reads and the turn runs with; a new session's
        index row keeps what the chain finds lines by (the conversation key, the
        client's name, the project)."""
        turn = TurnService(stores, title=title, passes=passes, metadata={
            **self._metadata(Path(self._project)), **metadata})
        self._turn = turn
        return turn

    async def choose(self) -> Opening:
        """The decision chain's opening, with ``start`` worked out from the session it
        chose as it is now (the plan is made again under the lease if it changed)."""
        opening = await self._decide()
        chosen = opening.session
        if isinstance(chosen, str):
            chosen = await self.turn.load(chosen)
        if chosen is None:
            self.start = 0
            return opening
        planned = opening.plan if isinstance(opening.plan, TurnInput) else opening.plan(chosen)
        self.start = len(planned.replace) if planned.replace is not None else \
            len(chosen.memory.entries)
        seen = (chosen.session_id, chosen.revision)

        def plan(now: Session) -> TurnInput:
            if (now.session_id, now.revision) == seen:
                return planned
            return self._plan(now)

        return dataclasses.replace(opening, session=chosen, plan=plan)
