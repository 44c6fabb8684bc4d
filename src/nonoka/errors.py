"""Errors nonoka raises, as one short tree, each with the protocol code a host receives.

    NonokaError                      internal_error   the base; a failure nobody classified
    ├── ConfigurationError           invalid_request  a caller mistake: fix the code or settings
    │   ├── MissingExtraError        invalid_request  an optional extra is not installed
    │   │                                              (also an ImportError)
    │   ├── NotAvailableError        invalid_request  (nonoka ui) an action it cannot take
    │   ├── NotStoredError           invalid_request  (sessions export) an id with no stored
    │   │                                              conversation (also a KeyError)
    │   ├── ModelNotConfiguredError  model_not_configured  no model given or configured, or
    │   │                                              an unknown one
    │   └── WorkspaceError           invalid_cwd      the workspace is missing, or .nonoka/
    │                                                  cannot be created in it
    ├── ToolError                    tool_error       a tool is unknown, its arguments are
    │                                                  invalid, or it failed
    ├── ToolResultMismatchError      tool_result_mismatch  a tool result answers no pending call
    ├── ModelError                   model_error      the model endpoint failed (names endpoint
    │                                                  and status); retryable per error
    ├── StoreError                   store_error      storage failed; stored data is left
    │   │                                              untouched; retryable per error (a
    │   │                                              lost connection, a lock held long)
    │   ├── SessionConflictError     session_conflict (retryable) another writer saved first
    │   ├── SessionBusyError         session_busy     (retryable) another process runs it
    │   ├── CorruptSessionError      session_corrupt  a stored row cannot be decoded
    │   ├── ImportInterruptedError   store_error      (sessions import) a write failed part
    │   │                                              way; it names what was stored
    │   └── UnsupportedVersionError  store_error      data written by a newer nonoka: upgrade
    ├── ProtocolError                (per line)       a request line is not a usable frame
    │                                                  (the bridge's frame checks)
    └── BridgeError                  internal_error   (provider side) the bridge could not
        │                                              start, broke the protocol or died
        └── BridgeTimeoutError       internal_error   the bridge did not finish in time

Every class carries its ``code`` and whether it is ``retryable`` as class attributes
(an instance may refine them: ``ModelError`` knows per call, ``ProtocolError`` per
line). ``failure_of`` turns any exception into the ``Failure`` a front end reports, so
the bridge, ``nonoka run`` and the timeline name one error the same way.
``UnsupportedVersionError`` is a ``store_error`` wherever it is met, for a whole database
or one session: nothing is damaged, the remedy is to upgrade nonoka.

Cancellation is not an error: it uses ``asyncio.CancelledError`` and ends a run with
status ``cancelled``.

The bridge imports this module before anything else, so it imports nothing itself.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path loads this module
if TYPE_CHECKING:
    from typing import Any

__all__ = (
    "ConfigurationError",
    "CorruptSessionError",
    "Failure",
    "MissingExtraError",
    "ModelError",
    "ModelNotConfiguredError",
    "NonokaError",
    "SessionBusyError",
    "SessionConflictError",
    "StoreError",
    "ToolError",
    "ToolResultMismatchError",
    "UnsupportedVersionError",
    "WorkspaceError",
    "failure_of",
)


class NonokaError(Exception):
    """Base class for every error nonoka raises on purpose."""

    code: str = "internal_error"
    """The protocol's error code (``docs/protocol.md``) a host receives for this error."""
    retryable: bool = False
    """Whether sending the same request again later may succeed."""

    def describe(self) -> str:
        """The message for a person, with what to do about it where nonoka knows."""
        return str(self)


class ConfigurationError(NonokaError):
    """The caller configured something wrong; the message says what to change."""

    code = "invalid_request"


class ModelNotConfiguredError(ConfigurationError):
    """No model was given and none is configured, or the model named is unknown."""

    code = "model_not_configured"


class WorkspaceError(ConfigurationError):
    """The workspace directory does not exist, or ``.nonoka/`` cannot be created in it."""

    code = "invalid_cwd"


class MissingExtraError(ConfigurationError, ImportError):
    """A feature needs an optional extra that is not installed; the message names it
    (``pip install '.[postgres]'`` in the clone). Also an ``ImportError``, since it is raised
    where the feature is imported."""


class ToolError(NonokaError):
    """A tool could not be found, validated or run."""

    code = "tool_error"


class ToolResultMismatchError(NonokaError):
    """A tool result was given for a call the session is not waiting for."""

    code = "tool_result_mismatch"


