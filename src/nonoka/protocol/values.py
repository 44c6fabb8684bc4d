"""The enumerated values of the protocol's fields, version "1", as string enums.

Finish reasons, error and warning codes (with their meanings), recovery reasons and who
runs a tool: what events report. Each member *is* its wire string (``ErrorCode.SESSION_BUSY ==
"session_busy"``; ``json.dumps`` writes the value), so code compares with either. The
typed models (``nonoka.protocol.models``) take their allowed values from here, and the
JSON Schema built from them names each enum, so a value is written once.

Every value is part of the wire contract (``docs/protocol.md``): other programs, such as
the TypeScript provider, are written against them. Add values; never rename them.

Standard library only, and kept apart from ``nonoka.protocol.frames``: building an enum
costs ~0.1 ms on Python 3.11, and neither ``protocol_ack`` nor the early dispatch needs
any of these (a rejected line imports them then).
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: ~2 ms of import on every bridge spawn
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final


# -- enumerated field values -----------------------------------------------------------


class RecoveryReason(StrEnum):
    """Why ``session_init`` reports a session other than the one the request named."""

    SESSION_ID_MISSING = "session_id_missing"
    SESSION_NOT_FOUND = "session_not_found"
    SESSION_MISMATCH = "session_mismatch"
    """The sent id belongs to another conversation (two conversations share one id file)."""


class ExecutedBy(StrEnum):
    """Who runs a tool the model called: the host (the session pauses) or nonoka."""

    HOST = "host"
    NONOKA = "nonoka"


class FinishReason(StrEnum):
    """Why a request ended; ``tool_calls`` means paused, waiting for host tool results."""

    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    CANCELLED = "cancelled"
    ERROR = "error"
    LIMIT = "limit"


FINISH_REASONS: Final = tuple(FinishReason)


# -- warning codes ---------------------------------------------------------------------


class WarningCode(StrEnum):
    """The ``code`` of a ``warning`` event: something the host should know."""

    SESSION_NOT_FOUND_STARTING_NEW = "session_not_found_starting_new"
    SESSION_ID_MISSING_STARTING_FRESH = "session_id_missing_starting_fresh"
    SESSION_MISMATCH_STARTING_NEW = "session_mismatch_starting_new"
    CONVERSATION_KEY_IGNORED = "conversation_key_ignored"
    STORE_REGRESSED = "store_regressed"
    SESSION_BRANCHED = "session_branched"


WARNING_CODES: Final[Mapping[WarningCode, str]] = MappingProxyType({
    WarningCode.SESSION_MISMATCH_STARTING_NEW:
        "the sent session_id belongs to a different conversation (its stored history does "
        "not match the request's) and no session matched conversation_key; a new session "
        "was started (seeded with the history)",
    WarningCode.SESSION_NOT_FOUND_STARTING_NEW:
        "the requested session_id is not in this project's database and no session "
        "matched conversation_key; a new session was started (seeded with the history)",
    WarningCode.SESSION_ID_MISSING_STARTING_FRESH:
        "the history is a continuation but no session_id was sent and none matched "
        "conversation_key; a new session was started (seeded with the history); details "
        "list the most recently active sessions",
    WarningCode.CONVERSATION_KEY_IGNORED:
        "conversation_key is not 64 lower-case hex digits (the SHA-256 of the first user "
        "message), so it was ignored: this request cannot be recovered by key; fix the "
        "provider",
    WarningCode.STORE_REGRESSED:
        "the database holds fewer entries of this session than the provider saw at the end "
        "of an earlier turn: it went back in time (restored from a backup or a snapshot?); "
        "the turn goes on from what is stored",
    WarningCode.SESSION_BRANCHED:
        "the history agrees with a stored conversation only up to a point (an undo, a fork, "
        "an edited earlier message, or turns the host never saw), so the turn continues in "
        "a branch that shares the stored entries before that point; details name "
        "forked_from, fork_point and why",
})
"""Every warning code with the message the bridge sends."""

# -- error codes -----------------------------------------------------------------------


class ErrorCode(StrEnum):
    """The ``code`` of an ``error`` event, or of a ``ProtocolError``."""

    # A request line the bridge cannot use (raised as ProtocolError by the decoders).
    FRAME_TOO_LARGE = "frame_too_large"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    UNKNOWN_REQUEST_TYPE = "unknown_request_type"
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_PROTOCOL_VERSION = "unsupported_protocol_version"
    MISSING_CAPABILITY = "missing_capability"
    # An event line a provider cannot use.
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    INVALID_EVENT = "invalid_event"
    # Running the request failed.
    SESSION_BUSY = "session_busy"
    SESSION_CONFLICT = "session_conflict"
    SESSION_CORRUPT = "session_corrupt"
    STORE_ERROR = "store_error"
    INVALID_CWD = "invalid_cwd"
    MODEL_NOT_CONFIGURED = "model_not_configured"
    MODEL_ERROR = "model_error"
    TOOL_ERROR = "tool_error"
    TOOL_RESULT_MISMATCH = "tool_result_mismatch"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"


ERROR_CODES: Final[Mapping[ErrorCode, str]] = MappingProxyType({
    ErrorCode.FRAME_TOO_LARGE: "the line is longer than the frame limit",
    ErrorCode.INVALID_UTF8: "the line is not valid UTF-8",
    ErrorCode.INVALID_JSON:
        "the line is not one complete JSON value (often: a truncated line)",
    ErrorCode.NOT_AN_OBJECT: "the line is JSON but not an object",
    ErrorCode.UNKNOWN_REQUEST_TYPE: "`type` is missing or names no request type",
    ErrorCode.INVALID_REQUEST: "fields are missing or have the wrong type; details list them",
    ErrorCode.UNSUPPORTED_PROTOCOL_VERSION:
        "`protocol.version` is not one this bridge speaks",
    ErrorCode.MISSING_CAPABILITY:
        "`protocol.required_capabilities` names something unsupported",
    ErrorCode.UNKNOWN_EVENT_TYPE:
        "(provider side) an event `type` this provider does not know",
    ErrorCode.INVALID_EVENT: "(provider side) an event's fields are missing or mistyped",
    ErrorCode.SESSION_BUSY: "another live process is running this session",
    ErrorCode.SESSION_CONFLICT: "another writer saved the session first",
    ErrorCode.SESSION_CORRUPT: "the stored session cannot be decoded",
    ErrorCode.STORE_ERROR: "the project database failed; nothing stored was changed",
    ErrorCode.INVALID_CWD: "`cwd` does not exist or `.nonoka/` cannot be created in it",
    ErrorCode.MODEL_NOT_CONFIGURED:
        "no model was given and none is configured, or it is unknown",
    ErrorCode.MODEL_ERROR: "the model endpoint failed; `retryable` says whether to try again",
    ErrorCode.TOOL_ERROR: "a tool nonoka runs itself could not be found, validated or run",
    ErrorCode.TOOL_RESULT_MISMATCH: "a `tool` message answers no call the session waits for",
    ErrorCode.CANCELLED: "the request was stopped by cancel, SIGTERM or SIGINT",
    ErrorCode.INTERNAL_ERROR: "a bug in nonoka; the message and stderr say more",
})
"""Every error code with a one-line meaning; ``docs/protocol.md`` has the full table."""

RETRYABLE_ERROR_CODES: Final = frozenset({ErrorCode.SESSION_BUSY, ErrorCode.SESSION_CONFLICT})
"""Codes that are retryable as such; ``model_error`` and ``store_error`` decide per error."""
