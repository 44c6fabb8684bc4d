"""What a real bridge writes is what the protocol's JSON Schema describes.

Every event line of real turns — a host tool call, its results, a warning, a rejected
line — is validated against ``schema.json``, so the schema cannot promise a field the
bridge leaves out or forbid one it sends.
"""

from __future__ import annotations

from typing import Any

from nonoka.testing import call, text
from nonoka.testing.server import Step
from tests.protocol.wire_schema import schema_errors
from tests.support.bridge import Bridge, assistant, chat, one, tool_message, user

DEFINITION = {"protocol_ack": "ProtocolAck", "session_init": "SessionInit",
              "warning": "WarningEvent", "text_delta": "TextDelta",
              "tool_call": "ToolCallEvent", "tool_result": "ToolResultEvent",
              "usage": "UsageEvent", "error": "ErrorEvent", "finish": "Finish"}


def assert_valid(events: list[dict[str, Any]]) -> None:
    for event in events:
        assert schema_errors(event, "Event") == [], event
        assert schema_errors(event, DEFINITION[event["type"]]) == [], event


def test_the_events_of_real_turns_match_the_schema(bridge: Bridge,
                                                   scripted: list[Step]) -> None:
    tools = [{"name": "read", "description": "Read a file",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    scripted.extend([call("read", {"path": "a.txt"}, id="call_r1"), text("it says hi")])
    first = bridge.run(chat([user("read a.txt")], tools=tools, new_session=True,
                            request_id="req-1"))
    assert one(first, "finish")["finish_reason"] == "tool_calls"
    session_id = one(first, "session_init")["session_id"]
    history = [user("read a.txt"),
               assistant("", [{"id": "call_r1", "name": "read",
                               "arguments": '{"path": "a.txt"}'}]),
               tool_message("call_r1", "hi")]
    second = bridge.run(chat(history, tools=tools, session_id=session_id,
                             conversation_key="not-a-key"))
    assert one(second, "warning")["code"] == "conversation_key_ignored"
    assert one(second, "finish")["finish_reason"] == "stop"
    rejected, _ = bridge.run_lines(b'{"type":"chat","request_id":"r","protocol":{"version":"9"}}\n'
                                   b"not json\n")
    assert [e["type"] for e in rejected] == ["error", "finish", "error", "finish"]

    seen = [*first, *second, *rejected]
    assert {e["type"] for e in seen} >= {"protocol_ack", "session_init", "warning",
                                         "text_delta", "tool_call", "usage", "error",
                                         "finish"}
    assert_valid(seen)
