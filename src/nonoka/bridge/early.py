"""Early dispatch: send a turn's model request before the runtime has even loaded.

A ``nonoka bridge`` process is spawned for every model step, and most of its start-up
goes into importing pydantic and the runtime. For the common steps — a new user message
in a session whose last turn finished, or the host's results for the tool calls a session
paused on — the request the runtime will send is known from the stored rows alone: the
stored conversation plus what the request adds. So after each such turn the bridge
stores a *next-call template* (table ``next_calls``): the request body around its
messages, a digest of the body for the stored conversation, whether the host's copy of
that conversation is exactly its wire messages (``plain``: no summaries or notes the host
never saw), and the conditions under which the runtime would send exactly that — the
same model, tools and limits, the expected kind of turn (and, for tool results, the
pending call ids), room left in the context budget.

``dispatch`` runs right after ``protocol_ack`` on the standard library only. It checks
the request against the template and, in one pass over the host's resent history,
checks every message the way the runtime's validation will and encodes it in wire
shape. When those bytes are the ones the template's digest was taken over and the
conversation is plain (the common case), the body comes from the request alone and the
stored rows are not even read; otherwise the body is rebuilt from the rows, which must
also show the same conversation the host sent (the same user messages, roles, text and
tool-call ids). Then it takes the session's lease and sends the request
(``nonoka.llm.inflight``). It returns a ``Dispatched`` handle that the turn receives: the
model adapter adopts the request in flight, and uses it only when its own body is byte
for byte the same (otherwise the early request is closed unread); the turn keeps the
lease under the same owner and settles the request when it ends. Anything unexpected
here means "do not dispatch", never an error.

After the turn, the next template's digest is taken over what this turn's request sent
plus the entries added since, when the runtime used the early request and only appended
to the conversation; only otherwise is every stored entry encoded again.

What this module decides stays here; what it reads and writes goes through two optional
capabilities: the store's ``NextCallStore`` (``nonoka.store.next_calls``; the SQLite
engine keeps one) and the model's ``AdoptsInflight`` (``nonoka.llm.base``; the
OpenAI-compatible adapter has it). ``NONOKA_EARLY_DISPATCH=0`` turns it off.
"""

from __future__ import annotations

import _thread
import json
import os

try:  # see ``body_digest``
    from _blake2 import blake2b as _blake2b
except ImportError:  # pragma: no cover - an interpreter without the module
    from hashlib import blake2b as _blake2b

from nonoka.bridge.entry_rules import (
    nonokas_own,
    same_history,
    same_instructions,
    well_formed,
)
from nonoka.protocol.frames import Purpose, RequestType
from nonoka.protocol.turns import joined_prompt, split_after_reply

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: this module's import budget
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from nonoka.llm.inflight import Inflight, Outcome
    from nonoka.runtime.session import Session
    from nonoka.state.prefix_memo import PrefixMemo
    from nonoka.store.next_call_row import StoredNextCall
    from nonoka.store.next_calls import ClosableNextCallStore, NextCallStore
    from nonoka.turn.service import TurnService

ENV_VAR = "NONOKA_EARLY_DISPATCH"
TEMPLATE_VERSION = 3
"""Bumped when the template's fields change; a row of another version is ignored."""


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_VAR, "").strip().lower() not in ("0", "false", "no", "off")


def digest(value: object) -> str:
    """A stable digest of a JSON value (keys sorted)."""
    return body_digest(json.dumps(value, sort_keys=True))


