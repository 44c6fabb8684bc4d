"""The pieces on their own: ids that name their place, items to messages, what a turn
brings, the model a request gets, the error a failure becomes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from nonoka.errors import Failure
from nonoka.serve.errors import ApiError, failure_error
from nonoka.serve.ids import new_point, parse_item_id, parse_response_id
from nonoka.serve.inputs import messages_of, parse_create, plan
from nonoka.serve.model import Models
from nonoka.state.messages import Message, ToolCall


def test_ids_name_their_place() -> None:
    sid = str(uuid.uuid4())
    point = new_point(sid, 1234)
    assert point.id.startswith("resp_") and len(point.id) == 5 + 48
    assert parse_response_id(point.id) == point
    item = point.item_id("fc_", 7, 3)
    place = parse_item_id(item)
    assert place is not None
    assert (place.response, place.offset, place.place, place.kind, place.entry) == (
        point, 7, 3, "fc", 1241)
    assert new_point(sid, 1234).id != point.id  # the nonce tells them apart
    for wrong in ("", "resp_", "resp_XYZ", point.id + "0", point.id.upper(), item[:-1]):
        assert parse_response_id(wrong) is None and parse_item_id(wrong) is None
    with pytest.raises(ValueError, match="badly formed"):
        new_point("not-a-uuid", 0)


def items(*given: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    return [(item, f"input[{n}]") for n, item in enumerate(given)]


def test_consecutive_answer_items_are_one_assistant_message() -> None:
    messages = messages_of(items(
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"}))
    assert [(m.role, m.content) for m in messages] == [
        ("system", "Be brief."), ("user", "hi"), ("assistant", "Let me look."),
        ("tool", "one"), ("tool", "two")]
    answer = messages[2]
    assert [c.id for c in answer.tool_calls or []] == ["c1", "c2"]
    assert [r.text for r in answer.reasoning or []] == ["think"]


def test_what_a_turn_brings() -> None:
    call = ToolCall(id="c1", name="f")
    asked = Message(role="assistant", content="", tool_calls=[call])
    answer = Message(role="tool", content="42", tool_call_id="c1")
    question = Message(role="user", content="and?")
    seed, turn = plan([answer], [call])
    assert seed == [] and turn.kind == "tool_results" and turn.results[0].content == "42"
    seed, turn = plan([asked, answer, question], [call])  # the call sent again
    assert seed == [] and turn.kind == "tool_results" and turn.prompt == "and?"
    seed, turn = plan([Message(role="user", content="a"), asked, answer], [])
    assert [m.role for m in seed] == ["user", "assistant"] and turn.kind == "tool_results"
    with pytest.raises(ApiError, match="No tool output found for function call c1"):
        plan([question], [call])
    with pytest.raises(ApiError, match="No tool call found"):
        plan([answer], [])
    with pytest.raises(ApiError, match="must end with a user message"):
        plan([Message(role="assistant", content="x")], [])


@pytest.mark.parametrize(("body", "param"), [
    ({"input": []}, "input"),
    ({"input": "x", "background": True, "store": False}, "background"),
    ({"input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"},
     "conversation"),
    ({"input": "x", "conversation": {"id": 1}}, "conversation"),
    ({"input": "x", "conversation": "conv_1", "store": False}, "store"),
    ({"input": "x", "tools": [{"type": "computer_use_preview"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "tool_search", "execution": "client"}]},
     "tools[0].execution"),
    ({"input": "x", "tools": [{"type": "namespace", "name": "n", "description": "",
                               "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0].type"),
    ({"input": "x", "tools": [{"type": "custom", "name": "a"},
                              {"type": "function", "name": "a"}]}, "tools[1].name"),
    ({"input": "x", "include": ["reasoning.encrypted_content", "x"]}, "include[1]"),
    ({"input": "x", "tools": [{"type": "function", "name": "a"},
                              {"type": "function", "name": "a"}]}, "tools[1].name"),
    ({"input": "x", "metadata": {"k": 1}}, "metadata"),
    ({"input": "x", "store": "yes"}, "store"),
])
def test_bad_requests_name_their_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as raised:
        parse_create(body)
    assert raised.value.status == 400 and raised.value.param == param


def test_the_model_a_request_gets(tmp_path: Path) -> None:
    models = Models(tmp_path, "openai:served-model")
    assert models.pick(None) == "openai:served-model"
    assert models.pick("served-model") == "openai:served-model"
    assert models.pick("gpt-unknown") == "openai:served-model"
    assert models.pick("openai:gpt-4o") == "openai:gpt-4o"  # one nonoka's catalog knows
    assert models.pick("openai:not-in-the-catalog") == "openai:served-model"


@pytest.mark.parametrize(("status", "code", "expected"), [
    (400, "context_length_exceeded", (400, "context_length_exceeded")),
    (401, "invalid_api_key", (502, "upstream_error")),
    (500, None, (502, "upstream_error")),
    (None, None, (502, "upstream_error")),
])
def test_upstream_failures(status: int | None, code: str | None,
                           expected: tuple[int, str]) -> None:
    body = None if code is None else f'{{"error": {{"code": "{code}"}}}}'
    error = failure_error(Failure("model_error", "failed", False,
                                  {"status": status, "body": body}))
    assert (error.status, error.code) == expected


def test_store_failures_say_busy_or_broken() -> None:
    assert failure_error(Failure("session_busy", "busy", True)).status == 409
    assert failure_error(Failure("store_error", "disk full", False)).status == 500
    assert failure_error(Failure("store_error", "locked", True)).status == 503


def test_a_response_without_an_answer_is_read_from_its_timeline() -> None:
    from nonoka.serve.record import left_of
    from nonoka.store.records import EventRecord

    def log(*entries: tuple[str, dict[str, Any]]) -> list[EventRecord]:
        return [EventRecord(session_id="s", kind=kind, data=data, seq=n)
                for n, (kind, data) in enumerate(entries)]

    record = {"model": "openai:m", "created_at": 1}
    killed = log(("request", {}), ("response", {"id": "resp_a", "record": record}),
                 ("partial_answer", {"text": "Once upon"}),
                 ("partial_answer", {"text": " a time"}))
    left = left_of(killed, "resp_a", live=False)
    assert left is not None
    assert (left.status, left.text, left.record) == ("incomplete", "Once upon a time", record)
    running = left_of(killed, "resp_a", live=True)
    assert running is not None and running.status == "in_progress"
    failed = left_of(log(("response", {"id": "resp_b", "record": record}),
                         ("error", {"code": "model_error", "message": "boom"}),
                         ("finish", {"reason": "error"}),
                         ("request", {}), ("response", {"id": "resp_c"}),
                         ("partial_answer", {"text": "not b's"})), "resp_b", live=True)
    assert failed is not None and (failed.status, failed.text, failed.error) == (
        "failed", "", {"code": "model_error", "message": "boom"})
    assert left_of(killed, "resp_unknown", live=False) is None
