"""Frame-level half of the bridge protocol, version "1": names, limits and cheap checks.

A bridge process is spawned for every model step, so its start-up time is paid on every
turn. This module imports only ``json`` (and ``nonoka.errors``), never pydantic, so the
bridge can read a line, check it, and write ``protocol_ack`` (or a rejection) before the
≈60 ms pydantic import. The typed models live in ``nonoka.bridge.protocol`` and build on
the checks here; the two must agree, and the tests hold them to it.

Every name below is part of the wire contract (see ``docs/protocol.md``): other programs,
such as the TypeScript provider, are written against them. Add names; never rename them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType

from nonoka.errors import NonokaError

# ``typing`` costs ~2 ms to import; this module's whole point is to be cheap, and mypy
# treats any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, Final

    from nonoka.messages import Message

# -- versions and limits ---------------------------------------------------------------

PROTOCOL_VERSION: Final = "1"
SUPPORTED_PROTOCOL_VERSIONS: Final = ("1",)
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""Longest accepted line in bytes, not counting its ``\\n``; history is resent every turn."""
MAX_NESTING: Final = 100
"""Deepest accepted nesting of arrays and objects. A fixed bound, so whether a line is
accepted never depends on how deep the reader's stack happens to be (the JSON parser and
every encoder downstream recurse), and nothing valid comes near it."""

# -- capabilities ----------------------------------------------------------------------

CAP_SESSION_INIT: Final = "session_init"
CAP_HOST_TOOLS: Final = "host_tools"
CAP_TITLE_SESSIONS: Final = "title_sessions"
CAP_CONVERSATION_KEY_RECOVERY: Final = "conversation_key_recovery"
CAP_CANCEL: Final = "cancel"
CAP_USAGE: Final = "usage"
CAPABILITIES: Final = (
    CAP_SESSION_INIT,
    CAP_HOST_TOOLS,
    CAP_TITLE_SESSIONS,
    CAP_CONVERSATION_KEY_RECOVERY,
    CAP_CANCEL,
    CAP_USAGE,
)
"""What this bridge supports; sent in ``protocol_ack`` and checked against
``protocol.required_capabilities``. A tuple, so nobody can change it by accident."""

# -- request and event types -----------------------------------------------------------

REQUEST_CHAT: Final = "chat"
REQUEST_CANCEL: Final = "cancel"
REQUEST_TYPES: Final = (REQUEST_CHAT, REQUEST_CANCEL)

EVENT_PROTOCOL_ACK: Final = "protocol_ack"
EVENT_SESSION_INIT: Final = "session_init"
EVENT_WARNING: Final = "warning"
EVENT_TEXT_DELTA: Final = "text_delta"
EVENT_TOOL_CALL: Final = "tool_call"
EVENT_TOOL_RESULT: Final = "tool_result"
EVENT_USAGE: Final = "usage"
EVENT_ERROR: Final = "error"
EVENT_FINISH: Final = "finish"
EVENT_TYPES: Final = (
    EVENT_PROTOCOL_ACK,
    EVENT_SESSION_INIT,
    EVENT_WARNING,
    EVENT_TEXT_DELTA,
    EVENT_TOOL_CALL,
    EVENT_TOOL_RESULT,
    EVENT_USAGE,
    EVENT_ERROR,
    EVENT_FINISH,
)

# -- enumerated field values -----------------------------------------------------------

PURPOSE_CHAT: Final = "chat"
PURPOSE_TITLE: Final = "title"

RECOVERY_SESSION_ID_MISSING: Final = "session_id_missing"
RECOVERY_SESSION_NOT_FOUND: Final = "session_not_found"
RECOVERY_SESSION_MISMATCH: Final = "session_mismatch"
"""The sent id belongs to another conversation (two conversations share one id file)."""

EXECUTED_BY_HOST: Final = "host"
EXECUTED_BY_NONOKA: Final = "nonoka"

FINISH_STOP: Final = "stop"
FINISH_TOOL_CALLS: Final = "tool_calls"
FINISH_CANCELLED: Final = "cancelled"
FINISH_ERROR: Final = "error"
FINISH_LIMIT: Final = "limit"
FINISH_REASONS: Final = (FINISH_STOP, FINISH_TOOL_CALLS, FINISH_CANCELLED, FINISH_ERROR,
                         FINISH_LIMIT)