class NextTurn:
    """A chat request that adds to a session it names: host tool results (in the order
    sent), a user prompt, or both — what the runtime appends before its model call.

    A plain class: a named tuple would make the early path import ``typing``."""

    __slots__ = ("earlier_users", "history", "prompt", "results", "session_id")

    def __init__(self, session_id: str, results: list[tuple[str, str]], prompt: str | None,
                 earlier_users: list[str], history: list[str] | None) -> None:
        self.session_id = session_id
        self.results = results
        """``(tool_call_id, content)`` of each tool message after the host's last
        assistant message."""
        self.prompt = prompt
        """The user messages after the host's last assistant message, joined
        (``nonoka.protocol.turns``)."""
        self.earlier_users = earlier_users
        """The user messages before those, as the host resent them."""
        self.history = history
        """The wire messages of the host's history before those, each JSON-encoded, or
        ``None`` when a message carries what the wire shape leaves out (then only the
        stored rows can show the history is the session's)."""

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
        """The token estimate of what the runtime appends (``nonoka.state.tokens``)."""
        from nonoka.state.tokens import entry_tokens

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
                or not isinstance(messages[-1], dict)
                or messages[-1].get("role") not in ("user", "tool")):
            return None
        before, tail = split_after_reply(messages)
        scanned = _scan(before)
        if scanned is None or not all(well_formed(m) and m.keys() <= _CLASSIC_KEYS
                                      for m in tail):
            return None  # what the turn adds carries files or metadata: the runtime's
        results = [(m["tool_call_id"], m.get("content", "")) for m in tail
                   if m["role"] == "tool"]
        prompt = joined_prompt(tail)
        if not (results or prompt is not None):
            return None
        return cls(session_id, results, prompt, *scanned)


_OPTIONAL_TEXT = ("request_id", "conversation_key", "cwd", "model")
_CLASSIC_KEYS = frozenset(("role", "content", "tool_calls", "tool_call_id"))
_PLAIN_KEYS = frozenset(("role", "content"))
_PLAIN_OPENING = {role: f'{{"role": "{role}", "content": '
                  for role in ("system", "user", "assistant")}
"""How ``json.dumps`` begins the wire message ``{"role": role, "content": ...}``."""


def _scan(messages: Sequence[object]) -> tuple[list[str], list[str] | None] | None:
    """One pass over the host's history: ``None`` if the runtime would refuse a message,
    else the user messages' text and each message's wire JSON as ``json.dumps`` writes
    it (``None`` for those when one holds a field the wire shape leaves out, such as a
    user message's ``tool_call_id``).

    Most messages are ``{"role", "content"}`` alone: they are checked and encoded inline
    (only their text goes through the JSON encoder, a third of the time a dict takes);
    the rest take the general checks."""
    from json.encoder import encode_basestring_ascii as quoted

    from nonoka.llm.wire import file_parts, wire_message

    plain = _scan_plain(messages)
    if plain is not None:
        return plain
    users: list[str] = []
    encoded: list[str] = []
    exact = True
    for m in messages:
        if type(m) is dict and m.keys() <= _PLAIN_KEYS:
            role, content = m.get("role"), m.get("content", "")
            opening = _PLAIN_OPENING.get(role) if type(role) is str else None
            if opening is not None and type(content) is str:
                if role == "user":
                    users.append(content)
                encoded.append(opening + quoted(content) + "}")
                continue
        if not well_formed(m):
            return None
        assert isinstance(m, dict)
        role, content, calls, call_id = (m["role"], m.get("content", ""), m.get("tool_calls"),
                                         m.get("tool_call_id"))
        if role == "tool" and file_parts(m):
            return None  # its files follow the run of results: left to the runtime
        if role == "user":
            users.append(content)
        exact = exact and not (call_id and role != "tool") and not (calls and role != "assistant")
        encoded.append(json.dumps(wire_message(role, content, calls or None, call_id, m)))
    return users, encoded if exact else None


