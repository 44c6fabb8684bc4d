"""Frame level of the bridge protocol, version "1": its frames, and one line read, checked
and written.

A bridge process is spawned for every model step, so its start-up time is paid on every
turn. This module imports only ``json``, ``enum`` (which ``json`` loads anyway) and
``nonoka.errors``, never pydantic, so the bridge can read a line, check it, and write
``protocol_ack`` before the ≈60 ms pydantic import; the field values
(``nonoka.protocol.values``) are imported only when a line is rejected. The typed models
live in ``nonoka.protocol.models`` and build on the checks here; the two must agree, and
the tests hold them to it.

Every name below is part of the wire contract (see ``docs/protocol.md``): other programs,
such as the TypeScript provider, are written against them. Add names; never rename them.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum

from nonoka.errors import NonokaError

# ``typing`` costs ~2 ms to import; this module's whole point is to be cheap, and mypy
# treats any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, Final

    from nonoka.protocol.values import ErrorCode
    from nonoka.state.messages import Message

# -- versions and limits ---------------------------------------------------------------

PROTOCOL_VERSION: Final = "1"
SUPPORTED_PROTOCOL_VERSIONS: Final = ("1",)
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""Longest accepted line in bytes, not counting its ``\\n``; history is resent every turn."""
MAX_NESTING: Final = 100
"""Deepest accepted nesting of arrays and objects. A fixed bound, so whether a line is
accepted never depends on how deep the reader's stack happens to be (the JSON parser and
every encoder downstream recurse), and nothing valid comes near it."""


# -- frames ----------------------------------------------------------------------------


class RequestType(StrEnum):
    """The ``type`` of a request (provider → bridge)."""

    CHAT = "chat"
    CANCEL = "cancel"


MAX_REQUEST_ID = 256
"""The longest ``request_id`` a request may carry: it is repeated on every event of the
request, so a huge one would multiply the output."""


def echoed_id(value: object) -> str | None:
    """A request's ``request_id`` as events may repeat it: a string within
    ``MAX_REQUEST_ID`` characters, else none."""
    return value if isinstance(value, str) and len(value) <= MAX_REQUEST_ID else None


class EventType(StrEnum):
    """The ``type`` of an event (bridge → provider)."""

    PROTOCOL_ACK = "protocol_ack"
    SESSION_INIT = "session_init"
    WARNING = "warning"
    TEXT_DELTA = "text_delta"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    USAGE = "usage"
    ERROR = "error"
    FINISH = "finish"
    REASONING_DELTA = "reasoning_delta"
    ASSISTANT_METADATA = "assistant_metadata"


REQUEST_TYPES: Final = tuple(RequestType)
EVENT_TYPES: Final = tuple(EventType)
"""Tuples for membership tests with plain strings (``"x" in EventType`` warns on 3.11)."""


class Capability(StrEnum):
    """Something a bridge supports; ``protocol.required_capabilities`` may demand it."""

    SESSION_INIT = "session_init"
    HOST_TOOLS = "host_tools"
    TITLE_SESSIONS = "title_sessions"
    CONVERSATION_KEY_RECOVERY = "conversation_key_recovery"
    CANCEL = "cancel"
    USAGE = "usage"
    PARTS = "parts"
    """Messages carry ``parts`` (files), ``reasoning`` and ``provider_metadata``, tool
    calls their ``provider_metadata``, a request its call ``options``; with the
    ``reasoning`` feature, reasoning streams back (``reasoning_delta``,
    ``assistant_metadata``)."""


CAPABILITIES: Final = tuple(Capability)
"""What this bridge supports; sent in ``protocol_ack`` and checked against
``protocol.required_capabilities``. A tuple, so nobody can change it by accident."""


class Purpose(StrEnum):
    """What a chat request is for; title and compaction requests run in their own session.

    A ``compaction`` request (the host asks the model to summarise the conversation)
    names the chat session it summarises in ``session_id``; its answer is remembered
    there, so the next chat request that starts from the summary continues that session.
    Here rather than in ``values``: the early dispatch reads it before pydantic loads.
    """

    CHAT = "chat"
    TITLE = "title"
    COMPACTION = "compaction"