# -- warning codes ---------------------------------------------------------------------

WARNING_SESSION_NOT_FOUND_STARTING_NEW: Final = "session_not_found_starting_new"
WARNING_SESSION_ID_MISSING_STARTING_FRESH: Final = "session_id_missing_starting_fresh"
WARNING_SESSION_MISMATCH_STARTING_NEW: Final = "session_mismatch_starting_new"
WARNING_CONVERSATION_KEY_IGNORED: Final = "conversation_key_ignored"
WARNING_CODES: Final[Mapping[str, str]] = MappingProxyType({
    WARNING_SESSION_MISMATCH_STARTING_NEW:
        "the sent session_id belongs to a different conversation (its stored history does "
        "not match the request's) and no session matched conversation_key; a new session "
        "was started (seeded with the history)",
    WARNING_SESSION_NOT_FOUND_STARTING_NEW:
        "the requested session_id is not in this project's database and no session "
        "matched conversation_key; a new session was started (seeded with the history)",
    WARNING_SESSION_ID_MISSING_STARTING_FRESH:
        "the history is a continuation but no session_id was sent and none matched "
        "conversation_key; a new session was started (seeded with the history); details "
        "list the most recently active sessions",
    WARNING_CONVERSATION_KEY_IGNORED:
        "conversation_key is not 64 lower-case hex digits (the SHA-256 of the first user "
        "message), so it was ignored: this request cannot be recovered by key; fix the "
        "provider",
})

# -- error codes -----------------------------------------------------------------------

# A request line the bridge cannot use (raised as ProtocolError by the decoders).
ERROR_FRAME_TOO_LARGE: Final = "frame_too_large"
ERROR_INVALID_UTF8: Final = "invalid_utf8"
ERROR_INVALID_JSON: Final = "invalid_json"
ERROR_NOT_AN_OBJECT: Final = "not_an_object"
ERROR_UNKNOWN_REQUEST_TYPE: Final = "unknown_request_type"
ERROR_INVALID_REQUEST: Final = "invalid_request"
ERROR_UNSUPPORTED_PROTOCOL_VERSION: Final = "unsupported_protocol_version"
ERROR_MISSING_CAPABILITY: Final = "missing_capability"
# An event line a provider cannot use.
ERROR_UNKNOWN_EVENT_TYPE: Final = "unknown_event_type"
ERROR_INVALID_EVENT: Final = "invalid_event"
# Running the request failed.
ERROR_SESSION_BUSY: Final = "session_busy"
ERROR_SESSION_CONFLICT: Final = "session_conflict"
ERROR_SESSION_CORRUPT: Final = "session_corrupt"
ERROR_STORE_ERROR: Final = "store_error"
ERROR_INVALID_CWD: Final = "invalid_cwd"
ERROR_MODEL_NOT_CONFIGURED: Final = "model_not_configured"
ERROR_MODEL_ERROR: Final = "model_error"
ERROR_TOOL_ERROR: Final = "tool_error"
ERROR_TOOL_RESULT_MISMATCH: Final = "tool_result_mismatch"
ERROR_CANCELLED: Final = "cancelled"
ERROR_INTERNAL_ERROR: Final = "internal_error"