def _scan_plain(messages: Sequence[Any]) -> tuple[list[str], list[str]] | None:
    """``_scan`` for a history of ``{"role", "content"}`` messages only (roles other than
    ``tool``), with C-level iteration only (``map``, ``compress``): a tenth of a
    microsecond a message. ``None`` when any message is not one of those."""
    from itertools import compress, repeat
    from json.encoder import encode_basestring_ascii as quoted

    try:
        if not all(map(_PLAIN_KEYS.issuperset, messages)):  # TypeError: not all dicts
            return None
        roles: list[str] = list(map(dict.get, messages, repeat("role")))  # type: ignore[arg-type]
        contents: list[str] = list(map(dict.get, messages, repeat("content"), repeat("")))
        if not (set(map(type, contents)) <= _STR and set(roles) <= _PLAIN_ROLES):
            return None
    except TypeError:  # a message that is not a dict, or a role that is not hashable
        return None
    encoded = list(map("".join, zip(map(_PLAIN_OPENING.__getitem__, roles),
                                    map(quoted, contents), repeat("}"))))
    return list(compress(contents, map(_USER.__eq__, roles))), encoded


_STR = frozenset((str,))
_USER = "user"
_PLAIN_ROLES = frozenset(_PLAIN_OPENING)



def request_conditions(request: Mapping[str, Any]) -> dict[str, str]:
    """What of a request, besides its messages, shapes the model request."""
    return {"tools": digest(request.get("tools") or []),
            "limits": digest(request.get("limits")),
            "options": digest(request.get("options"))}


# -- the next turn's request, before the runtime loads -------------------------------------


class Dispatched:
    """What ``dispatch`` did for a request: the session lease it took and the model
    request in flight. Handed to the turn that runs the request, which uses it once.

    A plain class, like ``NextTurn``: a dataclass's generated code would cost the early
    path's import."""

    __slots__ = ("count", "generation", "hashed", "inflight", "messages", "outcome", "owner",
                 "plain", "released", "session_id", "stored", "stored_text")

    def __init__(self, session_id: str, owner: str, inflight: Inflight, messages: str,
                 count: int, stored: int, template: dict[str, Any],
                 stored_text: int = 0) -> None:
        self.session_id = session_id
        self.owner = owner
        """The owner token of the lease dispatch took."""
        self.inflight = inflight
        self.messages = messages
        """The body's messages as sent: ``", "``-joined wire JSON."""
        self.count = count
        """How many messages that is."""
        self.stored = stored
        """How many of them are the stored conversation's."""
        self.stored_text = stored_text
        """The length of their text at the start of ``messages``."""
        self.hashed: tuple[str, Any] | None = None
        """The template's head and the BLAKE2b state over it and that text, when dispatch
        took it (the next template's digest goes on from it)."""
        self.generation: int | None = template.get("generation")
        """The memory generation of the stored conversation."""
        self.plain: bool = bool(template.get("plain"))
        """Whether the stored conversation is plain (see the module docstring)."""
        self.outcome: Outcome | None = None
        """What became of the request, once settled."""
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

    async def release_lease(self, turn: TurnService) -> None:
        """Give back dispatch's lease; a no-op once given back (or after the turn, which
        held it with the same owner, released it)."""
        if not self.released:
            self.released = True
            await turn.release_lease(self.session_id, self.owner)

    def share_text(self, session: Session, wire: PrefixMemo[str]) -> None:
        """Give the model adapter (through its ``wire`` memo, ``ConversationPasses``) the
        wire text dispatch sent for ``session``'s stored conversation (loaded under the
        lease), so the runtime's request does not encode it again: the template's digest
        matched it to that very conversation (same revision and generation), the same
        proof dispatch sent it on."""
        memory = session.memory
        if (session.session_id == self.session_id and self.stored_text
                and len(memory) == self.stored and memory.generation == self.generation):
            wire.keep(self.messages[:self.stored_text], memory.entries)

    def settle(self) -> Outcome | None:
        """Close the request if nobody claimed it; what became of it (once)."""
        outcome = self.inflight.settle()
        self.outcome = self.outcome or outcome
        return outcome


