"""Errors nonoka raises, as one short tree.

    NonokaError
    ├── ConfigurationError          a caller mistake: fix the code or the settings
    ├── ToolError                   a tool is unknown, its arguments are invalid, or it failed
    ├── ToolResultMismatchError     a tool result answers no pending call
    ├── ModelError                  the model endpoint failed (names endpoint and status)
    └── StoreError                  storage failed; stored data is left untouched
        ├── SessionConflictError     another writer saved the session first
        ├── SessionBusyError         another process is running the session
        ├── CorruptSessionError      a stored row cannot be decoded
        └── UnsupportedVersionError  data written by a newer nonoka

Cancellation is not an error: it uses ``asyncio.CancelledError`` and ends a run with
status ``cancelled``.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "CorruptSessionError",
    "ModelError",
    "NonokaError",
    "SessionBusyError",
    "SessionConflictError",
    "StoreError",
    "ToolError",
    "ToolResultMismatchError",
    "UnsupportedVersionError",
]


class NonokaError(Exception):
    """Base class for every error nonoka raises on purpose."""


class ConfigurationError(NonokaError):
    """The caller configured something wrong; the message says what to change."""


class ToolError(NonokaError):
    """A tool could not be found, validated or run."""


class ToolResultMismatchError(NonokaError):
    """A tool result was given for a call the session is not waiting for."""


class ModelError(NonokaError):
    """A model call failed.

    ``retryable`` tells whether trying again later may help (rate limits, 5xx, timeouts).
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status = status
        self.retryable = retryable


class StoreError(NonokaError):
    """A storage operation failed. Nothing stored was changed by the failure."""


class SessionConflictError(StoreError):
    """The session was saved by another writer since this copy was loaded."""


class SessionBusyError(StoreError):
    """Another live process holds the session's lease."""


class CorruptSessionError(StoreError):
    """A stored session row cannot be decoded."""


class UnsupportedVersionError(StoreError):
    """Stored data was written by a newer version of nonoka."""
