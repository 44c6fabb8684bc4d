"""Typed envelope of the bridge protocol, version "1", shared by the bridge and providers.

One pydantic model per request and per event, with exactly the wire names of
``docs/protocol.md``. Decoding runs the cheap frame checks of ``nonoka.protocol.frames``
first, then validates fields strictly (JSON ``"true"`` is not a boolean, ``5`` is not a
string): a protocol is easier to keep honest when nothing is silently coerced.

Unknown fields are ignored in both directions, so a newer peer may add optional fields
without a version bump; anything a peer must understand goes in
``protocol.required_capabilities`` instead. These models are the machine-readable source
of the protocol: ``nonoka.protocol.schema`` turns them into the committed JSON Schema.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from nonoka.protocol.frames import (
    CAPABILITIES,
    DEFAULT_MAX_FRAME_BYTES,
    MAX_REQUEST_ID,
    PROTOCOL_VERSION,
    EventType,
    ProtocolError,
    Purpose,
    RequestLines,
    RequestType,
    check_event_frame,
    check_request_frame,
    dump_line,
    echoed_id,
)
from nonoka.protocol.values import ErrorCode, ExecutedBy, FinishReason, RecoveryReason
from nonoka.state.messages import Message, ReasoningPart

__all__ = (
    "AssistantMetadata",
    "BaseEvent",
    "CallOptionsSpec",
    "CancelRequest",
    "ChatRequest",
    "ErrorEvent",
    "Event",
    "Finish",
    "FinishTermination",
    "HostToolSpec",
    "ProtocolAck",
    "ProtocolSpec",
    "ReasoningDeltaEvent",
    "Request",
    "RequestLimits",
    "SessionInit",
    "TextDelta",
    "ToolCallEvent",
    "ToolResultEvent",
    "UsageEvent",
    "UsageTotals",
    "WarningEvent",
    "decode_event",
    "decode_request",
    "encode_event",
    "encode_request",
    "validate_request",
)


class _WireValue:
    """A ``StrEnum`` field that takes its wire strings under strict validation.

    Strict pydantic wants an enum *instance* from Python input, and the decoders validate
    already-parsed JSON, so the field checks the string against the enum's values (with
    the error a ``Literal`` gives), then hands back the member. In JSON Schema the field is
    a reference to the enum, named after its class.
    """

    def __get_pydantic_core_schema__(self, source: type[StrEnum],
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        values = core_schema.literal_schema([member.value for member in source])
        return core_schema.no_info_after_validator_function(
            source, values, metadata={"nonoka_enum": source})

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        enum: type[StrEnum] = schema["metadata"]["nonoka_enum"]
        name = enum.__name__
        return handler(core_schema.definitions_schema(
            core_schema.definition_reference_schema(name),
            [core_schema.enum_schema(enum, list(enum), sub_type="str", ref=name)]))


_WIRE = _WireValue()
PurposeValue = Annotated[Purpose, _WIRE]
RecoveryReasonValue = Annotated[RecoveryReason, _WIRE]
ExecutedByValue = Annotated[ExecutedBy, _WIRE]
FinishReasonValue = Annotated[FinishReason, _WIRE]


def _required_on_the_wire(*names: str) -> Any:
    """``json_schema_extra`` marking fields the frame checks require although the model
    defaults them for convenience (``type``, ``protocol``, ``protocol.version``)."""
    def extra(schema: dict[str, Any]) -> None:
        required = set(schema.get("required", ())) | set(names)
        schema["required"] = [name for name in schema["properties"] if name in required]
    return extra


class _Frame(BaseModel):
    """Common config: immutable, finite numbers only, unknown fields ignored.

    The docstrings under fields become the field descriptions of the JSON Schema (read by
    ``nonoka.protocol.schema`` from the source, not by pydantic at import: that would
    cost every bridge process ~15 ms).
    """

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)


# -- requests --------------------------------------------------------------------------


class ProtocolSpec(_Frame):
    """The contract a request is written against."""

    model_config = ConfigDict(json_schema_extra=_required_on_the_wire("version"))

    version: Literal["1"] = PROTOCOL_VERSION
    """Checked before any other field: another version is ``unsupported_protocol_version``."""
    required_capabilities: list[str] = Field(default_factory=list)
    """Capabilities the provider cannot work without (``missing_capability`` if absent)."""
    features: list[str] | None = None
    """What the provider can receive besides protocol 1's events: ``reasoning``
    (``reasoning_delta`` and ``assistant_metadata``). A bridge sends nothing a request
    did not ask for, so an older provider keeps working. ``host_retries``: the host
    retries a failed model call itself (OpenCode does), so the bridge makes each model
    call once and passes a retryable failure, with its ``retry_after``, straight back."""


class HostToolSpec(_Frame):
    """A tool the host runs; the model sees it, the bridge pauses when it is called."""

    name: str = Field(min_length=1)
    """Unique among the request's tools."""
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments."""


class RequestLimits(_Frame):
    """Per-request budget overrides; a limit left out (or null) keeps the configured value."""

    max_model_turns: int | None = Field(default=None, ge=0)
    max_tool_calls: int | None = Field(default=None, ge=0)
    wall_timeout_seconds: float | None = Field(default=None, ge=0)
    max_total_tokens: int | None = Field(default=None, ge=0)
    max_cost_usd: float | None = Field(default=None, ge=0)


class CallOptionsSpec(_Frame):
    """How the host wants this step's model call made; each field that is set is
    forwarded to a provider that takes it (``extra``: provider-specific body fields,
    by their wire names, added as they are)."""

    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    response_format: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    reasoning_effort: str | None = None
    top_k: int | None = Field(default=None, ge=0)
    """Sample from the top K tokens only: sent where the API takes it (Anthropic's
    Messages API, ``top_k``); an adapter whose API has no such field leaves it out."""
    eager_input_streaming: list[str] | None = None
    """Names of the request's tools whose arguments the model streams without buffering
    them for validation (Anthropic's per-tool ``eager_input_streaming: true``); an
    adapter whose API has no such setting leaves it out."""
    extra: dict[str, Any] = Field(default_factory=dict)


class ChatRequest(_Frame):
    """Run one turn: the full history the host holds, plus where and how to run it."""

    model_config = ConfigDict(json_schema_extra=_required_on_the_wire("type", "protocol"))

    type: Literal[RequestType.CHAT] = RequestType.CHAT
    protocol: ProtocolSpec = Field(default_factory=ProtocolSpec)
    """Required on the wire (the frame check enforces it); defaulted for convenience."""
    request_id: str | None = Field(default=None, max_length=MAX_REQUEST_ID)
    """Echoed on every event of this request (at most 256 characters)."""
    purpose: PurposeValue = Purpose.CHAT
    """Title requests run in their own session."""
    messages: list[Message] = Field(min_length=1)
    """The full history the host holds, oldest first."""
    tools: list[HostToolSpec] = Field(default_factory=list)
    """Host-executed tools."""
    session_id: str | None = None
    """The session to continue; ``""`` counts as none."""
    new_session: bool = False
    """Force a new session."""
    conversation_key: str | None = None
    """SHA-256 hex of the first user message's text; ``""`` counts as none."""
    host_session_id: str | None = Field(default=None, max_length=256)
    """The host's own id of this conversation (an OpenCode session's id): every host
    conversation keeps its own line of nonoka sessions, whatever their content; ``""``
    counts as none."""
    host_parent_session_id: str | None = Field(default=None, max_length=256)
    """The host's id of the conversation that started this one (an OpenCode subagent's
    parent session, its ``x-parent-session-id``): a new session records it, and lists
    show the session under its parent's line; ``""`` counts as none."""
    headers: dict[str, str] | None = None
    """The request headers the host gave its provider for this step; the adapters forward
    the ones ``nonoka.llm.host_headers`` allows to the model endpoint (never credentials)."""
    cwd: str | None = None
    """The workspace (the project database lives in ``<cwd>/.nonoka/``); default: the
    bridge's working directory."""
    model: str | None = None
    """A model spec such as ``openai:gpt-4o-mini``; default: from configuration."""
    limits: RequestLimits | None = None
    options: CallOptionsSpec | None = None
    """This step's call options (capability ``parts``)."""
    revision: int | None = Field(default=None, ge=0)
    """The most conversation entries the provider saw stored for ``session_id`` (from
    ``finish``); a store holding fewer went back in time and the bridge warns
    (``store_regressed``)."""

    @field_validator("session_id", "conversation_key", "host_session_id",
                     "host_parent_session_id")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        """An empty ``session_id`` or ``conversation_key`` counts as none (docs/protocol.md §4)."""
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

    model_config = ConfigDict(json_schema_extra=_required_on_the_wire("type"))

    type: Literal[RequestType.CANCEL] = RequestType.CANCEL
    request_id: str | None = Field(default=None, max_length=MAX_REQUEST_ID)


Request = Annotated[ChatRequest | CancelRequest, Field(discriminator="type")]

# -- events ----------------------------------------------------------------------------


class BaseEvent(_Frame):
    """What every event carries."""

    request_id: str | None = None
    """Echoed from the request, so a provider can match events to requests."""


class ProtocolAck(BaseEvent):
    """First event of every usable request: which version and capabilities apply."""

    type: Literal[EventType.PROTOCOL_ACK] = EventType.PROTOCOL_ACK
    version: str = PROTOCOL_VERSION
    capabilities: list[str] = Field(default_factory=lambda: list[str](CAPABILITIES))
    """Everything this bridge supports."""
    server_version: str
    """nonoka's version."""


class SessionInit(BaseEvent):
    """The session this request runs in; a chat provider persists the id."""

    type: Literal[EventType.SESSION_INIT] = EventType.SESSION_INIT
    session_id: str
    recovered: bool = False
    """The session is not the one the request named (or it named none)."""
    recovery_reason: RecoveryReasonValue | None = None
    forked_from: str | None = None
    """Set when the turn runs in a branch made for it: the session it branched from."""
    fork_point: int | None = None
    """With ``forked_from``: how many of the parent's entries the branch shares."""


class WarningEvent(BaseEvent):
    """Something the host should know that did not stop the request."""

    type: Literal[EventType.WARNING] = EventType.WARNING
    code: str
    """A ``WarningCode``; a newer bridge may send others."""
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class TextDelta(BaseEvent):
    """A piece of streamed assistant text."""

    type: Literal[EventType.TEXT_DELTA] = EventType.TEXT_DELTA
    text: str


class ToolCallEvent(BaseEvent):
    """The model called a tool; ``executed_by`` says who runs it."""

    type: Literal[EventType.TOOL_CALL] = EventType.TOOL_CALL
    tool_call_id: str
    tool_name: str
    arguments: str = "{}"
    """The JSON text the model wrote, passed through as is (it may even be invalid)."""
    executed_by: ExecutedByValue
    provider_metadata: dict[str, Any] | None = None
    """What the provider sent with the call (a thought signature): the host sends it
    back with the call (capability ``parts``)."""


class ReasoningDeltaEvent(BaseEvent):
    """A piece of streamed reasoning (feature ``reasoning``)."""

    type: Literal[EventType.REASONING_DELTA] = EventType.REASONING_DELTA
    text: str


class AssistantMetadata(BaseEvent):
    """After a model call: its reasoning as stored, with the provider's metadata for
    each part, and what the provider attached to the answer (feature ``reasoning``).
    The host keeps them with the message and sends them back in its history."""

    type: Literal[EventType.ASSISTANT_METADATA] = EventType.ASSISTANT_METADATA
    reasoning: list[ReasoningPart] = Field(default_factory=list)
    provider_metadata: dict[str, Any] | None = None


class ToolResultEvent(BaseEvent):
    """A tool nonoka ran itself finished (host tools report through the host)."""

    type: Literal[EventType.TOOL_RESULT] = EventType.TOOL_RESULT
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False


class UsageEvent(BaseEvent):
    """Counts of one model call — not cumulative; ``finish.usage`` has the total."""

    type: Literal[EventType.USAGE] = EventType.USAGE
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    cache_read_tokens: int | None = Field(default=None, ge=0)
    """Of ``input_tokens``, those read from the provider's prompt cache (when any)."""
    cache_write_tokens: int | None = Field(default=None, ge=0)
    """Of ``input_tokens``, those written to the provider's prompt cache (when any)."""
    reasoning_tokens: int | None = Field(default=None, ge=0)
    """Of ``output_tokens``, those the model spent reasoning (when any)."""


class ErrorEvent(BaseEvent):
    """Something failed; a ``finish`` follows."""

    type: Literal[EventType.ERROR] = EventType.ERROR
    code: str
    """An ``ErrorCode``; a newer bridge may send others."""
    message: str
    """For a person: what went wrong and what to do."""
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)
    """Machine-readable specifics (never the offending input itself)."""

    @classmethod
    def from_protocol_error(cls, error: ProtocolError) -> ErrorEvent:
        return cls(code=error.code, message=error.message, retryable=error.retryable,
                   details=error.details, request_id=error.request_id)


