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
the entry rows, verifies them against the digest, and sends the request through
``nonoka.inflight``. The runtime then runs the turn as always; its model call uses the
early request only when its own body is byte for byte the same, and otherwise the early
request is closed unread. Anything unexpected here means "do not dispatch", never an
error. SQLite projects only; ``NONOKA_EARLY_DISPATCH=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nonoka.protocol.frames import Purpose, RequestType
from nonoka.protocol.turns import joined_prompt, split_after_reply

if TYPE_CHECKING:
    import sqlite3

    from nonoka.llm.base import ChatModel
    from nonoka.session import Session
    from nonoka.store.project import ProjectStores
    from nonoka.tools import Tool

ENV_VAR = "NONOKA_EARLY_DISPATCH"
TEMPLATE_VERSION = 1
"""Bumped when the template's fields change; a row of another version is ignored."""


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_VAR, "").strip().lower() not in ("0", "false", "no", "off")


def digest(value: object) -> str:
    """A stable digest of a JSON value (keys sorted)."""
    return _sha256(json.dumps(value, sort_keys=True))


@dataclass(frozen=True)
class NextTurn:
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
        from nonoka.wire import wire_message

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


def dispatch(request: Mapping[str, Any]) -> bool:
    """Send the model request ``request`` will make, if its session's template says
    which; returns whether a request was sent."""
    if _held is not None or not enabled(os.environ):
        return False
    turn = NextTurn.of(request)
    if turn is None:
        return False
    try:
        return _dispatch(request, turn)
    except Exception:  # the runtime's own path reports every real problem
        return False


def _dispatch(request: Mapping[str, Any], turn: NextTurn) -> bool:
    global _held
    import sqlite3

    from nonoka import inflight
    from nonoka.config import configured_model
    from nonoka.store.lease_terms import new_lease_owner
    from nonoka.store.project import database_target, database_url_from_env
    from nonoka.wire import (
        DEFAULT_BASE_URL,
        DEFAULT_TIMEOUT,
        Endpoint,
        check_key,
        request_headers,
        resolve_target,
    )

    cwd = Path(str(request.get("cwd") or os.getcwd()))
    engine, path = database_target(cwd, database_url_from_env())
    if engine != "sqlite" or not os.path.isfile(path):
        return False
    spec = configured_model(cwd, request.get("model") or None)
    target = resolve_target(spec, os.environ)
    endpoint = Endpoint.parse(target.base_url or DEFAULT_BASE_URL)
    check_key(endpoint, target.api_key)
    owner = new_lease_owner()
    db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None, timeout=0.2)
    try:
        if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            return False  # not a file the SQLite engine has set up
        db.execute("PRAGMA synchronous = NORMAL")  # as the engine writes (sqlite_db.py)
        found = _stored(db, path, turn)
        if found is None:
            return False
        template, entries, revision = found
        headroom = template["headroom"]
        if (template["model"] != spec or template["users"] != digest(turn.earlier_users)
                or any(template[k] != v for k, v in request_conditions(request).items())
                or (headroom is not None and turn.new_tokens() > headroom)):
            return False
        stored = [json.dumps(m) for m in entries]
        head, tail = template["head"], template["tail"]
        if _sha256(head + ", ".join(stored) + tail) != template["digest"]:
            return False
        if not _take_lease(db, turn.session_id, revision, owner):
            return False
    finally:
        db.close()
    _held = (turn.session_id, owner)
    body = head + ", ".join([*stored, *map(json.dumps, turn.new_messages())]) + tail
    inflight.start(endpoint, body.encode(), request_headers(target.api_key), DEFAULT_TIMEOUT)
    return True


def _stored(db: sqlite3.Connection, path: str, turn: NextTurn,
            ) -> tuple[dict[str, Any], list[dict[str, Any]], int] | None:
    """The session's current template, wire messages and revision, read in one
    transaction; ``None`` unless the session is free and ``turn`` is what it expects: a
    prompt after a finished turn, or results for exactly the host calls it waits for."""
    from nonoka.store.sqlite_schema import MIGRATIONS, check_known
    from nonoka.wire import entry_wire_message

    session_id = turn.session_id
    db.execute("BEGIN")
    try:
        if len(check_known(db, path)) != len(MIGRATIONS):  # a newer file raises
            return None
        row = db.execute(
            "SELECT n.template_json, c.state_json, c.entry_count, c.revision, l.expires_at "
            "FROM next_calls n JOIN checkpoints c "
            "ON c.session_id = n.session_id AND c.revision = n.revision "
            "LEFT JOIN session_leases l ON l.session_id = n.session_id "
            "WHERE n.session_id = ?", (session_id,)).fetchone()
        if row is None or (row[4] is not None and row[4] > time.time()):
            return None  # no current template, or another process runs the session
        template = json.loads(row[0])
        if (template.get("v") != TEMPLATE_VERSION or template.get("kind") != turn.kind
                or json.loads(row[1]).get("status") != _STATUS[turn.kind]
                or sorted(template["pending"]) != sorted(c for c, _ in turn.results)):
            return None
        entries = [entry_wire_message(json.loads(r[0])) for r in db.execute(
            "SELECT entry_json FROM session_entries WHERE session_id = ? ORDER BY seq",
            (session_id,))]
    finally:
        db.execute("COMMIT")
    return (template, entries, row[3]) if len(entries) == row[2] else None


_STATUS = {"prompt": "completed", "tool_results": "paused"}
"""The stored status of a session that expects each kind of turn."""


def _take_lease(db: sqlite3.Connection, session_id: str, revision: int, owner: str) -> bool:
    """Hold the session for this process, if it is still as read and nobody else has it."""
    from nonoka.store.lease_terms import DEFAULT_TTL, sqlite_acquire

    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT revision FROM checkpoints WHERE session_id = ?",
                         (session_id,)).fetchone()
        taken = row is not None and row[0] == revision and sqlite_acquire(
            db, session_id, owner, DEFAULT_TTL, time.time())
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return taken


_held: tuple[str, str] | None = None
"""``(session_id, owner)`` of the lease ``dispatch`` took for its request."""


def lease_owner(session_id: str) -> str | None:
    """The owner token of the lease dispatch holds on ``session_id``, if it holds one.

    The turn takes the lease again with the same token, so the session stays held from
    before the model request until the turn ends.
    """
    return _held[1] if _held is not None and _held[0] == session_id else None


async def release_lease(stores: ProjectStores) -> None:
    """Give back dispatch's lease; a no-op once the turn has taken and released it."""
    global _held
    if _held is not None:
        session_id, owner = _held
        _held = None
        await stores.leases.release_lease(session_id, owner)


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
    from nonoka.llm.openai import OpenAIChatModel
    from nonoka.messages import dangling_tool_calls
    from nonoka.state import SessionStatus
    from nonoka.store.sqlite import SQLiteCheckpointStore

    store = stores.checkpoints
    entries = session.memory.entries
    limits = session.limits
    if (not enabled(os.environ) or not isinstance(store, SQLiteCheckpointStore)
            or not isinstance(model, OpenAIChatModel)
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
        **request_conditions(request),
        "headroom": None if budget is None else budget - session.memory.total_tokens,
        "head": frame.head,
        "tail": frame.tail,
        "digest": _sha256(model.request_body(session.memory.messages(), specs).decode()),
    }
    return store.save_next_call(session.session_id, session.revision, json.dumps(template))
