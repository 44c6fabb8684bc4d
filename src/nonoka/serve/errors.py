"""Errors as OpenAI's APIs give them: ``{"error": {message, type, param, code}}``.

Clients match on the status and on ``code`` (openai-python maps the status to an
exception class, Codex retries ``previous_response_not_found`` with the full input), so
a failure a request caused is a 4xx with ``invalid_request_error``, and one upstream of
nonoka is told apart from one of the client's own: the provider refusing nonoka's own
key is a 502, never a 401 the client would take for its key. Every message is redacted
(``nonoka.redact``), so no credential nonoka holds reaches a client.

Standard library only, besides ``nonoka.errors`` and ``nonoka.redact``.
"""

from __future__ import annotations

import json
from typing import Any

from nonoka.errors import Failure
from nonoka.redact import redact_text

INVALID = "invalid_request_error"
SERVER = "server_error"


class ApiError(Exception):
    """A request answered with an error body."""

    def __init__(self, status: int, message: str, *, type: str = INVALID,
                 code: str | None = None, param: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.retry_after = retry_after
        """Seconds a client should wait before trying again, when known."""

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"retry-after": str(max(0, round(self.retry_after)))}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


def error_body(message: str, *, type: str = INVALID, code: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": redact_text(message), "type": type, "param": param,
                      "code": code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 for something the request said."""
    return ApiError(400, message, param=param, code=code)


def previous_not_found(response_id: str) -> ApiError:
    return ApiError(400, f"Previous response with id '{response_id}' not found.",
                    code="previous_response_not_found", param="previous_response_id")


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, f"{what} with id '{ident}' not found.", code="not_found")


def not_available(feature: str, param: str | None = None) -> ApiError:
    """A part of the API this server does not offer yet."""
    return ApiError(400, f"{feature} is not available in nonoka serve yet", param=param,
                    code="unsupported_feature")


_STATUS = {"invalid_request": 400, "model_not_configured": 400, "invalid_cwd": 500,
           "tool_result_mismatch": 400, "session_busy": 409, "session_conflict": 409,
           "session_corrupt": 500, "store_error": 500}


def failure_error(failure: Failure) -> ApiError:
    """What a client is told of a turn that failed (``nonoka.errors.failure_of``)."""
    if failure.code == "model_error":
        return _upstream(failure)
    status = _STATUS.get(failure.code, 500)
    if status == 500 and failure.retryable:
        status = 503
    return ApiError(status, failure.message, type=INVALID if status < 500 else SERVER,
                    code=failure.code, param=None)


def _upstream(failure: Failure) -> ApiError:
    """A model call that failed: the provider's own status and code where they are the
    client's business (a context overflow, a rate limit), else a 502."""
    provider = failure.provider or {}
    status = provider.get("status")
    code = _provider_code(provider.get("body")) or "model_error"
    if status in (400, 404, 413, 422):
        return ApiError(400, failure.message, code=code)
    if status == 429:
        wait = provider.get("retry_after")
        return ApiError(429, failure.message, type="rate_limit_error", code=code,
                        retry_after=wait if isinstance(wait, int | float) else None)
    return ApiError(502, failure.message, type=SERVER, code="upstream_error")


def provider_error(body: Any) -> dict[str, Any] | None:
    """The ``error`` object of a provider's JSON error body (OpenAI's and Anthropic's
    alike), or ``None``."""
    if not isinstance(body, str):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else None


def _provider_code(body: Any) -> str | None:
    """The ``error.code`` (or ``error.type``) of a provider's JSON error body."""
    error = provider_error(body)
    if error is None:
        return None
    code = error.get("code") or error.get("type")
    return code if isinstance(code, str) and code else None


def api_error(exc: BaseException) -> ApiError:
    """Any failure as the error a client is told (a bug's traceback goes to stderr)."""
    if isinstance(exc, ApiError):
        return exc
    from nonoka.errors import failure_of

    return failure_error(failure_of(exc))
