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
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nonoka.bridge.handler import BridgeHandler
from nonoka.protocol.frames import conversation_key
from nonoka.protocol.models import BaseEvent, ChatRequest
from nonoka.runtime.session import Session
from nonoka.serve.chat import owned, owner_scope, session_signal
from nonoka.serve.ids import parse_response_id
from nonoka.serve.record import Located, locate, stamp_of
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message
from nonoka.state.prefix_memo import ConversationPasses
from nonoka.store.project import ProjectStores
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


class LineDecision(BridgeHandler):
    """The bridge's decision chain alone, for one whole-history request: which session
    the turn runs in and what it brings there; ``start`` is the entry the response's
    input starts at once the decision is made."""

    def __init__(self, messages: list[Message], signal: str | None, project: Path,
                 spec: str, owner: str) -> None:
        request = ChatRequest(messages=messages, cwd=str(project), model=spec,
                              host_session_id=signal,
                              conversation_key=conversation_key(messages),
                              request_id=secrets.token_hex(8))
        super().__init__(owned(request, owner), _ignore, owner_scope=owner_scope(owner))
        self._args = (messages, signal, project, spec, owner)
        self._project = str(project)
        self.start = 0

    def again(self) -> LineDecision:
        """A new decision for the same request, on the same turn service: the session it
        chose changed before the turn could take it (another request's turn ran there)."""
        fresh = LineDecision(*self._args)
        fresh._turn = self._turn
        return fresh

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
