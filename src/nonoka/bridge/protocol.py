"""Typed envelope of the bridge protocol, version "1", shared by the bridge and providers.

One pydantic model per request and per event, with exactly the wire names of
``docs/protocol.md``. Decoding runs the cheap frame checks of ``nonoka.bridge.frames``
first, then validates fields strictly (JSON ``"true"`` is not a boolean, ``5`` is not a
string): a protocol is easier to keep honest when nothing is silently coerced.

Unknown fields are ignored in both directions, so a newer peer may add optional fields
without a version bump; anything a peer must understand goes in
``protocol.required_capabilities`` instead.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from nonoka.bridge.frames import (
    CAP_CANCEL,
    CAP_CONVERSATION_KEY_RECOVERY,
    CAP_HOST_TOOLS,
    CAP_SESSION_INIT,
    CAP_TITLE_SESSIONS,
    CAP_USAGE,
    CAPABILITIES,
    DEFAULT_MAX_FRAME_BYTES,
    ERROR_CANCELLED,
    ERROR_CODES,
    ERROR_FRAME_TOO_LARGE,
    ERROR_INTERNAL_ERROR,
    ERROR_INVALID_CWD,
    ERROR_INVALID_EVENT,
    ERROR_INVALID_JSON,
    ERROR_INVALID_REQUEST,
    ERROR_INVALID_UTF8,
    ERROR_MISSING_CAPABILITY,
    ERROR_MODEL_ERROR,
    ERROR_MODEL_NOT_CONFIGURED,
    ERROR_NOT_AN_OBJECT,
    ERROR_SESSION_BUSY,
    ERROR_SESSION_CONFLICT,
    ERROR_SESSION_CORRUPT,
    ERROR_STORE_ERROR,
    ERROR_TOOL_ERROR,
    ERROR_TOOL_RESULT_MISMATCH,
    ERROR_UNKNOWN_EVENT_TYPE,
    ERROR_UNKNOWN_REQUEST_TYPE,
    ERROR_UNSUPPORTED_PROTOCOL_VERSION,
    EVENT_TYPES,
    FINISH_REASONS,
    PROTOCOL_VERSION,
    REQUEST_TYPES,
    RETRYABLE_ERROR_CODES,
    SUPPORTED_PROTOCOL_VERSIONS,
    WARNING_CODES,
    WARNING_SESSION_ID_MISSING_STARTING_FRESH,
    WARNING_SESSION_NOT_FOUND_STARTING_NEW,
    ProtocolError,
    check_event_frame,
    check_request_frame,
    conversation_key,
    dump_line,
    is_continuation,
)
from nonoka.messages import Message

__all__ = [
    "CAPABILITIES",
    "CAP_CANCEL",
    "CAP_CONVERSATION_KEY_RECOVERY",
    "CAP_HOST_TOOLS",
    "CAP_SESSION_INIT",
    "CAP_TITLE_SESSIONS",
    "CAP_USAGE",
    "DEFAULT_MAX_FRAME_BYTES",
    "ERROR_CANCELLED",
    "ERROR_CODES",
    "ERROR_FRAME_TOO_LARGE",
    "ERROR_INTERNAL_ERROR",
    "ERROR_INVALID_CWD",
    "ERROR_INVALID_EVENT",
    "ERROR_INVALID_JSON",
    "ERROR_INVALID_REQUEST",
    "ERROR_INVALID_UTF8",
    "ERROR_MISSING_CAPABILITY",
    "ERROR_MODEL_ERROR",
    "ERROR_MODEL_NOT_CONFIGURED",
    "ERROR_NOT_AN_OBJECT",
    "ERROR_SESSION_BUSY",
    "ERROR_SESSION_CONFLICT",
    "ERROR_SESSION_CORRUPT",
    "ERROR_STORE_ERROR",
    "ERROR_TOOL_ERROR",
    "ERROR_TOOL_RESULT_MISMATCH",
    "ERROR_UNKNOWN_EVENT_TYPE",
    "ERROR_UNKNOWN_REQUEST_TYPE",
    "ERROR_UNSUPPORTED_PROTOCOL_VERSION",
    "EVENT_TYPES",
    "FINISH_REASONS",
    "PROTOCOL_VERSION",
    "REQUEST_TYPES",
    "RETRYABLE_ERROR_CODES",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "WARNING_CODES",
    "WARNING_SESSION_ID_MISSING_STARTING_FRESH",
    "WARNING_SESSION_NOT_FOUND_STARTING_NEW",
    "BaseEvent",
    "CancelRequest",
    "ChatRequest",
    "ErrorEvent",
    "Event",
    "Finish",
    "FinishTermination",
    "HostToolSpec",
    "ProtocolAck",
    "ProtocolError",
    "ProtocolSpec",
    "Request",
    "RequestLimits",
    "SessionInit",
    "TextDelta",
    "ToolCallEvent",
    "ToolResultEvent",
    "UsageEvent",
    "UsageTotals",
    "WarningEvent",
    "conversation_key",
    "decode_event",
    "decode_request",
    "encode_event",
    "encode_request",
    "is_continuation",
]

FinishReason = Literal["stop", "tool_calls", "cancelled", "error", "limit"]
RecoveryReason = Literal["session_id_missing", "session_not_found", "session_mismatch"]


class _Frame(BaseModel):
    """Common config: immutable, finite numbers only, unknown fields ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)


