"""A host's files reach the model whichever way the bridge picks the session: the prompt of
a new conversation, of a session named by a history with no answer yet, and of a
continuation keeps its ``parts`` (docs/protocol.md §4)."""

from __future__ import annotations

from typing import Any

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.support.bridge import Bridge, assistant, chat, load_state, one, user

PNG = "iVBORw0KGgo="
PARTS = {"protocol": {"version": "1", "required_capabilities": ["parts"]}}


def with_image(said: str) -> dict[str, Any]:
    return {"role": "user", "content": said,
            "parts": [{"type": "file", "media_type": "image/png", "data": PNG},
                      {"type": "text", "text": said}]}


def _sent_image(server: ScriptedOpenAIServer) -> list[Any]:
    last = server.requests[-1]["messages"][-1]
    assert last["role"] == "user"
    return [p for p in last["content"] if isinstance(p, dict) and p.get("type") == "image_url"]


def test_a_new_conversation_keeps_its_files(bridge: Bridge, scripted: list[Step],
                                            server: ScriptedOpenAIServer) -> None:
    scripted.append(text("a small image"))
    events = bridge.run(chat([with_image("what is this?")], new_session=True, **PARTS))
    assert events[-1]["finish_reason"] == "stop", events
    assert _sent_image(server) == [{"type": "image_url",
                                    "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
    state = load_state(bridge, one(events, "session_init")["session_id"])
    assert state is not None
    assert [e.parts is not None for e in state.memory_entries] == [True, False]


def test_a_named_session_and_a_continuation_keep_their_files(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    scripted.extend([text("first"), text("second"), text("third")])
    first = bridge.run(chat([user("hello")], new_session=True))
    sid = one(first, "session_init")["session_id"]
    # A history with no answer yet that names the session: its prompt is appended.
    bridge.run(chat([with_image("and this?")], session_id=sid, **PARTS))
    assert _sent_image(server)
    # A continuation whose new prompt carries a file.
    history = [user("hello"), assistant("first"), with_image("and this?"), assistant("second"),
               with_image("one more")]
    events = bridge.run(chat(history, session_id=sid, **PARTS))
    assert one(events, "session_init")["session_id"] == sid
    assert _sent_image(server)