def dispatch(request: Mapping[str, Any],
             store: NextCallStore | None = None) -> Dispatched | None:
    """Send the model request ``request`` will make, if its session's template says
    which; the handle of what was sent, or ``None``. ``store``: the project's next-call
    store a warm bridge keeps open (left open here); without one the project's is opened
    for this call alone."""
    if not enabled(os.environ):
        return None
    turn = NextTurn.of(request)
    if turn is None or _several_prompts(request):
        return None
    try:
        return _dispatch(request, turn, store)
    except Exception:  # the runtime's own path reports every real problem
        return None


def _several_prompts(request: Mapping[str, Any]) -> bool:
    """Whether several user messages follow the host's last reply: the runtime stores
    them one entry each, so its request is not the one-prompt template's."""
    tail = split_after_reply(request["messages"])[1]
    return sum(1 for m in tail if m["role"] == "user") > 1


def _dispatch(request: Mapping[str, Any], turn: NextTurn,
              kept: NextCallStore | None) -> Dispatched | None:
    from nonoka.llm.host_headers import forwarded
    from nonoka.llm.inflight import Inflight
    from nonoka.llm.wire import (
        DEFAULT_BASE_URL,
        DEFAULT_TIMEOUT,
        Endpoint,
        check_key,
        request_headers,
        resolve_target,
    )
    from nonoka.store.lease_terms import DEFAULT_TTL, new_lease_owner

    cwd = str(request.get("cwd") or os.getcwd())
    spec = _model_spec(cwd, request.get("model") or None)
    target = resolve_target(spec, os.environ)
    endpoint = Endpoint.parse(target.base_url or DEFAULT_BASE_URL)
    check_key(endpoint, target.api_key)
    opened = _open_store(cwd) if kept is None else None
    store = kept or opened
    if store is None:
        return None
    try:
        found = store.load_next_call(turn.session_id, entries=False)
        if found is None:
            return None
        template = json.loads(found.template)
        if not _expects(template, found, turn) or not _fits(template, request, turn, spec):
            return None
        head, tail = template["head"], template["tail"]
        # The host resends the stored conversation: when its copy is byte for byte the
        # one the template was built from (and the stored one holds nothing the host
        # never saw), the body comes from the request alone, and the stored entries are
        # neither read nor decoded.
        history = turn.history
        stored = None if history is None else (", ".join(history), len(history))
        hashed = None  # over the head and the stored text: the next template goes on from it
        if stored is not None and template["plain"]:
            hashed = new_digest(head)
            hashed.update(stored[0].encode())
            if with_tail(hashed, tail) != template["digest"]:
                hashed = None
        if hashed is None or stored is None:
            stored = _from_rows(store, found, turn, request, template)
            if stored is None:
                return None
        owner = new_lease_owner()
        # Held from now on; the checkpoint must still be the one the body was built from.
        if not store.lease_at_revision(turn.session_id, found.revision, owner, DEFAULT_TTL):
            return None
        new = turn.new_messages()
        messages = ", ".join(part for part in (stored[0], json.dumps(new)[1:-1]) if part)
        inflight = Inflight()
        host = request.get("headers")
        extra = forwarded(host if isinstance(host, dict) else None, "openai")
        inflight.start(endpoint, (head + messages + tail).encode(),
                       request_headers(target.api_key, extra), DEFAULT_TIMEOUT)
        dispatched = Dispatched(turn.session_id, owner, inflight, messages,
                                stored[1] + len(new), stored[1], template, len(stored[0]))
        dispatched.hashed = None if hashed is None else (head, hashed)
        return dispatched
    finally:
        # Closing the last connection checkpoints SQLite's log (with an fsync): on a
        # worker thread, while the runtime loads, not before.
        if opened is not None:
            _thread.start_new_thread(opened.close, ())


def _model_spec(cwd: str, explicit: str | None) -> str:
    """``nonoka.config.configured_model``'s answer; its module (and ``pathlib``) is
    loaded only when neither the request nor the environment names the model."""
    spec = explicit or os.environ.get("NONOKA_MODEL", "").strip()
    if spec:
        return spec
    from pathlib import Path

    from nonoka.config import configured_model

    return configured_model(Path(cwd))


