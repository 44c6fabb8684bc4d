"""Early dispatch: send a turn's model request before the runtime has even loaded.

A ``nonoka bridge`` process is spawned for every model step, and most of its start-up
goes into importing pydantic and the runtime. For the common steps — a new user message
in a session whose last turn finished, or the host's results for the tool calls a session
paused on — the request the runtime will send is known from the stored rows alone: the
stored conversation plus what the request adds. So after each such turn the bridge
stores a *next-call template* (table ``next_calls``): the request body around its
messages, a digest of the body for the stored conversation, and the conditions under
which the runtime would send exactly that — the same model, tools and limits, the same
user messages before the new ones, the expected kind of turn (and, for tool results,
the pending call ids), room left in the context budget.

``dispatch`` runs right after ``protocol_ack`` on the standard library only. It checks
the request against the template, rebuilds the stored conversation's wire messages from
the entry rows, verifies them against the digest, takes the session's lease and sends
the request (``nonoka.llm.inflight``). It returns a ``Dispatched`` handle that the turn
receives: the model adapter adopts the request in flight, and uses it only when its own
body is byte for byte the same (otherwise the early request is closed unread); the turn
keeps the lease under the same owner and settles the request when it ends. Anything
unexpected here means "do not dispatch", never an error.

What this module decides stays here; what it reads and writes goes through two optional
capabilities: the store's ``NextCallStore`` (``nonoka.store.next_calls``; the SQLite
engine keeps one) and the model's ``AdoptsInflight`` (``nonoka.llm.base``; the
OpenAI-compatible adapter has it). ``NONOKA_EARLY_DISPATCH=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from nonoka.protocol.frames import Purpose, RequestType
from nonoka.protocol.turns import joined_prompt, split_after_reply

if TYPE_CHECKING:
    from nonoka.llm.base import ChatModel
    from nonoka.llm.inflight import Inflight, Outcome
    from nonoka.session import Session
    from nonoka.store.base import SessionLeases
    from nonoka.store.next_calls import StoredNextCall
    from nonoka.store.project import ProjectStores
    from nonoka.tools import Tool

ENV_VAR = "NONOKA_EARLY_DISPATCH"
TEMPLATE_VERSION = 2
"""Bumped when the template's fields change; a row of another version is ignored."""


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_VAR, "").strip().lower() not in ("0", "false", "no", "off")


def digest(value: object) -> str:
    """A stable digest of a JSON value (keys sorted)."""
    return _sha256(json.dumps(value, sort_keys=True))


class NextTurn(NamedTuple):
    """A chat request that adds to a session it names: host tool results (in the order
    sent), a user prompt, or both — what the runtime appends before its model call."""

    session_id: str
    results: list[tuple[str, str]]
    """``(tool_call_id, content)`` of each tool message after the host's last assistant
    message."""
    prompt: str | None
    """The user messages after the host's last assistant message, joined
    (``nonoka.protocol.turns``)."""
    earlier_users: list[str]
    """The user messages before those, as the host resent them."""

    @property
    def kind(self) -> str:
        """Which template applies: the session answered (``prompt``) or is waiting for
        its host tool calls (``tool_results``)."""
        return "tool_results" if self.results else "prompt"

    def new_messages(self) -> list[dict[str, Any]]:
        """The wire messages the runtime appends for this turn, in its order."""
        from nonoka.llm.wire import wire_message

        messages = [wire_message("tool", content, None, call_id)
                    for call_id, content in self.results]
        if self.prompt is not None:
            messages.append(wire_message("user", self.prompt))
        return messages

    def new_tokens(self) -> int:
        """The token estimate of what the runtime appends (``nonoka.tokens``)."""
        from nonoka.tokens import entry_tokens

        texts = [content for _, content in self.results]
        return sum(entry_tokens(t) for t in [*texts, *([self.prompt] if self.prompt else [])])

    @classmethod
    def of(cls, request: Mapping[str, Any]) -> NextTurn | None:
        """The request as a turn that continues a named session, or ``None``.

        Only a request the runtime will accept qualifies: one its validation would
        refuse must not have cost a model request first.
        """
        session_id = request.get("session_id")
        messages = request.get("messages")
        if (request.get("type") != RequestType.CHAT
                or request.get("purpose", Purpose.CHAT) != Purpose.CHAT
                or request.get("new_session", False) is not False
                or not isinstance(session_id, str) or not session_id.strip()
                or not all(isinstance(request.get(k), str | None) for k in _OPTIONAL_TEXT)
                or not isinstance(messages, list) or not messages
                or not all(_well_formed(m) for m in messages)):
            return None
        before, tail = split_after_reply(messages)
        results = [(m["tool_call_id"], m.get("content", "")) for m in tail
                   if m["role"] == "tool"]
        prompt = joined_prompt(tail)
        if messages[-1]["role"] not in ("user", "tool") or not (results or prompt is not None):
            return None
        return cls(session_id, results, prompt,
                   [m.get("content", "") for m in before if m["role"] == "user"])


_OPTIONAL_TEXT = ("request_id", "conversation_key", "cwd", "model")
_ROLES = ("system", "user", "assistant", "tool")


