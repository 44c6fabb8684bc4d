"""The bridge protocol envelope: round trips, every error code, and hostile input."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from nonoka.protocol import frames
from nonoka.protocol.frames import (
    CAPABILITIES,
    EVENT_TYPES,
    ProtocolError,
    conversation_key,
    is_continuation,
)
from nonoka.protocol.models import (
    AssistantMetadata,
    CancelRequest,
    ChatRequest,
    ErrorEvent,
    Event,
    Finish,
    FinishTermination,
    HostToolSpec,
    ProtocolAck,
    ReasoningDeltaEvent,
    Request,
    RequestLimits,
    SessionInit,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UsageTotals,
    WarningEvent,
    decode_event,
    decode_request,
    encode_event,
    encode_request,
)
from nonoka.protocol.values import ERROR_CODES, RETRYABLE_ERROR_CODES, WARNING_CODES, WarningCode
from nonoka.state.messages import Message, ReasoningPart, ToolCall

ROOT = Path(__file__).resolve().parents[2]


def chat_line(**fields: Any) -> bytes:
    """A valid chat request line with ``fields`` replacing the defaults."""
    base: dict[str, Any] = {
        "type": "chat",
        "protocol": {"version": "1"},
        "request_id": "req-1",
        "messages": [{"role": "user", "content": "hi"}],
        "cwd": "/tmp/project",
    }
    base.update(fields)
    return json.dumps(base).encode() + b"\n"


def full_chat_request() -> ChatRequest:
    return ChatRequest(
        protocol={"version": "1", "required_capabilities": ["host_tools"]},
        request_id="req-7",
        purpose="chat",
        messages=[
            Message(role="system", content="be brief"),
            Message(role="user", content="列出文件 ✨"),
            Message(role="assistant", content="",
                    tool_calls=[ToolCall(id="call_1", name="ls", arguments='{"path": "."}')]),
            Message(role="tool", content="a.txt\nb.txt", tool_call_id="call_1"),
        ],
        tools=[HostToolSpec(name="ls", description="list files",
                            parameters={"type": "object",
                                        "properties": {"path": {"type": "string"}}})],
        session_id="0b7d7c1e-6b5e-4d0c-9a43-1f2e3d4c5b6a",
        new_session=False,
        conversation_key=hashlib.sha256("列出文件 ✨".encode()).hexdigest(),
        cwd="/work/project",
        model="openai:gpt-4o-mini",
        limits=RequestLimits(max_model_turns=8, max_tool_calls=20, wall_timeout_seconds=120.5,
                             max_total_tokens=100_000, max_cost_usd=0.25),
    )


ALL_EVENTS: list[Any] = [
    ProtocolAck(server_version="0.1.0", request_id="r"),
    ProtocolAck(server_version="0.1.0"),
    SessionInit(session_id="s-1", request_id="r"),
    SessionInit(session_id="s-2", recovered=True, recovery_reason="session_id_missing"),
    SessionInit(session_id="s-3", recovered=True, recovery_reason="session_not_found"),
    WarningEvent(code=WarningCode.SESSION_ID_MISSING_STARTING_FRESH, message="started fresh",
                 details={"recent_sessions": [{"id": "s-9", "title": None}]}, request_id="r"),
    TextDelta(text="Hello, wörld\n"),
    ToolCallEvent(tool_call_id="c1", tool_name="ls", arguments='{"path":"."}',
                  executed_by="host"),
    ToolCallEvent(tool_call_id="c2", tool_name="calc", arguments="not json",
                  executed_by="nonoka"),
    ToolResultEvent(tool_call_id="c2", tool_name="calc", content="42", is_error=False),
    ToolResultEvent(tool_call_id="c3", tool_name="calc", content="boom", is_error=True),
    UsageEvent(input_tokens=12, output_tokens=3),
    UsageEvent(input_tokens=12, output_tokens=3, cost_usd=0.0001),
    UsageEvent(input_tokens=1200, output_tokens=300, cache_read_tokens=1000,
               reasoning_tokens=120),
    ReasoningDeltaEvent(text="first, the files"),
    AssistantMetadata(reasoning=[ReasoningPart(text="thought", provider_metadata={
        "openai_compatible": {"field": "reasoning_content", "send_back": True}})]),
    ToolCallEvent(tool_call_id="c9", tool_name="read", arguments="{}", executed_by="host",
                  provider_metadata={"openai_compatible": {
                      "extra_content": {"google": {"thought_signature": "c2ln"}}}}),
    ErrorEvent(code="model_error", message="HTTP 503 from api", retryable=True,
               details={"status": 503}),
    Finish(finish_reason="stop", usage=UsageTotals(input_tokens=5, output_tokens=6)),
    Finish(finish_reason="tool_calls", request_id="r"),
    Finish(finish_reason="limit", usage=UsageTotals(input_tokens=1, output_tokens=1,
                                                    cost_usd=0.5),
           termination=FinishTermination(reason="limit", detail="max_tool_calls reached",
                                         limit="max_tool_calls")),
    Finish(finish_reason="cancelled"),
    Finish(finish_reason="error"),
]


# -- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: e.type)
def test_every_event_round_trips(event: Any) -> None:
    line = encode_event(event)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_event(line) == event
    assert json.loads(line)["type"] == event.type
    assert line.startswith(b'{"type":')


def test_every_event_type_is_covered() -> None:
    assert {e.type for e in ALL_EVENTS} == set(EVENT_TYPES)


@pytest.mark.parametrize("request_", [full_chat_request(),
                                      ChatRequest(messages=[Message(role="user", content="x")]),
                                      ChatRequest(purpose="title", new_session=True,
                                                  messages=[Message(role="user", content="t")]),
                                      CancelRequest(request_id="req-7"), CancelRequest()],
                         ids=["full-chat", "minimal-chat", "title", "cancel", "bare-cancel"])
def test_every_request_round_trips(request_: ChatRequest | CancelRequest) -> None:
    line = encode_request(request_)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_request(line) == request_


def test_discriminated_unions_pick_the_model_by_type() -> None:
    events: TypeAdapter[Any] = TypeAdapter(Event)
    assert isinstance(events.validate_python({"type": "text_delta", "text": "x"}), TextDelta)
    requests: TypeAdapter[Any] = TypeAdapter(Request)
    assert isinstance(requests.validate_python({"type": "cancel"}), CancelRequest)


def test_encoding_is_compact_utf8_and_omits_unset_optionals() -> None:
    line = encode_event(TextDelta(text="日本語"))
    assert line == '{"type":"text_delta","text":"日本語"}\n'.encode()
    minimal = encode_request(ChatRequest(messages=[Message(role="user", content="hi")]))
    assert b"null" not in minimal
    assert b'"tool_calls"' not in minimal


def test_tool_call_arguments_stay_a_json_string() -> None:
    request = decode_request(chat_line(messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "name": "ls", "arguments": '{"a": 1}'}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
    ]))
    assert isinstance(request, ChatRequest)
    calls = request.messages[1].tool_calls
    assert calls is not None
    assert calls[0].arguments == '{"a": 1}'


def test_ack_line_is_byte_identical_to_the_model() -> None:
    for rid in ("req-1", None):
        fast = frames.ack_line(server_version="0.1.0", request_id=rid)
        assert fast == encode_event(ProtocolAck(server_version="0.1.0", request_id=rid))
        ack = decode_event(fast)
        assert isinstance(ack, ProtocolAck)
        assert ack.version == "1"
        assert ack.capabilities == list(CAPABILITIES)


def test_rejection_lines_match_the_models() -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_request(chat_line(protocol={"version": "2"}))
    error = caught.value
    expected = (encode_event(ErrorEvent.from_protocol_error(error))
                + encode_event(Finish(finish_reason="error", request_id="req-1")))
    assert frames.rejection_lines(error) == expected
    assert frames.error_line(error.code, error.message, request_id=error.request_id,
                             details=error.details) == expected.splitlines(keepends=True)[0]


# -- frame details ---------------------------------------------------------------------


def test_crlf_bom_and_missing_newline_are_accepted() -> None:
    body = chat_line().rstrip(b"\n")
    for line in (body, body + b"\r\n", b"\xef\xbb\xbf" + body + b"\n"):
        assert isinstance(decode_request(line), ChatRequest)


def test_line_separators_in_text_are_escaped() -> None:
    event = TextDelta(text="a\u2028b\u2029c\x85d\ne")
    line = encode_event(event)
    assert len(line.decode().splitlines()) == 1
    assert decode_event(line) == event


def test_unpaired_surrogates_become_replacement_characters() -> None:
    line = chat_line(messages=[{"role": "user", "content": "x\ud83d"}])
    assert b"\\ud83d" in line
    request = decode_request(line)
    assert isinstance(request, ChatRequest)
    assert request.messages[0].content == "x\ufffd"
    encoded = encode_event(TextDelta(text="y\udc00"))
    assert decode_event(encoded) == TextDelta(text="y\ufffd")
    # A proper pair written as escapes is one character, not two replacements.
    pair = decode_request(chat_line(messages=[{"role": "user", "content": "😀"}]))
    assert isinstance(pair, ChatRequest)
    assert pair.messages[0].content == "😀"


def test_non_finite_numbers_never_reach_the_wire() -> None:
    line = encode_event(WarningEvent(code="w", message="m", details={"x": float("nan")}))
    assert json.loads(line)["details"] == {"x": None}
    assert frames.dump_line({"type": "x", "v": [float("inf")]}) == b'{"type":"x","v":[null]}\n'
    with pytest.raises(ValidationError):
        UsageEvent(input_tokens=1, output_tokens=1, cost_usd=float("nan"))


def test_blank_session_id_means_none() -> None:
    request = decode_request(chat_line(session_id="  ", conversation_key=""))
    assert isinstance(request, ChatRequest)
    assert request.session_id is None
    assert request.conversation_key is None


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    request = decode_request(chat_line(future_field={"x": 1}))
    assert isinstance(request, ChatRequest)
    event = decode_event(b'{"type":"text_delta","text":"x","new_thing":true}')
    assert event == TextDelta(text="x")


# -- every error code ------------------------------------------------------------------


BAD_REQUESTS: list[tuple[str, bytes, str]] = [
    ("truncated line", chat_line()[:40], "invalid_json"),
    ("cut inside a string", b'{"type":"chat","messa', "invalid_json"),
    ("two objects on a line", b'{"type":"cancel"}{"type":"cancel"}', "invalid_json"),
    ("empty line", b"\n", "invalid_json"),
    ("NaN literal", b'{"type":"cancel","x":NaN}', "invalid_json"),
    ("nested too deep", b"[" * 100_000, "invalid_json"),
    ("huge integer", b'{"type":"cancel","n":' + b"9" * 5000 + b"}", "invalid_json"),
    ("latin-1 bytes", '{"type":"chat","x":"café"}'.encode("latin-1"), "invalid_utf8"),
    ("lone continuation byte", b'{"type":"cancel"}\x80\n', "invalid_utf8"),
    ("array instead of object", b'[{"type":"chat"}]\n', "not_an_object"),
    ("string instead of object", b'"chat"\n', "not_an_object"),
    ("unknown type", b'{"type":"chatt"}\n', "unknown_request_type"),
    ("missing type", b'{"messages":[]}\n', "unknown_request_type"),
    ("messages is a string", chat_line(messages="hi"), "invalid_request"),
    ("role robot", chat_line(messages=[{"role": "robot", "content": "beep"}]),
     "invalid_request"),
    ("empty history", chat_line(messages=[]), "invalid_request"),
    ("new_session as string", chat_line(new_session="yes"), "invalid_request"),
    ("content as number", chat_line(messages=[{"role": "user", "content": 5}]),
     "invalid_request"),
    ("tool message without call id", chat_line(messages=[{"role": "tool", "content": "x"}]),
     "invalid_request"),
    ("duplicate tool names", chat_line(tools=[{"name": "a"}, {"name": "a"}]),
     "invalid_request"),
    ("negative limit", chat_line(limits={"max_tool_calls": -1}), "invalid_request"),
    ("purpose unknown", chat_line(purpose="summary"), "invalid_request"),
    ("no protocol", chat_line(protocol=None), "invalid_request"),
    ("protocol without version", chat_line(protocol={}), "invalid_request"),
    ("version 2", chat_line(protocol={"version": "2"}), "unsupported_protocol_version"),
    ("version as number", chat_line(protocol={"version": 1}), "unsupported_protocol_version"),
    ("missing capability",
     chat_line(protocol={"version": "1", "required_capabilities": ["cancel", "telepathy"]}),
     "missing_capability"),
]


@pytest.mark.parametrize(("line", "code"), [(line, code) for _, line, code in BAD_REQUESTS],
                         ids=[name for name, _, _ in BAD_REQUESTS])
def test_bad_requests_raise_stable_codes(line: bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_request(line)
    error = caught.value
    assert error.code == code
    assert error.code in ERROR_CODES
    assert 20 < len(error.message) < 400
    json.dumps(error.to_event())  # details are always JSON


def test_frame_too_large_at_the_default_17_mib() -> None:
    content = "x" * (17 * 1024 * 1024)
    line = chat_line(messages=[{"role": "user", "content": content}])
    with pytest.raises(ProtocolError) as caught:
        decode_request(line)
    assert caught.value.code == "frame_too_large"
    assert "16.0 MiB" in caught.value.message
    assert caught.value.details["max_frame_bytes"] == 16 * 1024 * 1024


@pytest.mark.parametrize("where", ["tool parameters", "a message", "a list of objects"])
def test_nesting_is_limited_exactly_at_max_nesting(where: str) -> None:
    def nested(levels: int) -> object:
        value: object = 1
        for i in range(levels):
            value = [value] if i % 2 else {"k": value}
        return value

    def line(levels: int) -> bytes:  # ``levels`` arrays and objects in all, the line's own too
        if where == "tool parameters":  # line, tools, tool: 3 levels
            return chat_line(tools=[{"name": "t", "description": "d",
                                     "parameters": nested(levels - 3)}])
        if where == "a message":  # line, messages, message: 3 levels
            return chat_line(messages=[{"role": "user", "content": "hi",
                                        "extra": nested(levels - 3)}])
        return json.dumps([nested(levels - 1)] * 3).encode()

    assert not frames._too_deep(json.loads(line(frames.MAX_NESTING)))
    with pytest.raises(ProtocolError) as caught:
        decode_request(line(frames.MAX_NESTING + 1))
    assert caught.value.code == "invalid_json"
    assert caught.value.details["reason"] == "too_deep"


def test_frame_limit_is_configurable_and_excludes_the_newline() -> None:
    line = b'{"type":"cancel"}'
    assert isinstance(decode_request(line + b"\n", max_frame_bytes=len(line)), CancelRequest)
    with pytest.raises(ProtocolError) as caught:
        decode_request(line, max_frame_bytes=len(line) - 1)
    assert caught.value.code == "frame_too_large"


def test_messages_name_the_problem_and_the_fix() -> None:
    cases = {
        chat_line()[:40]: "truncated",
        b'{"type":"nope"}': "chat, cancel",
        chat_line(protocol={"version": "2"}): '"1"',
        chat_line(protocol={"version": "1", "required_capabilities": ["telepathy"]}):
            "telepathy",
        chat_line(messages=[{"role": "robot"}]): "messages[0].role",
        b"\xff": "offset 0",
    }
    for line, needle in cases.items():
        with pytest.raises(ProtocolError) as caught:
            decode_request(line)
        assert needle in caught.value.message


def test_invalid_request_stays_short_and_lists_paths() -> None:
    many = [{"role": "robot", "content": i} for i in range(200)]
    with pytest.raises(ProtocolError) as caught:
        decode_request(chat_line(messages=many, request_id="req-42"))
    error = caught.value
    assert error.code == "invalid_request"
    assert len(error.message) < 400
    assert "more" in error.message
    assert error.details["count"] == 400
    assert len(error.details["errors"]) == 20
    assert error.details["errors"][0]["loc"] == "messages[0].role"
    assert "input" not in error.details["errors"][0]
    assert error.request_id == "req-42"  # so the error event can still be matched


def test_protocol_checks_come_before_field_checks() -> None:
    line = chat_line(protocol={"version": "2"}, messages="not even a list")
    with pytest.raises(ProtocolError) as caught:
        decode_request(line)
    assert caught.value.code == "unsupported_protocol_version"
    assert caught.value.details == {"requested": "2", "supported": ["1"]}


def test_missing_capability_lists_what_is_missing() -> None:
    line = chat_line(protocol={"version": "1", "required_capabilities": ["b_cap", "a_cap",
                                                                           "cancel"]})
    with pytest.raises(ProtocolError) as caught:
        decode_request(line)
    assert caught.value.details["missing"] == ["a_cap", "b_cap"]


@pytest.mark.parametrize(("line", "code"), [
    (b'{"type":"telepathy","request_id":"r"}', "unknown_event_type"),
    (b'{"type":"usage","input_tokens":"3","output_tokens":1}', "invalid_event"),
    (b'{"type":"finish","finish_reason":"done"}', "invalid_event"),
    (b'{"type":"tool_call","tool_call_id":"c","tool_name":"t","executed_by":"robot"}',
     "invalid_event"),
    (b"[]", "not_an_object"),
])
def test_bad_events_raise_stable_codes(line: bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_event(line)
    assert caught.value.code == code


# -- hostile input never escapes as anything but ProtocolError -------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                           allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
hypothesis_settings = settings(max_examples=300, deadline=None,
                               suppress_health_check=[HealthCheck.too_slow])


def decode_or_protocol_error(line: bytes) -> ChatRequest | CancelRequest | None:
    """Decode, or return None for a ProtocolError with a known code; nothing else passes."""
    code = None
    try:
        return decode_request(line)
    except ProtocolError as error:
        code = error.code
    assert code in ERROR_CODES
    return None


@hypothesis_settings
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    decode_or_protocol_error(data)
    code = None
    try:
        decode_event(data)
    except ProtocolError as error:
        code = error.code
    assert code is None or code in ERROR_CODES


@hypothesis_settings
@given(json_values)
def test_arbitrary_json_values(value: Any) -> None:
    decode_or_protocol_error(json.dumps(value).encode())
    if isinstance(value, dict):
        for kind in ("chat", "cancel"):
            decode_or_protocol_error(json.dumps({**value, "type": kind}).encode())


texts = st.text(max_size=20)
ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    calls = None
    if role == "assistant" and draw(st.booleans()):
        calls = draw(st.lists(st.builds(ToolCall, id=ids, name=ids, arguments=texts),
                              min_size=1, max_size=2))
    return Message(role=role, content=draw(texts), tool_calls=calls,
                   tool_call_id=draw(ids) if role == "tool" else None)


chat_requests = st.builds(
    ChatRequest,
    request_id=st.none() | ids,
    purpose=st.sampled_from(["chat", "title"]),
    messages=st.lists(messages(), min_size=1, max_size=5),
    tools=st.lists(st.builds(HostToolSpec, name=ids, description=texts), max_size=3,
                   unique_by=lambda t: t.name),
    session_id=st.none() | texts,
    new_session=st.booleans(),
    conversation_key=st.none() | texts,
    cwd=st.none() | texts,
    model=st.none() | texts,
    limits=st.none() | st.builds(RequestLimits,
                                 max_model_turns=st.none() | st.integers(0, 100),
                                 max_cost_usd=st.none() | st.floats(0, 10)),
)


@hypothesis_settings
@given(chat_requests)
def test_valid_requests_decode_to_themselves(request_: ChatRequest) -> None:
    assert decode_request(encode_request(request_)) == request_


def _mutate(obj: Any, path: list[Any], value: Any, delete: bool) -> None:
    for key in path[:-1]:
        obj = obj[key]
    if delete and isinstance(obj, dict):
        obj.pop(path[-1], None)
    else:
        obj[path[-1]] = value


def _paths(obj: Any, prefix: list[Any]) -> list[list[Any]]:
    found = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, item in obj.items():
            found += _paths(item, [*prefix, key])
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            found += _paths(item, [*prefix, index])
    return found


@hypothesis_settings
@given(chat_requests, st.data())
def test_mutated_valid_requests(request_: ChatRequest, data: st.DataObject) -> None:
    line = encode_request(request_)
    how = data.draw(st.sampled_from(["field", "truncate", "flip"]))
    if how == "field":
        obj = json.loads(line)
        path = data.draw(st.sampled_from(_paths(obj, [])))
        _mutate(obj, path, data.draw(json_values), data.draw(st.booleans()))
        line = json.dumps(obj).encode()
    elif how == "truncate":
        line = line[:data.draw(st.integers(0, len(line) - 1))]
    else:
        index = data.draw(st.integers(0, len(line) - 1))
        line = line[:index] + bytes([data.draw(st.integers(0, 255))]) + line[index + 1:]
    decode_or_protocol_error(line)


# -- conversation identity -------------------------------------------------------------


def test_conversation_key_hashes_the_first_user_message() -> None:
    history = [Message(role="system", content="sys"), Message(role="user", content="hi"),
               Message(role="assistant", content="hello"),
               Message(role="user", content="again")]
    expected = "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"
    assert conversation_key(history) == expected
    assert conversation_key([m.model_dump() for m in history]) == expected  # plain dicts
    assert conversation_key(history[:2]) == expected  # stable as the history grows


def test_conversation_key_is_none_without_usable_text() -> None:
    assert conversation_key([]) is None
    assert conversation_key([Message(role="system", content="sys")]) is None
    assert conversation_key([Message(role="user", content="")]) is None
    assert conversation_key([Message(role="user", content=" \n")]) is None


def test_conversation_key_hashes_text_exactly_as_sent() -> None:
    assert conversation_key([Message(role="user", content="hi ")]) != \
        conversation_key([Message(role="user", content="hi")])
    assert conversation_key([{"role": "user", "content": "a\ud800"}]) == \
        hashlib.sha256("a\ufffd".encode()).hexdigest()


def test_is_continuation() -> None:
    assert not is_continuation([])
    assert not is_continuation([Message(role="system", content="s"),
                                Message(role="user", content="u")])
    assert is_continuation([Message(role="user", content="u"),
                            Message(role="assistant", content="a")])
    assert is_continuation([{"role": "tool", "content": "r", "tool_call_id": "c"}])


# -- cheap import and documentation ----------------------------------------------------


def test_frames_import_does_not_load_pydantic() -> None:
    code = ("import sys, nonoka.protocol.frames as f; "
            "f.check_request_frame(b'{\"type\":\"cancel\"}'); "
            "f.ack_line(server_version='0'); "
            "f.conversation_key([{'role': 'user', 'content': 'hi'}]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'pydantic_core', 'nonoka')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = json.loads(out.replace("'", '"'))
    assert not [m for m in loaded if m.startswith("pydantic")], loaded
    assert set(loaded) <= {"nonoka", "nonoka.protocol", "nonoka.protocol.frames", "nonoka.errors"}


def test_docs_list_every_code_and_capability() -> None:
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    for name in [*ERROR_CODES, *WARNING_CODES, *CAPABILITIES, *EVENT_TYPES]:
        assert f"`{name}`" in doc, name


def test_docs_examples_are_valid_frames() -> None:
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    sent = [line[2:].encode() for line in doc.splitlines() if line.startswith("→ ")]
    received = [line[2:].encode() for line in doc.splitlines() if line.startswith("← ")]
    assert len(sent) >= 4
    assert len(received) >= 15
    decoded = [decode_or_protocol_error(line) for line in sent]
    chats = [r for r in decoded if isinstance(r, ChatRequest)]
    assert len(chats) == 3
    for chat in chats:
        assert chat.conversation_key == conversation_key(chat.messages)
        assert chat.new_session is not is_continuation(chat.messages)
    for line in received:
        decode_event(line)


def test_error_and_warning_codes_are_distinct_snake_case() -> None:
    codes = [*ERROR_CODES, *WARNING_CODES]
    assert len(codes) == len(set(codes))
    assert all(c.replace("_", "").isalnum() and c.islower() for c in codes)
    assert set(ERROR_CODES) >= RETRYABLE_ERROR_CODES


def test_a_resent_history_is_validated_as_a_whole_request_would_be() -> None:
    """Messages equal to the previous request's are not validated again; what a request
    decodes to, and the errors it gets, are those of validating it whole."""
    history: list[dict[str, Any]] = [{"role": "user", "content": f"q{i}"} for i in range(3)]

    def decoded(messages: list[dict[str, Any]]) -> ChatRequest:
        request = decode_request(chat_line(messages=messages))
        assert isinstance(request, ChatRequest)
        whole = ChatRequest.model_validate(json.loads(chat_line(messages=messages)),
                                           strict=True)
        assert request == whole
        return request

    first = decoded(history)
    grown = [*history, {"role": "assistant", "content": "a", "tool_calls": [
        {"id": "c1", "name": "t", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"}]
    second = decoded(grown)
    assert second.messages[:3] == first.messages and len(second.messages) == 5
    edited = [{"role": "user", "content": "changed"}, *grown[1:],
              {"role": "user", "content": "q5"}]
    assert decoded(edited).messages[0].content == "changed"
    with pytest.raises(ProtocolError) as caught:  # the bad message's index is the request's
        decode_request(chat_line(messages=[*edited, {"role": "tool", "content": "x"}]))
    assert "messages[6]" in caught.value.message or "message 6" in caught.value.message
    with pytest.raises(ProtocolError):
        decode_request(chat_line(messages=[*edited, {"role": "robot", "content": "x"}]))