class UsageTotals(_Frame):
    """What a whole request used, across its model calls."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    cache_read_tokens: int | None = Field(default=None, ge=0)
    cache_write_tokens: int | None = Field(default=None, ge=0)
    reasoning_tokens: int | None = Field(default=None, ge=0)


class FinishTermination(_Frame):
    """Why the run stopped, when the runtime recorded a reason (e.g. which limit)."""

    reason: str
    detail: str = ""
    limit: str | None = None


class Finish(BaseEvent):
    """Last event of a request. ``tool_calls`` means: paused, waiting for host results."""

    type: Literal[EventType.FINISH] = EventType.FINISH
    finish_reason: FinishReasonValue
    usage: UsageTotals = Field(default_factory=UsageTotals)
    """This request's total."""
    termination: FinishTermination | None = None
    model_finish: str | None = None
    """Why the model stopped the request's last answer, in Chat Completions' names:
    ``length`` (cut at its output limit), ``content_filter``, ``stop``, ``tool_calls``
    (another provider's reason is kept as sent). Absent when no model answered in this
    request (a stored answer sent again) — and from older bridges."""
    revision: int | None = None
    """Conversation entries stored for the session when the request ended; a provider sends
    the highest it saw back as the next request's ``revision``."""


Event = Annotated[
    ProtocolAck | SessionInit | WarningEvent | TextDelta | ToolCallEvent | ToolResultEvent
    | UsageEvent | ErrorEvent | Finish | ReasoningDeltaEvent | AssistantMetadata,
    Field(discriminator="type"),
]