ERROR_CODES: Final[Mapping[str, str]] = MappingProxyType({
    ERROR_FRAME_TOO_LARGE: "the line is longer than the frame limit",
    ERROR_INVALID_UTF8: "the line is not valid UTF-8",
    ERROR_INVALID_JSON: "the line is not one complete JSON value (often: a truncated line)",
    ERROR_NOT_AN_OBJECT: "the line is JSON but not an object",
    ERROR_UNKNOWN_REQUEST_TYPE: "`type` is missing or names no request type",
    ERROR_INVALID_REQUEST: "fields are missing or have the wrong type; details list them",
    ERROR_UNSUPPORTED_PROTOCOL_VERSION: "`protocol.version` is not one this bridge speaks",
    ERROR_MISSING_CAPABILITY: "`protocol.required_capabilities` names something unsupported",
    ERROR_UNKNOWN_EVENT_TYPE: "(provider side) an event `type` this provider does not know",
    ERROR_INVALID_EVENT: "(provider side) an event's fields are missing or mistyped",
    ERROR_SESSION_BUSY: "another live process is running this session",
    ERROR_SESSION_CONFLICT: "another writer saved the session first",
    ERROR_SESSION_CORRUPT: "the stored session cannot be decoded",
    ERROR_STORE_ERROR: "the project database failed; nothing stored was changed",
    ERROR_INVALID_CWD: "`cwd` does not exist or `.nonoka/` cannot be created in it",
    ERROR_MODEL_NOT_CONFIGURED: "no model was given and none is configured, or it is unknown",
    ERROR_MODEL_ERROR: "the model endpoint failed; `retryable` says whether to try again",
    ERROR_TOOL_ERROR: "a tool nonoka runs itself could not be found, validated or run",
    ERROR_TOOL_RESULT_MISMATCH: "a `tool` message answers no call the session waits for",
    ERROR_CANCELLED: "the request was stopped by cancel, SIGTERM or SIGINT",
    ERROR_INTERNAL_ERROR: "a bug in nonoka; the message and stderr say more",
})
"""Every error code with a one-line meaning; ``docs/protocol.md`` has the full table."""

RETRYABLE_ERROR_CODES: Final = frozenset({ERROR_SESSION_BUSY, ERROR_SESSION_CONFLICT})
"""Codes that are retryable as such; ``model_error`` decides per error."""