class ProtocolError(NonokaError):
    """A line that is not a usable frame, with a stable ``code`` for programs.

    ``message`` is for a person: it names the problem and what to do. ``details`` carries
    machine-readable specifics. ``request_id`` is filled in when the line was readable
    enough to have one, so the error event can still be matched to its request.
    """

    retryable = False

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details if details is not None else {}
        self.request_id = request_id

    def __repr__(self) -> str:
        return f"ProtocolError({self.code!r}, {self.message!r})"

    def to_event(self) -> dict[str, Any]:
        """This error as an ``error`` event object."""
        return _error_event(self.code, self.message, request_id=self.request_id,
                            retryable=self.retryable, details=self.details)


def _codes() -> type[ErrorCode]:
    """``ErrorCode``, imported when a line is rejected: a usable line never needs it."""
    from nonoka.protocol.values import ErrorCode

    return ErrorCode


# -- reading ---------------------------------------------------------------------------


def parse_frame(line: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                lines: RequestLines | None = None) -> dict[str, Any]:
    """Check size, UTF-8 and JSON of one line and return its object.

    A trailing ``\\n`` (or ``\\r\\n``) is allowed, so is a missing one (the last line
    before end of input). Raises ``ProtocolError`` for anything else.
    """
    size = len(line)
    if line.endswith(b"\n"):
        size -= 2 if line.endswith(b"\r\n") else 1
    if size > max_frame_bytes:
        raise ProtocolError(
            _codes().FRAME_TOO_LARGE,
            f"the line is {_mib(size)}, over the {_mib(max_frame_bytes)} frame limit; "
            "send a shorter history (compact it or start a new conversation) or raise "
            "the bridge's max_frame_bytes",
            {"size": size, "max_frame_bytes": max_frame_bytes},
        )
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = line[exc.start:exc.start + 1].hex()
        raise ProtocolError(
            _codes().INVALID_UTF8,
            f"the line is not valid UTF-8 (byte 0x{bad} at offset {exc.start}: "
            f"{exc.reason}); encode every line as UTF-8",
            {"offset": exc.start},
        ) from None
    if text.startswith("\ufeff"):  # a byte-order mark from some Windows pipelines
        text = text[1:]
    obj = _loads(text, lines)
    if not isinstance(obj, dict):
        raise ProtocolError(
            _codes().NOT_AN_OBJECT,
            f"the line is a JSON {_json_kind(obj)}, not an object; every frame is one "
            'object such as {"type": "chat", ...}',
            {"got": _json_kind(obj)},
        )
    return obj


def check_request_frame(
    line: bytes,
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    capabilities: Iterable[str] = CAPABILITIES,
    lines: RequestLines | None = None,
) -> dict[str, Any]:
    """Everything about a request that can be checked without pydantic.

    Runs the frame checks, then ``type``, then (for ``chat``) ``protocol.version`` and
    ``protocol.required_capabilities`` — before field validation, so a provider that
    speaks another version hears that rather than a list of field errors. ``lines``: the
    process's ``RequestLines``, when it reads a host's requests one after another.
    """
    obj = parse_frame(line, max_frame_bytes=max_frame_bytes, lines=lines)
    request_id = obj.get("request_id")
    rid = echoed_id(request_id)
    kind = obj.get("type")
    if kind not in REQUEST_TYPES:
        valid = ", ".join(REQUEST_TYPES)
        said = 'has no "type"' if "type" not in obj else f"has type {_short(kind)}"
        raise ProtocolError(
            _codes().UNKNOWN_REQUEST_TYPE,
            f"the request {said}; valid request types are: {valid}",
            {"type": kind if isinstance(kind, str) else None, "valid": list(REQUEST_TYPES)},
            request_id=rid,
        )
    if kind == RequestType.CHAT:
        _check_protocol(obj.get("protocol", _MISSING), frozenset(capabilities), rid)
    return obj


def check_event_frame(line: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                      ) -> dict[str, Any]:
    """The frame checks plus a known event ``type``; the provider-side twin."""
    obj = parse_frame(line, max_frame_bytes=max_frame_bytes)
    kind = obj.get("type")
    if kind not in EVENT_TYPES:
        request_id = obj.get("request_id")
        raise ProtocolError(
            _codes().UNKNOWN_EVENT_TYPE,
            f"the event has type {_short(kind)}, which this provider does not know "
            f"(known: {', '.join(EVENT_TYPES)}); a newer bridge may send it — skip it",
            {"type": kind if isinstance(kind, str) else None, "valid": list(EVENT_TYPES)},
            request_id=echoed_id(request_id),
        )
    return obj