def _well_formed(message: object) -> bool:
    """Whether the runtime's validation (``nonoka.messages.Message``) accepts ``message``."""
    if not isinstance(message, dict) or message.get("role") not in _ROLES:
        return False
    call_id, calls = message.get("tool_call_id"), message.get("tool_calls")
    if not isinstance(message.get("content", ""), str) or not isinstance(call_id, str | None):
        return False
    if message["role"] == "tool" and not call_id:
        return False
    return calls is None or (isinstance(calls, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("name"), str)
        and isinstance(c.get("arguments", ""), str) for c in calls))


def request_conditions(request: Mapping[str, Any]) -> dict[str, str]:
    """What of a request, besides its messages, shapes the model request."""
    return {"tools": digest(request.get("tools") or []),
            "limits": digest(request.get("limits"))}


# -- the next turn's request, before the runtime loads -------------------------------------


class Dispatched:
    """What ``dispatch`` did for a request: the session lease it took and the model
    request in flight. Handed to the turn that runs the request, which uses it once.

    A plain class, like the named tuples here: a dataclass's generated code would cost
    the early path's import."""

    __slots__ = ("inflight", "owner", "released", "session_id")

    def __init__(self, session_id: str, owner: str, inflight: Inflight) -> None:
        self.session_id = session_id
        self.owner = owner
        """The owner token of the lease dispatch took."""
        self.inflight = inflight
        self.released = False

    def lease_owner(self, session_id: str) -> str | None:
        """The owner token of the lease dispatch holds on ``session_id``, if it holds one.

        The turn takes the lease again with the same token, so the session stays held
        from before the model request until the turn ends.
        """
        return self.owner if session_id == self.session_id and not self.released else None

    def offer(self, model: object) -> None:
        """Let ``model`` answer from the request in flight, if it can adopt one (a model
        that cannot leaves it unused)."""
        from nonoka.llm.base import AdoptsInflight

        if isinstance(model, AdoptsInflight):
            model.adopt(self.inflight)

    async def release_lease(self, leases: SessionLeases) -> None:
        """Give back dispatch's lease; a no-op once given back (or after the turn, which
        held it with the same owner, released it)."""
        if not self.released:
            self.released = True
            await leases.release_lease(self.session_id, self.owner)

    def settle(self) -> Outcome | None:
        """Close the request if nobody claimed it; what became of it (once)."""
        return self.inflight.settle()


def dispatch(request: Mapping[str, Any]) -> Dispatched | None:
    """Send the model request ``request`` will make, if its session's template says
    which; the handle of what was sent, or ``None``."""
    if not enabled(os.environ):
        return None
    turn = NextTurn.of(request)
    if turn is None or _several_prompts(request):
        return None
    try:
        return _dispatch(request, turn)
    except Exception:  # the runtime's own path reports every real problem
        return None


def _several_prompts(request: Mapping[str, Any]) -> bool:
    """Whether several user messages follow the host's last reply: the runtime stores
    them one entry each, so its request is not the one-prompt template's."""
    tail = split_after_reply(request["messages"])[1]
    return sum(1 for m in tail if m["role"] == "user") > 1


def _dispatch(request: Mapping[str, Any], turn: NextTurn) -> Dispatched | None:
    from nonoka.config import configured_model
    from nonoka.llm.inflight import Inflight
    from nonoka.llm.wire import (
        DEFAULT_BASE_URL,
        DEFAULT_TIMEOUT,
        Endpoint,
        check_key,
        entry_wire_message,
        request_headers,
        resolve_target,
    )
    from nonoka.store.lease_terms import DEFAULT_TTL, new_lease_owner
    from nonoka.store.project import database_url_from_env, open_next_call_store

    cwd = Path(str(request.get("cwd") or os.getcwd()))
    store = open_next_call_store(cwd, database_url_from_env())
    if store is None:
        return None
    try:
        spec = configured_model(cwd, request.get("model") or None)
        target = resolve_target(spec, os.environ)
        endpoint = Endpoint.parse(target.base_url or DEFAULT_BASE_URL)
        check_key(endpoint, target.api_key)
        found = store.load_next_call(turn.session_id, entries=False)
        if found is None:
            return None
        template = json.loads(found.template)
        if not _expects(template, found, turn) or not _fits(template, request, turn, spec):
            return None
        head, tail = template["head"], template["tail"]
        # The host resends the stored conversation: when its copy is byte for byte the
        # one the template was built from, the body comes from the request alone, and the
        # stored entries are neither read nor decoded.
        stored = _resent(request["messages"])
        if _sha256(head + ", ".join(stored) + tail) != template["digest"]:
            again = store.load_next_call(turn.session_id)
            if again is None or again.revision != found.revision:
                return None
            stored = [json.dumps(entry_wire_message(json.loads(e))) for e in again.entries]
            if _sha256(head + ", ".join(stored) + tail) != template["digest"]:
                return None
        owner = new_lease_owner()
        # Held from now on; the checkpoint must still be the one the body was built from.
        if not store.lease_at_revision(turn.session_id, found.revision, owner, DEFAULT_TTL):
            return None
    finally:
        store.close()
    body = head + ", ".join([*stored, *map(json.dumps, turn.new_messages())]) + tail
    inflight = Inflight()
    inflight.start(endpoint, body.encode(), request_headers(target.api_key), DEFAULT_TIMEOUT)
    return Dispatched(turn.session_id, owner, inflight)