class ModelError(NonokaError):
    """A model call failed.

    ``retryable`` tells whether trying again later may help (rate limits, 5xx, timeouts).
    """

    code = "model_error"

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        status: int | None = None,
        retryable: bool = False,
        body: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status = status
        self.retryable = retryable
        self.body = body
        """The provider's error body, as it sent it (a host reads its ``error.code``)."""
        self.retry_after = retry_after
        """Seconds the provider asked to wait (``retry-after``), if it said."""

    def provider_error(self) -> dict[str, Any] | None:
        """The error as the provider gave it: status, body, ``retry-after``; ``None``
        when no provider answered (nonoka's own failure, an unreachable endpoint)."""
        if self.status is None and self.body is None:
            return None
        return {"status": self.status, "body": self.body, "retry_after": self.retry_after,
                "retryable": self.retryable}


class StoreError(NonokaError):
    """A storage operation failed. Nothing stored was changed by the failure."""

    code = "store_error"

    def __init__(self, *args: object, retryable: bool | None = None) -> None:
        super().__init__(*args)
        if retryable is not None:  # a lost connection or a lock held too long: try again
            self.retryable = retryable

    def describe(self) -> str:
        return store_advice(str(self))


class SessionConflictError(StoreError):
    """The session was saved by another writer since this copy was loaded."""

    code = "session_conflict"
    retryable = True

    def describe(self) -> str:
        return str(self)


class SessionBusyError(StoreError):
    """Another live process holds the session's lease."""

    code = "session_busy"
    retryable = True

    def describe(self) -> str:
        return str(self)


class CorruptSessionError(StoreError):
    """A stored session row cannot be decoded."""

    code = "session_corrupt"

    def describe(self) -> str:
        return _with_advice(str(self), _CORRUPT_ADVICE)


class UnsupportedVersionError(StoreError):
    """Stored data was written by a newer version of nonoka."""


class Failure:
    """An error as the protocol and the timeline name it: code, message, retryable."""

    __slots__ = ("code", "message", "provider", "retryable")

    def __init__(self, code: str, message: str, retryable: bool = False,
                 provider: dict[str, Any] | None = None) -> None:
        self.code = code
        self.message = message
        self.retryable = retryable
        self.provider = provider
        """For a failed model call: the provider's own error (``ModelError``)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Failure) and (self.code, self.message, self.retryable) == (
            other.code, other.message, other.retryable)

    def __hash__(self) -> int:
        return hash((self.code, self.message, self.retryable))

    def __repr__(self) -> str:
        return f"Failure({self.code!r}, {self.message!r}, retryable={self.retryable})"


def failure_of(exc: BaseException) -> Failure:
    """The one mapping from an exception to what a host is told.

    A ``NonokaError`` carries its code; anything else is a bug in nonoka, reported as
    ``internal_error`` with its traceback on stderr.
    """
    if isinstance(exc, ModelError):
        return Failure(exc.code, exc.describe(), exc.retryable, exc.provider_error())
    if isinstance(exc, NonokaError):
        return Failure(exc.code, exc.describe(), exc.retryable)
    import sys
    import traceback

    traceback.print_exception(exc, file=sys.stderr)
    return Failure(NonokaError.code,
                   f"{type(exc).__name__}: {exc} (a bug in nonoka; stderr has the traceback)")


_CORRUPT_ADVICE = ("this session cannot be continued as stored: `nonoka db check --repair` "
                   "rebuilds what can be derived from the stored rows; otherwise start a new "
                   "conversation, or restore .nonoka/sessions.db from a backup to get it back")
_STORE_ADVICE = (
    ("disk is full", "the disk is full: free some space, then send the request again"),
    ("disk i/o error", "writing the database failed (is the disk full, or a file size limit "
                       "reached?): free some space or check the disk, then send the request "
                       "again"),
    ("readonly database", "the database is read-only: make .nonoka/ and its files writable "
                          "for this user, then send the request again"),
    ("unable to open database file", "the database cannot be opened: make sure .nonoka/ "
                                     "exists and is writable for this user"),
    ("permission denied", "make .nonoka/ and its files writable for this user, then send "
                          "the request again"),
    ("read-only file system", "the workspace is on a read-only file system: point "
                              "NONOKA_DATABASE_URL at a writable place"),
    ("database is locked", "another process kept the database locked for longer than the "
                           "busy timeout: try again when it has finished"),
    ("authentication failed", "check the user and password in NONOKA_DATABASE_URL"),
    ("does not exist", "check the user, database and schema named in NONOKA_DATABASE_URL"),
    ("connection failed", "check that the PostgreSQL server is running and reachable, and "
                          "that NONOKA_DATABASE_URL names it"),
)


def store_advice(message: str) -> str:
    """A store error's message with what to do about it, for the errors people can fix.

    SQLite names the failure ("disk I/O error") but not the remedy; the person reading
    the error needs the remedy. A failed write changes nothing that was stored.
    """
    lowered = message.lower()
    for needle, advice in _STORE_ADVICE:
        if needle in lowered:
            return _with_advice(message, advice + " (the failed write changed nothing)")
    return message


def _with_advice(message: str, advice: str) -> str:
    return f"{message.rstrip('. ')}; {advice}"