class ProtocolError(NonokaError):
    """A line that is not a usable frame, with a stable ``code`` for programs.

    ``message`` is for a person: it names the problem and what to do. ``details`` carries
    machine-readable specifics. ``request_id`` is filled in when the line was readable
    enough to have one, so the error event can still be matched to its request.
    """

    retryable = False

    def __init__(
        self,
        code: str,
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


# -- reading ---------------------------------------------------------------------------


def parse_frame(line: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                ) -> dict[str, Any]:
    """Check size, UTF-8 and JSON of one line and return its object.

    A trailing ``\\n`` (or ``\\r\\n``) is allowed, so is a missing one (the last line
    before end of input). Raises ``ProtocolError`` for anything else.
    """
    size = len(line)
    if line.endswith(b"\n"):
        size -= 2 if line.endswith(b"\r\n") else 1
    if size > max_frame_bytes:
        raise ProtocolError(
            ERROR_FRAME_TOO_LARGE,
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
            ERROR_INVALID_UTF8,
            f"the line is not valid UTF-8 (byte 0x{bad} at offset {exc.start}: "
            f"{exc.reason}); encode every line as UTF-8",
            {"offset": exc.start},
        ) from None
    if text.startswith("\ufeff"):  # a byte-order mark from some Windows pipelines
        text = text[1:]
    obj = _loads(text)
    if not isinstance(obj, dict):
        raise ProtocolError(
            ERROR_NOT_AN_OBJECT,
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
) -> dict[str, Any]:
    """Everything about a request that can be checked without pydantic.

    Runs the frame checks, then ``type``, then (for ``chat``) ``protocol.version`` and
    ``protocol.required_capabilities`` — before field validation, so a provider that
    speaks another version hears that rather than a list of field errors.
    """
    obj = parse_frame(line, max_frame_bytes=max_frame_bytes)
    request_id = obj.get("request_id")
    rid = request_id if isinstance(request_id, str) else None
    kind = obj.get("type")
    if kind not in REQUEST_TYPES:
        valid = ", ".join(REQUEST_TYPES)
        said = 'has no "type"' if "type" not in obj else f"has type {_short(kind)}"
        raise ProtocolError(
            ERROR_UNKNOWN_REQUEST_TYPE,
            f"the request {said}; valid request types are: {valid}",
            {"type": kind if isinstance(kind, str) else None, "valid": list(REQUEST_TYPES)},
            request_id=rid,
        )
    if kind == REQUEST_CHAT:
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
            ERROR_UNKNOWN_EVENT_TYPE,
            f"the event has type {_short(kind)}, which this provider does not know "
            f"(known: {', '.join(EVENT_TYPES)}); a newer bridge may send it — skip it",
            {"type": kind if isinstance(kind, str) else None, "valid": list(EVENT_TYPES)},
            request_id=request_id if isinstance(request_id, str) else None,
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
    event: dict[str, Any] = {"type": EVENT_PROTOCOL_ACK}
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
    finish: dict[str, Any] = {"type": EVENT_FINISH}
    if error.request_id is not None:
        finish["request_id"] = error.request_id
    finish.update(finish_reason=FINISH_ERROR, usage={"input_tokens": 0, "output_tokens": 0})
    return dump_line(error.to_event()) + dump_line(finish)


# -- conversation identity (SPEC §2.2) -------------------------------------------------


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


def _loads(text: str) -> Any:
    """``json.loads`` with every failure turned into an ``invalid_json`` ProtocolError."""
    if not text or text.isspace():
        raise ProtocolError(ERROR_INVALID_JSON,
                            "the line is empty; send one JSON object per line",
                            {"reason": "empty"})
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        # A line cut short ends inside a string or before the value closes.
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
        hint = ("the line ends before the JSON value does, so it was probably truncated; "
                "write each frame as one complete line" if truncated
                else "send one JSON object per line")
        raise ProtocolError(
            ERROR_INVALID_JSON,
            f"the line is not valid JSON ({exc.msg}: column {exc.colno}); {hint}",
            {"reason": "truncated" if truncated else "syntax", "offset": exc.pos},
        ) from None
    except _NonFiniteError as exc:
        raise ProtocolError(
            ERROR_INVALID_JSON,
            f"the line uses {exc}, which is not JSON; send finite numbers or null",
            {"reason": "non_finite_number"},
        ) from None
    except RecursionError:
        raise ProtocolError(ERROR_INVALID_JSON,
                            f"the line's JSON is nested more than {MAX_NESTING} levels deep; "
                            "flatten it", {"reason": "too_deep"}) from None
    except ValueError as exc:  # e.g. an integer with more digits than Python allows
        raise ProtocolError(ERROR_INVALID_JSON,
                            f"the line's JSON cannot be read ({exc}); fix the value",
                            {"reason": "unreadable_value"}) from None
    if _too_deep(obj):
        raise ProtocolError(ERROR_INVALID_JSON,
                            f"the line's JSON is nested more than {MAX_NESTING} levels deep; "
                            "flatten it", {"reason": "too_deep"})
    if "\\ud" in text or "\\uD" in text:  # cheap test: only escapes make surrogates
        obj = _scrub_tree(obj)
    return obj


def _too_deep(root: Any) -> bool:
    """Whether arrays and objects nest deeper than ``MAX_NESTING`` (without recursion)."""
    stack = [(root, 1)] if isinstance(root, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return False


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
            ERROR_INVALID_REQUEST,
            f'invalid chat request: {where} is missing; send "protocol": '
            f'{{"version": "{PROTOCOL_VERSION}"}}',
            {"errors": [{"loc": where, "msg": "Field required", "type": "missing"}]},
            request_id=rid,
        )
    version = spec["version"]
    if not isinstance(version, str) or version not in SUPPORTED_PROTOCOL_VERSIONS:
        supported = ", ".join(f'"{v}"' for v in SUPPORTED_PROTOCOL_VERSIONS)
        raise ProtocolError(
            ERROR_UNSUPPORTED_PROTOCOL_VERSION,
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
                ERROR_MISSING_CAPABILITY,
                f"this bridge lacks required capabilities: {', '.join(missing)} (it "
                f"supports: {', '.join(sorted(capabilities))}); upgrade nonoka or stop "
                "requiring them",
                {"missing": missing, "supported": sorted(capabilities)},
                request_id=rid,
            )


def _error_event(code: str, message: str, *, request_id: str | None, retryable: bool,
                 details: Mapping[str, Any] | None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": EVENT_ERROR}
    if request_id is not None:
        event["request_id"] = request_id
    event.update(code=code, message=message, retryable=retryable,
                 details=dict(details) if details else {})
    return event


def message_field(message: Any, name: str) -> Any:
    """A field of a message, whether a decoded JSON object or a typed ``Message``."""
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


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