_REQUEST_MODELS: dict[str, type[ChatRequest] | type[CancelRequest]] = {
    RequestType.CHAT: ChatRequest, RequestType.CANCEL: CancelRequest}
_EVENT_MODELS: dict[str, type[BaseEvent]] = {
    model.model_fields["type"].default: model
    for model in (ProtocolAck, SessionInit, WarningEvent, TextDelta, ToolCallEvent,
                  ToolResultEvent, UsageEvent, ErrorEvent, Finish, ReasoningDeltaEvent,
                  AssistantMetadata)
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
    return validate_request(check_request_frame(line, max_frame_bytes=max_frame_bytes))


def validate_request(obj: dict[str, Any], lines: RequestLines | None = None
                     ) -> ChatRequest | CancelRequest:
    """Validate a request object ``check_request_frame`` returned (the line is not parsed
    a second time); anything unusable raises ``ProtocolError``. With ``lines`` (the
    ``RequestLines`` the frame was checked with), messages the last request held are
    taken as validated then."""
    model = _REQUEST_MODELS[obj["type"]]
    try:
        if model is ChatRequest:
            return _validate_chat(obj, lines) if lines is not None else (
                ChatRequest.model_validate(obj, strict=True))
        return model.model_validate(obj, strict=True)
    except ValidationError as exc:
        raise _field_errors(ErrorCode.INVALID_REQUEST, f"{obj['type']} request", exc,
                            echoed_id(obj.get("request_id"))) from None


def _validate_chat(obj: dict[str, Any], lines: RequestLines) -> ChatRequest:
    """A host resends its whole history every turn, so a long-lived bridge would
    validate the same messages again and again, ≈ 1 µs each. Messages equal to the ones
    before (one list comparison in C) are taken as validated; only the rest are."""
    raw = obj.get("messages")
    seen, validated = lines.validated
    count = len(seen)
    checked = lines.resent(raw)  # the frame checks compared the line with the one before
    same = checked[1] == count if checked is not None and checked[0] is seen else (
        isinstance(raw, list) and raw[:count] == seen)
    if not (isinstance(raw, list) and count and len(raw) > count and same):
        request = ChatRequest.model_validate(obj, strict=True)
        if isinstance(raw, list):
            lines.validated = (raw, request.messages)
        return request
    try:
        rest = ChatRequest.model_validate({**obj, "messages": raw[count:]}, strict=True)
    except ValidationError:  # validated whole, so errors name the right message index
        return ChatRequest.model_validate(obj, strict=True)
    messages = [*validated, *rest.messages]
    lines.validated = (raw, messages)
    return rest.model_copy(update={"messages": messages})


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
        raise _field_errors(ErrorCode.INVALID_EVENT, f"{obj['type']} event", exc,
                            echoed_id(obj.get("request_id"))) from None
    return event  # type: ignore[return-value]  # _EVENT_MODELS only holds Event members


def _encode(frame: BaseModel) -> bytes:
    data = frame.model_dump(mode="json", exclude_none=True)
    return dump_line({"type": data.pop("type"), **data})


_MAX_LISTED_ERRORS = 3
_MAX_DETAILED_ERRORS = 20


def _field_errors(code: ErrorCode, what: str, exc: ValidationError, request_id: Any,
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