def _resent(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The wire messages of the host's copy of the stored conversation: its history
    before the turn's new messages (already checked well formed), each JSON-encoded."""
    from nonoka.llm.wire import wire_message

    tail = split_after_reply(messages)[1]
    return [json.dumps(wire_message(m["role"], m.get("content", ""), m.get("tool_calls") or None,
                                    m.get("tool_call_id")))
            for m in messages[:len(messages) - len(tail)]]


def _expects(template: dict[str, Any], found: StoredNextCall, turn: NextTurn) -> bool:
    """Whether the session waits for ``turn``: a prompt after a finished turn, or results
    for exactly the host calls it paused on."""
    return (template.get("v") == TEMPLATE_VERSION and template.get("kind") == turn.kind
            and found.status == _STATUS[turn.kind]
            and sorted(template["pending"]) == sorted(c for c, _ in turn.results))


def _fits(template: dict[str, Any], request: Mapping[str, Any], turn: NextTurn,
          spec: str) -> bool:
    """Whether the runtime would build the template's request for ``request``: the same
    model, tools, limits and earlier user messages, and room for what the turn adds."""
    headroom = template["headroom"]
    return (template["model"] == spec and template["users"] == digest(turn.earlier_users)
            and template["history"] == history_digest(
                split_after_reply(request["messages"])[0])
            and all(template[k] == v for k, v in request_conditions(request).items())
            and (headroom is None or turn.new_tokens() <= headroom))


def history_digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """A digest of a conversation as the host sees it (system prompts aside): roles,
    whitespace-normalised text, tool-call ids. Two conversations that began alike, or
    one the host edited (a pruned tool output), give different digests."""
    return digest([
        [m["role"], " ".join((m.get("content") or "").split()), m.get("tool_call_id") or "",
         [c["id"] for c in m.get("tool_calls") or []]]
        for m in messages if m["role"] != "system"])


_STATUS = {"prompt": "completed", "tool_results": "paused"}
"""The stored status of a session that expects each kind of turn."""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- after a turn: what the next one will send ---------------------------------------------


async def remember_next_call(stores: ProjectStores, session: Session, model: ChatModel,
                             tools: Sequence[Tool], request: Mapping[str, Any]) -> bool:
    """Store the template of ``session``'s next turn, when one can be known.

    ``session`` is the session as stored after the turn, ``tools`` and ``request`` what
    ran it. A finished turn expects a prompt; a turn paused for host tool calls expects
    their results. Returns whether a template was stored.
    """
    from nonoka.bridge.history import host_users
    from nonoka.llm.base import AdoptsInflight
    from nonoka.llm.wire import entry_wire_message
    from nonoka.messages import dangling_tool_calls
    from nonoka.state import SessionStatus
    from nonoka.store.next_calls import NextCallStore

    store = stores.checkpoints
    entries = session.memory.entries
    limits = session.limits
    if (not enabled(os.environ) or not isinstance(store, NextCallStore)
            or not isinstance(model, AdoptsInflight)
            or request.get("purpose") not in (None, Purpose.CHAT) or not entries
            or entries[-1].role != "assistant" or session.exceeded() is not None
            or limits.wall_timeout_seconds is not None
            or session.runtime.deadline_at is not None):
        return False
    pending = dangling_tool_calls(entries)[1]
    by_name = {t.name: t for t in tools}
    if session.status == SessionStatus.COMPLETED and not pending:
        kind = "prompt"
    elif session.status == SessionStatus.PAUSED and pending and all(
            c.name in by_name and by_name[c.name].executed_by == "host" for c in pending):
        kind = "tool_results"
    else:
        return False
    specs = [t.spec for t in tools]
    frame = model.frame(specs)
    budget = limits.max_context_tokens
    template = {
        "v": TEMPLATE_VERSION,
        "kind": kind,
        "pending": [c.id for c in pending],
        "model": model.name,
        "users": digest([e.content for e in host_users(entries)]),
        "history": history_digest([
            {"role": e.role, "content": e.content, "tool_call_id": e.tool_call_id,
             "tool_calls": e.metadata.get("tool_calls")}
            for e in entries if not e.metadata.get("summary")
            and not e.metadata.get("contract_repair")]),
        **request_conditions(request),
        "headroom": None if budget is None else budget - session.memory.total_tokens,
        "head": frame.head,
        "tail": frame.tail,
        # As ``_dispatch`` rebuilds it from stored rows: no message models are built.
        "digest": _sha256(frame.body([
            json.dumps(entry_wire_message({"role": e.role, "content": e.content,
                                           "metadata": e.metadata})) for e in entries])),
    }
    return store.save_next_call(session.session_id, session.revision, json.dumps(template))
