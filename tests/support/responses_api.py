"""Requests to OpenAI's Responses API, checked against the official ``openai`` package's
own request type."""

from __future__ import annotations

from typing import Any

from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import TypeAdapter

REQUEST: TypeAdapter[Any] = TypeAdapter(ResponseCreateParamsStreaming)


def materialized(value: Any) -> Any:
    """A validated value with every lazily checked iterable read (which validates it)."""
    if isinstance(value, dict):
        return {k: materialized(v) for k, v in value.items()}
    if value is None or isinstance(value, str | bytes | int | float | bool):
        return value
    return [materialized(v) for v in value]


def assert_valid_request(body: dict[str, Any]) -> None:
    """``body`` is a ``ResponseCreateParamsStreaming`` and holds nothing the type lacks
    (pydantic drops a ``TypedDict``'s unknown keys, so the validated value must equal it)."""
    assert materialized(REQUEST.validate_python(body)) == body