DEFAULT_FILE = os.path.join(".nonoka", "sessions.db")
"""``nonoka.store.project.DEFAULT_DATABASE``, without loading ``pathlib`` for it."""


def _open_store(cwd: str) -> ClosableNextCallStore | None:
    """The project's ``NextCallStore`` (``nonoka.store.project.open_next_call_store``);
    the default SQLite file is opened without loading ``pathlib``."""
    url = os.environ.get("NONOKA_DATABASE_URL", "").strip()
    if url:
        from pathlib import Path

        from nonoka.store.project import open_next_call_store

        return open_next_call_store(Path(cwd), url)
    from nonoka.store.sqlite.next_calls import SQLiteNextCalls

    return SQLiteNextCalls.open_existing(os.path.join(os.path.abspath(cwd), DEFAULT_FILE))


def _from_rows(store: NextCallStore, found: StoredNextCall, turn: NextTurn,
               request: Mapping[str, Any], template: dict[str, Any]
               ) -> tuple[str, int] | None:
    """The stored conversation's wire messages, ``", "``-joined, and their count, from
    the entry rows; ``None`` unless they give the template's digest and the host's
    history is the session's (``_same_history``)."""
    from nonoka.llm.wire import entry_wire_message

    again = store.load_next_call(turn.session_id)
    if again is None or again.revision != found.revision:
        return None
    entries = [json.loads(e) for e in again.entries]
    stored = json.dumps([entry_wire_message(e) for e in entries])[1:-1]
    if (body_digest(template["head"] + stored + template["tail"]) != template["digest"]
            or not _same_history(entries, split_after_reply(request["messages"])[0], turn)):
        return None
    return stored, len(entries)


def _same_history(entries: list[dict[str, Any]], messages: Sequence[Mapping[str, Any]],
                  turn: NextTurn) -> bool:
    """Whether the host's history is the stored conversation (``entry_rules``), with the
    same user messages, text for text."""
    users = [e["content"] for e in entries
             if e["role"] == "user" and not nonokas_own(e.get("metadata") or {})]
    return (users == turn.earlier_users and same_instructions(entries, messages)
            and same_history(entries, messages))


def _expects(template: dict[str, Any], found: StoredNextCall, turn: NextTurn) -> bool:
    """Whether the session waits for ``turn``: a prompt after a finished turn, or results
    for exactly the host calls it paused on."""
    return (template.get("v") == TEMPLATE_VERSION and template.get("kind") == turn.kind
            and found.status == _STATUS[turn.kind]
            and sorted(template["pending"]) == sorted(c for c, _ in turn.results))


def _fits(template: dict[str, Any], request: Mapping[str, Any], turn: NextTurn,
          spec: str) -> bool:
    """Whether the runtime would build the template's request for ``request``: the same
    model, tools and limits, and room for what the turn adds."""
    headroom = template["headroom"]
    return (template["model"] == spec
            and all(template[k] == v for k, v in request_conditions(request).items())
            and (headroom is None or turn.new_tokens() <= headroom))


_STATUS = {"prompt": "completed", "tool_results": "paused"}
"""The stored status of a session that expects each kind of turn."""


def with_tail(hashed: Any, tail: str) -> str:
    """The digest of what ``hashed`` holds followed by ``tail`` (``hashed`` unchanged)."""
    final = hashed.copy()
    final.update(tail.encode())
    return str(final.hexdigest())


def new_digest(text: str) -> Any:
    """A BLAKE2b-256 state over ``text``, to be continued (``body_digest``'s kind)."""
    return _blake2b(text.encode(), digest_size=32)


def body_digest(text: str) -> str:
    """The digests a template holds: BLAKE2b-256, hex. ``hashlib`` would load OpenSSL
    first (~2 ms before the model request leaves); ``_blake2``, which ``hashlib`` itself
    takes ``blake2b`` from, is built into every CPython."""
    return _blake2b(text.encode(), digest_size=32).hexdigest()