# -- writing ---------------------------------------------------------------------------


def dump_line(obj: dict[str, Any]) -> bytes:
    """One frame: compact JSON, UTF-8, one line, ``\\n``-terminated, no NaN.

    Non-finite floats become ``null``; unpaired surrogates become U+FFFD (what a
    JavaScript ``TextEncoder`` does too). U+2028/U+2029/U+0085 are escaped so no line
    splitter (``str.splitlines`` splits on them) can cut a frame in two.
    """
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(_finite(obj), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
    for char, escape in _LINE_BREAK_ESCAPES:
        if char in text:
            text = text.replace(char, escape)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = scrub_surrogates(text).encode("utf-8")
    return data + b"\n"


def ack_line(*, server_version: str, request_id: str | None = None,
             capabilities: Iterable[str] = CAPABILITIES) -> bytes:
    """The ``protocol_ack`` line, byte-identical to encoding ``ProtocolAck``."""
    event: dict[str, Any] = {"type": EventType.PROTOCOL_ACK}
    if request_id is not None:
        event["request_id"] = request_id
    event.update(version=PROTOCOL_VERSION, capabilities=list(capabilities),
                 server_version=server_version)
    return dump_line(event)


def error_line(code: str, message: str, *, request_id: str | None = None,
               retryable: bool = False, details: Mapping[str, Any] | None = None) -> bytes:
    """An ``error`` line, byte-identical to encoding ``ErrorEvent``."""
    return dump_line(_error_event(code, message, request_id=request_id,
                                  retryable=retryable, details=details))


def rejection_lines(error: ProtocolError) -> bytes:
    """What a bridge writes for an unusable request: ``error`` then ``finish`` (error)."""
    finish: dict[str, Any] = {"type": EventType.FINISH}
    if error.request_id is not None:
        finish["request_id"] = error.request_id
    from nonoka.protocol.values import FinishReason

    finish.update(finish_reason=FinishReason.ERROR,
                  usage={"input_tokens": 0, "output_tokens": 0})
    return dump_line(error.to_event()) + dump_line(finish)


# -- conversation identity (docs/protocol.md §7) ---------------------------------------


def conversation_key(messages: Iterable[Message | Mapping[str, Any]]) -> str | None:
    """SHA-256 hex of the first ``user`` message's text, or ``None`` when there is none.

    The host resends the whole history every turn, so this fingerprint is stable for a
    conversation without storing anything. The text is hashed exactly as sent (UTF-8,
    unpaired surrogates as U+FFFD) so every provider, in any language, gets the same key.
    Empty or whitespace-only text gives ``None``: it would match every such conversation.
    """
    for message in messages:
        if message_field(message, "role") != "user":
            continue
        text = message_field(message, "content")
        if not isinstance(text, str) or not text.strip():
            return None
        import hashlib  # only here: ~2 ms, and most callers of this module never hash

        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            data = scrub_surrogates(text).encode("utf-8")
        return hashlib.sha256(data).hexdigest()
    return None


def is_continuation(messages: Iterable[Message | Mapping[str, Any]]) -> bool:
    """Whether the history already holds a reply (an ``assistant`` or ``tool`` message).

    A history without one is a new conversation: send no session id.
    """
    return any(message_field(m, "role") in ("assistant", "tool") for m in messages)


def scrub_surrogates(text: str) -> str:
    """``text`` with unpaired UTF-16 surrogates replaced by U+FFFD.

    JSON may escape them (``"\\ud800"``) and JavaScript strings may hold them, but they
    cannot be stored or sent as UTF-8.
    """
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# -- internals -------------------------------------------------------------------------

_MISSING: Any = object()
_LINE_BREAK_ESCAPES = (("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\x85", "\\u0085"))


class _NonFiniteError(ValueError):
    """NaN/Infinity literals: Python's json accepts them, JSON does not."""


def _reject_constant(name: str) -> Any:
    raise _NonFiniteError(name)


def _loads(text: str, lines: RequestLines | None = None) -> Any:
    """``json.loads`` with every failure turned into an ``invalid_json`` ProtocolError."""
    if not text or text.isspace():
        raise ProtocolError(_codes().INVALID_JSON,
                            "the line is empty; send one JSON object per line",
                            {"reason": "empty"})
    try:
        obj = _decode(text, lines)
    except json.JSONDecodeError as exc:
        # A line cut short ends inside a string or before the value closes.
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
        hint = ("the line ends before the JSON value does, so it was probably truncated; "
                "write each frame as one complete line" if truncated
                else "send one JSON object per line")
        raise ProtocolError(
            _codes().INVALID_JSON,
            f"the line is not valid JSON ({exc.msg}: column {exc.colno}); {hint}",
            {"reason": "truncated" if truncated else "syntax", "offset": exc.pos},
        ) from None
    except _NonFiniteError as exc:
        raise ProtocolError(
            _codes().INVALID_JSON,
            f"the line uses {exc}, which is not JSON; send finite numbers or null",
            {"reason": "non_finite_number"},
        ) from None
    except RecursionError:
        raise ProtocolError(_codes().INVALID_JSON,
                            f"the line's JSON is nested more than {MAX_NESTING} levels deep; "
                            "flatten it", {"reason": "too_deep"}) from None
    except ValueError as exc:  # e.g. an integer with more digits than Python allows
        raise ProtocolError(_codes().INVALID_JSON,
                            f"the line's JSON cannot be read ({exc}); fix the value",
                            {"reason": "unreadable_value"}) from None
    messages = obj.get("messages") if type(obj) is dict else None
    resent = (lines.resent_count(messages) if lines is not None and type(messages) is list
              else 0)
    if _too_deep({**obj, "messages": messages[resent:]} if messages and resent else obj):
        raise ProtocolError(_codes().INVALID_JSON,
                            f"the line's JSON is nested more than {MAX_NESTING} levels deep; "
                            "flatten it", {"reason": "too_deep"})
    # Cheap test: only escapes make surrogates (one search when the line has no \u).
    if "\\u" in text and ("\\ud" in text or "\\uD" in text):
        obj = _scrub_tree(obj)
        messages = obj.get("messages") if type(obj) is dict else None
        if lines is not None:
            lines.text = ("", [])  # its text no longer gives its values
    if lines is not None and type(messages) is list:
        lines.checked = (messages, lines.checked[0], resent)
    return obj


def _decode(text: str, lines: RequestLines | None) -> Any:
    """``json.loads(text)``; with ``lines``, a request line that resends the messages of
    the line before is decoded without decoding them again.

    Without ``lines``, and for the first line of ``lines``, ``json.loads`` alone decodes
    it. From the second on, the line's top level is walked here, each value decoded by
    ``json``'s own scanner, so the span of the ``messages`` array in the text is known.
    When a line's array starts with the text of the last one's (one comparison of
    bytes), those messages are the same values: the last line's are taken as they are,
    and only the messages after them are decoded. A long-lived bridge is thus not paying, every
    turn, for decoding the whole history again into objects scattered over a heap that
    many turns have used (``bench/turn_cost.py``). Anything unusual in a line is left to
    ``json.loads``, whose answer and errors are the reference.
    """
    if lines is None:
        return json.loads(text, parse_constant=_reject_constant)
    if lines.scan is None:
        decoder: Any = json.JSONDecoder(parse_constant=_reject_constant)
        lines.scan = decoder.scan_once
        return json.loads(text, parse_constant=_reject_constant)
    try:
        return _top_level(text, lines)
    except (_Unusual, StopIteration, IndexError, ValueError, RecursionError):
        return json.loads(text, parse_constant=_reject_constant)


class _Unusual(Exception):
    """A line ``_top_level`` leaves to ``json.loads``."""


def _top_level(text: str, lines: RequestLines) -> dict[str, Any]:
    """The object a line holds, its values decoded one by one (``_decode``)."""
    scan = lines.scan
    ws = _WHITESPACE
    idx = ws(text, 0).end()
    if text[idx] != "{":
        raise _Unusual
    obj: dict[str, Any] = {}
    idx = ws(text, idx + 1).end()
    if text[idx] == "}":
        idx += 1
    else:
        while True:
            if text[idx] != '"':
                raise _Unusual
            key, idx = scan(text, idx)
            idx = ws(text, idx).end()
            if text[idx] != ":":
                raise _Unusual
            idx = ws(text, idx + 1).end()
            if key == "messages" and text[idx] == "[":
                obj[key], idx = _messages(text, idx, lines)
            else:
                obj[key], idx = scan(text, idx)
            idx = ws(text, idx).end()
            if text[idx] == "}":
                idx += 1
                break
            if text[idx] != ",":
                raise _Unusual
            idx = ws(text, idx + 1).end()
    if ws(text, idx).end() != len(text):
        raise _Unusual
    return obj


def _messages(text: str, start: int, lines: RequestLines) -> tuple[list[Any], int]:
    """The array at ``start`` and the index after it, reusing the last line's messages
    when this array's text starts with theirs (``_decode``)."""
    scan = lines.scan
    before, kept = lines.text
    if before and text.startswith(before, start):
        items, idx = list(kept), start + len(before)
    else:
        items, end = scan(text, start)  # all of it, in C
        if type(items) is not list or not items:
            return items, end
        idx = end - 1  # the closing bracket
        while text[idx - 1] in " \t\n\r":
            idx -= 1
        lines.text = (text[start:idx], list(items))  # a copy: the caller's may change
        return items, end
    ws = _WHITESPACE
    last = idx  # the end of the last message, before any whitespace
    while True:
        idx = ws(text, idx).end()
        if text[idx] == "]":
            break
        if text[idx] != ",":
            raise _Unusual
        item, idx = scan(text, ws(text, idx + 1).end())
        items.append(item)
        last = idx
    lines.text = (text[start:last], list(items))
    return items, idx + 1


_WHITESPACE: Any = re.compile(r"[ \t\n\r]*").match
"""JSON's whitespace (``re`` is loaded by ``json`` already)."""


class RequestLines:
    """What a process keeps of the request line it checked last, to read the next one.

    A host resends its whole history every turn, so in a long-lived bridge nearly every
    message of a line is one the line before held, already checked: they are found in
    one list comparison in C, their text is not decoded again (``_decode``), their
    nesting is not walked again, and validation (``nonoka.protocol.models``) takes the
    count rather than comparing once more. The bridge's entry point creates one and
    passes it to every check of its input; a line checked without one is read whole.
    Each field is one tuple, replaced whole: the bridge checks the next line on another
    thread.
    """

    __slots__ = ("checked", "scan", "text", "validated")

    def __init__(self) -> None:
        self.checked: tuple[list[Any], list[Any], int] = ([], [], 0)
        """The last line's messages, the line's before it, and how many of its first
        messages repeat those (all of them, or 0)."""
        self.text: tuple[str, list[Any]] = ("", [])
        """The text of the last line's messages array up to its last message, and those
        messages as decoded (``_decode``)."""
        self.scan: Any = None
        """``json``'s scanner, once the first line has been read."""
        self.validated: tuple[list[Any], list[Any]] = ([], [])
        """The last chat request's messages as they arrived, and as validated
        (``nonoka.protocol.models``)."""

    def resent_count(self, messages: list[Any]) -> int:
        """How many of ``messages`` repeat the messages of the line checked last."""
        before = self.checked[0]
        count = len(before)
        return count if count and len(messages) >= count and messages[:count] == before else 0

    def resent(self, messages: object) -> tuple[list[Any], int] | None:
        """For the messages list of the line checked last: the list checked before it
        and how many of its first messages repeat that one; ``None`` for any other."""
        now, before, count = self.checked
        return (before, count) if messages is now else None


def _too_deep(root: Any) -> bool:
    """Whether arrays and objects nest deeper than ``MAX_NESTING`` (without recursion).

    One level at a time, with C-level iteration only (``chain``, ``map``, ``compress``):
    a history of thousands of flat messages is walked in well under a millisecond, where
    a Python loop over every node took several. ``json.loads`` makes no other containers
    than ``dict`` and ``list``.
    """
    from itertools import chain, compress  # loaded at start-up already

    level = [root] if type(root) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_NESTING:
            return True
        children = list(chain(chain.from_iterable(map(dict.values, compress(
            level, map(_DICT.__contains__, map(type, level))))), chain.from_iterable(compress(
                level, map(_LIST.__contains__, map(type, level))))))
        level = list(compress(children, map(_CONTAINERS.__contains__, map(type, children))))
    return False


_DICT, _LIST = frozenset((dict,)), frozenset((list,))
_CONTAINERS = frozenset((dict, list))


def _scrub_tree(root: Any) -> Any:
    """Replace unpaired surrogates in every string and key, without recursion."""
    def fix(value: Any) -> Any:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return scrub_surrogates(value)
        return value

    root = fix(root)
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, item in enumerate(node):
                node[i] = fix(item)
                stack.append(node[i])
        elif isinstance(node, dict):
            items = [(fix(k), fix(v)) for k, v in node.items()]
            node.clear()
            node.update(items)
            stack.extend(node.values())
    return root


def _finite(value: Any) -> Any:
    """A copy of ``value`` with NaN and ±Infinity replaced by ``None``."""
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _check_protocol(spec: Any, capabilities: frozenset[str], rid: str | None) -> None:
    if spec is _MISSING or not isinstance(spec, dict) or "version" not in spec:
        where = "protocol" if spec is _MISSING or not isinstance(spec, dict) else \
            "protocol.version"
        raise ProtocolError(
            _codes().INVALID_REQUEST,
            f'invalid chat request: {where} is missing; send "protocol": '
            f'{{"version": "{PROTOCOL_VERSION}"}}',
            {"errors": [{"loc": where, "msg": "Field required", "type": "missing"}]},
            request_id=rid,
        )
    version = spec["version"]
    if not isinstance(version, str) or version not in SUPPORTED_PROTOCOL_VERSIONS:
        supported = ", ".join(f'"{v}"' for v in SUPPORTED_PROTOCOL_VERSIONS)
        raise ProtocolError(
            _codes().UNSUPPORTED_PROTOCOL_VERSION,
            f"protocol version {_short(version)} is not supported; this bridge speaks "
            f"{supported} (a string); upgrade nonoka or the provider so they agree",
            {"requested": version if isinstance(version, str | int) else None,
             "supported": list(SUPPORTED_PROTOCOL_VERSIONS)},
            request_id=rid,
        )
    required = spec.get("required_capabilities")
    if isinstance(required, list):
        missing = sorted({c for c in required if isinstance(c, str)} - capabilities)
        if missing:
            raise ProtocolError(
                _codes().MISSING_CAPABILITY,
                f"this bridge lacks required capabilities: {_listed(missing)} (it "
                f"supports: {', '.join(sorted(capabilities))}); upgrade nonoka or stop "
                "requiring them",
                {"missing": missing, "supported": sorted(capabilities)},
                request_id=rid,
            )


def _error_event(code: str, message: str, *, request_id: str | None, retryable: bool,
                 details: Mapping[str, Any] | None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": EventType.ERROR}
    if request_id is not None:
        event["request_id"] = request_id
    event.update(code=code, message=message, retryable=retryable,
                 details=_bounded(dict(details)) if details else {})
    return event


MAX_ECHOED_CHARS = 200
"""The longest string an error's ``details`` carry; longer ones are cut."""
MAX_ECHOED_ITEMS = 20
"""The most items of a list (or keys of an object) an error's ``details`` carry."""


def _bounded(value: Any, depth: int = 0) -> Any:
    """``details`` cut to a few kilobytes: an error about a huge input must stay small.

    Details may quote parts of the offending line (an unknown ``type``, capabilities,
    field paths); a line near the frame limit must not come back as an error line over it.
    """
    if isinstance(value, str):
        return value if len(value) <= MAX_ECHOED_CHARS else value[:MAX_ECHOED_CHARS] + "..."
    if depth >= 4:
        return value if isinstance(value, bool | int | float) or value is None else None
    if isinstance(value, dict):
        return {_bounded(str(k), depth + 1): _bounded(v, depth + 1)
                for k, v in list(value.items())[:MAX_ECHOED_ITEMS]}
    if isinstance(value, list | tuple):
        return [_bounded(v, depth + 1) for v in value[:MAX_ECHOED_ITEMS]]
    return value


def message_field(message: Any, name: str) -> Any:
    """A field of a message, whether a decoded JSON object or a typed ``Message``."""
    if isinstance(message, dict):  # the common case, without importing collections.abc
        return message.get(name)
    from collections.abc import Mapping  # loaded already wherever other mappings exist

    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else "object"


def _short(value: Any) -> str:
    """A value for a message: scalars as JSON, cut short; containers by kind only."""
    if isinstance(value, list | dict):
        return f"a JSON {_json_kind(value)}"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _listed(names: list[str]) -> str:
    """Names for a message, each cut short, at most a few of them."""
    shown = ", ".join(n if len(n) <= 40 else n[:37] + "..." for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