# -- requests --------------------------------------------------------------------------


class ProtocolSpec(_Frame):
    """The contract a request is written against."""

    version: Literal["1"] = PROTOCOL_VERSION
    required_capabilities: list[str] = Field(default_factory=list)


class HostToolSpec(_Frame):
    """A tool the host runs; the model sees it, the bridge pauses when it is called."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments."""


class RequestLimits(_Frame):
    """Per-request budget overrides; ``None`` leaves the configured value."""

    max_model_turns: int | None = Field(default=None, ge=0)
    max_tool_calls: int | None = Field(default=None, ge=0)
    wall_timeout_seconds: float | None = Field(default=None, ge=0)
    max_total_tokens: int | None = Field(default=None, ge=0)
    max_cost_usd: float | None = Field(default=None, ge=0)


class ChatRequest(_Frame):
    """Run one turn: the full history the host holds, plus where and how to run it."""

    type: Literal["chat"] = "chat"
    protocol: ProtocolSpec = Field(default_factory=ProtocolSpec)
    """Required on the wire (the frame check enforces it); defaulted for convenience."""
    request_id: str | None = None
    purpose: Literal["chat", "title"] = "chat"
    messages: list[Message] = Field(min_length=1)
    tools: list[HostToolSpec] = Field(default_factory=list)
    session_id: str | None = None
    new_session: bool = False
    conversation_key: str | None = None
    cwd: str | None = None
    model: str | None = None
    limits: RequestLimits | None = None

    @field_validator("session_id", "conversation_key")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        """SPEC §2.3 treats an empty session id as a missing one; so do we."""
        return value if value is not None and value.strip() else None

    @field_validator("messages")
    @classmethod
    def _tool_messages_name_their_call(cls, value: list[Message]) -> list[Message]:
        """A tool result that names no call would surface later as a confusing error."""
        for index, message in enumerate(value):
            if message.role == "tool" and not message.tool_call_id:
                raise PydanticCustomError(
                    "tool_call_id_missing",
                    "message {index} has role 'tool' but no tool_call_id",
                    {"index": index})
        return value

    @field_validator("tools")
    @classmethod
    def _tool_names_unique(cls, value: list[HostToolSpec]) -> list[HostToolSpec]:
        """The model calls tools by name, so two with one name cannot both be reached."""
        names = [tool.name for tool in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PydanticCustomError("duplicate_tool_names",
                                      "tool names must be unique; repeated: {names}",
                                      {"names": ", ".join(duplicates)})
        return value


class CancelRequest(_Frame):
    """Stop the running request; the bridge saves the session and finishes 'cancelled'."""

    type: Literal["cancel"] = "cancel"
    request_id: str | None = None


Request = Annotated[ChatRequest | CancelRequest, Field(discriminator="type")]

# -- events ----------------------------------------------------------------------------


class BaseEvent(_Frame):
    """What every event carries."""

    request_id: str | None = None
    """Echoed from the request, so a provider can match events to requests."""


class ProtocolAck(BaseEvent):
    """First event of every usable request: which version and capabilities apply."""

    type: Literal["protocol_ack"] = "protocol_ack"
    version: str = PROTOCOL_VERSION
    capabilities: list[str] = Field(default_factory=lambda: list(CAPABILITIES))
    server_version: str


class SessionInit(BaseEvent):
    """The session this request runs in; a chat provider persists the id."""

    type: Literal["session_init"] = "session_init"
    session_id: str
    recovered: bool = False
    recovery_reason: RecoveryReason | None = None


class WarningEvent(BaseEvent):
    """Something the host should know that did not stop the request."""

    type: Literal["warning"] = "warning"
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class TextDelta(BaseEvent):
    """A piece of streamed assistant text."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallEvent(BaseEvent):
    """The model called a tool; ``executed_by`` says who runs it."""

    type: Literal["tool_call"] = "tool_call"
    tool_call_id: str
    tool_name: str
    arguments: str = "{}"
    """The JSON text the model wrote, passed through as is (it may even be invalid)."""
    executed_by: Literal["host", "nonoka"]


class ToolResultEvent(BaseEvent):
    """A tool nonoka ran itself finished (host tools report through the host)."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False


class UsageEvent(BaseEvent):
    """Counts of one model call — not cumulative; ``finish.usage`` has the total."""

    type: Literal["usage"] = "usage"
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_usd: float | None = Field(default=None, ge=0)


class ErrorEvent(BaseEvent):
    """Something failed; a ``finish`` follows."""

    type: Literal["error"] = "error"
    code: str
    message: str
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_protocol_error(cls, error: ProtocolError) -> ErrorEvent:
        return cls(code=error.code, message=error.message, retryable=error.retryable,
                   details=error.details, request_id=error.request_id)


class UsageTotals(_Frame):
    """What a whole request used, across its model calls."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)


class FinishTermination(_Frame):
    """Why the run stopped, when the runtime recorded a reason (e.g. which limit)."""

    reason: str
    detail: str = ""
    limit: str | None = None


class Finish(BaseEvent):
    """Last event of a request. ``tool_calls`` means: paused, waiting for host results."""

    type: Literal["finish"] = "finish"
    finish_reason: FinishReason
    usage: UsageTotals = Field(default_factory=UsageTotals)
    termination: FinishTermination | None = None


Event = Annotated[
    ProtocolAck | SessionInit | WarningEvent | TextDelta | ToolCallEvent | ToolResultEvent
    | UsageEvent | ErrorEvent | Finish,
    Field(discriminator="type"),
]

_REQUEST_MODELS: dict[str, type[ChatRequest] | type[CancelRequest]] = {
    "chat": ChatRequest, "cancel": CancelRequest}
_EVENT_MODELS: dict[str, type[BaseEvent]] = {
    model.model_fields["type"].default: model
    for model in (ProtocolAck, SessionInit, WarningEvent, TextDelta, ToolCallEvent,
                  ToolResultEvent, UsageEvent, ErrorEvent, Finish)
}

# -- encoding and decoding -------------------------------------------------------------


def encode_event(event: BaseEvent) -> bytes:
    """One event as its line: compact UTF-8 JSON, ``type`` first, unset optionals omitted."""
    return _encode(event)


def encode_request(request: ChatRequest | CancelRequest) -> bytes:
    """One request as its line, in the same form as events."""
    return _encode(request)


def decode_request(
    line: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> ChatRequest | CancelRequest:
    """Parse and validate one request line; anything unusable raises ``ProtocolError``."""
    obj = check_request_frame(line, max_frame_bytes=max_frame_bytes)
    model = _REQUEST_MODELS[obj["type"]]
    try:
        return model.model_validate(obj, strict=True)
    except ValidationError as exc:
        raise _field_errors(ERROR_INVALID_REQUEST, f"{obj['type']} request", exc,
                            obj.get("request_id")) from None


def decode_event(line: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Event:
    """Parse and validate one event line (the provider side).

    An unknown event ``type`` raises ``ProtocolError`` with code ``unknown_event_type``;
    providers should skip such lines, since a newer bridge may add event types.
    """
    obj = check_event_frame(line, max_frame_bytes=max_frame_bytes)
    model = _EVENT_MODELS[obj["type"]]
    try:
        event = model.model_validate(obj, strict=True)
    except ValidationError as exc:
        raise _field_errors(ERROR_INVALID_EVENT, f"{obj['type']} event", exc,
                            obj.get("request_id")) from None
    return event  # type: ignore[return-value]  # _EVENT_MODELS only holds Event members


def _encode(frame: BaseModel) -> bytes:
    data = frame.model_dump(mode="json", exclude_none=True)
    return dump_line({"type": data.pop("type"), **data})


_MAX_LISTED_ERRORS = 3
_MAX_DETAILED_ERRORS = 20


def _field_errors(code: str, what: str, exc: ValidationError, request_id: Any,
                  ) -> ProtocolError:
    """A short, path-first summary of pydantic's errors (inputs are never echoed)."""
    errors = [{"loc": _path(e["loc"]), "msg": e["msg"], "type": e["type"]}
              for e in exc.errors(include_url=False, include_input=False,
                                  include_context=False)]
    listed = "; ".join(f"{e['loc'] or '(request)'}: {e['msg']}"
                       for e in errors[:_MAX_LISTED_ERRORS])
    more = len(errors) - _MAX_LISTED_ERRORS
    if more > 0:
        listed += f"; and {more} more (see details)"
    return ProtocolError(
        code,
        f"invalid {what}: {listed}; fix these fields and resend (see docs/protocol.md)",
        {"errors": errors[:_MAX_DETAILED_ERRORS], "count": len(errors)},
        request_id=request_id if isinstance(request_id, str) else None,
    )


def _path(loc: tuple[int | str, ...]) -> str:
    """``("messages", 0, "role")`` -> ``messages[0].role``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
