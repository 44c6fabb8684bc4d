"""A server that numbers tool calls per answer (``call_0`` every time): the host's result
for this turn's ``call_0`` answers this turn's call, not the earlier one, and the model
is asked again; no request is answered from storage twice without progress."""

from __future__ import annotations

from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.bridge.test_lineage import BASH
from tests.support.bridge import Bridge, assistant, chat, of_type, one, tool_message, user

CALL = [{"id": "call_0", "name": "bash", "arguments": '{"cmd": "ls"}'}]


def test_a_reused_call_id_is_answered_where_it_was_made(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    history = [user("list files")]
    scripted.append(call("bash", {"cmd": "ls"}, id="call_0"))
    sid = one(bridge.run(chat(history, tools=BASH)), "session_init")["session_id"]
    history += [assistant("", CALL), tool_message("call_0", "a.py")]
    scripted.append(text("one file"))
    assert one(bridge.run(chat(history, session_id=sid, tools=BASH)),
               "finish")["finish_reason"] == "stop"
    history += [assistant("one file"), user("and again")]
    scripted.append(call("bash", {"cmd": "ls"}, id="call_0"))
    assert one(bridge.run(chat(history, session_id=sid, tools=BASH)),
               "finish")["finish_reason"] == "tool_calls"
    history += [assistant("", CALL), tool_message("call_0", "a.py b.py")]
    scripted.append(text("two files now"))
    events = bridge.run(chat(history, session_id=sid, tools=BASH))
    assert one(events, "finish")["finish_reason"] == "stop"
    assert of_type(events, "tool_call") == []  # no replay of the answered call
    assert "".join(e["text"] for e in of_type(events, "text_delta")) == "two files now"
    assert len(server.requests) == 4
    assert server.requests[-1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_0", "content": "a.py b.py"}


def test_a_replay_is_not_repeated_without_progress(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    history = [user("list files")]
    scripted.append(call("bash", {"cmd": "ls"}, id="call_0"))
    sid = one(bridge.run(chat(history, tools=BASH)), "session_init")["session_id"]
    # The host lost the answer and sends the same request again: it is replayed once...
    again = bridge.run(chat(history, session_id=sid, tools=BASH))
    assert [e["tool_call_id"] for e in of_type(again, "tool_call")] == ["call_0"]
    # ...and a second time without progress it is an error that names the cause.
    looping = bridge.run(chat(history, session_id=sid, tools=BASH))
    error = one(looping, "error")
    assert "already replayed" in error["message"]
    assert of_type(looping, "tool_call") == []
    assert len(server.requests) == 1
