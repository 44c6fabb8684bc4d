"""Every row of the session decision chain (docs/protocol.md §7, "Which session a request
runs in"), through real bridge processes."""

from __future__ import annotations

import asyncio
import stat
from typing import Any

from nonoka.store.project import open_project_stores
from nonoka.testing import call, text
from nonoka.testing.server import Step
from tests.support.bridge import (
    Bridge,
    assistant,
    chat,
    first_turn,
    load_state,
    of_type,
    one,
    text_of,
    tool_message,
    user,
)


def stored_contents(bridge: Bridge, session_id: str) -> list[tuple[str, str]]:
    state = load_state(bridge, session_id)
    assert state is not None
    return [(e.role, e.content) for e in state.memory_entries]


def index_ids(bridge: Bridge, purpose: str | None = "chat") -> list[str]:
    async def load() -> list[str]:
        stores = open_project_stores(bridge.project)
        try:
            return [r.session_id for r in await stores.index.list_sessions(purpose=purpose)]
        finally:
            await stores.close()

    return asyncio.run(load())


def test_a_new_conversation_streams_and_stores(bridge: Bridge, scripted: list[Step]) -> None:
    sid, events = first_turn(bridge, scripted, "hello", "hi there")
    assert [e["type"] for e in events][:2] == ["protocol_ack", "session_init"]
    assert events[-1]["type"] == "finish" and events[-1]["finish_reason"] == "stop"
    assert text_of(events) == "hi there"
    usage = one(events, "usage")
    assert usage["input_tokens"] > 0 and events[-1]["usage"]["output_tokens"] > 0
    assert one(events, "session_init")["recovered"] is False
    assert stored_contents(bridge, sid) == [("user", "hello"), ("assistant", "hi there")]
    assert stat.S_IMODE(bridge.db.stat().st_mode) == 0o600
    assert stat.S_IMODE(bridge.db.parent.stat().st_mode) == 0o700


def test_a_known_session_id_continues_it(bridge: Bridge, scripted: list[Step],
                                         server: Any) -> None:
    sid, _ = first_turn(bridge, scripted, "my name is Ana", "hello Ana")
    scripted.append(text("You are Ana"))
    history = [user("my name is Ana"), assistant("hello Ana"), user("who am I?")]
    events = bridge.run(chat(history, session_id=sid))
    assert one(events, "session_init") == {"type": "session_init", "session_id": sid,
                                           "recovered": False}
    sent = server.requests[-1]["messages"]
    assert [m["content"] for m in sent] == ["my name is Ana", "hello Ana", "who am I?"]
    assert len(stored_contents(bridge, sid)) == 4


def test_new_session_flag_forces_a_new_session(bridge: Bridge, scripted: list[Step]) -> None:
    sid, _ = first_turn(bridge, scripted, "one", "1")
    scripted.append(text("2"))
    events = bridge.run(chat([user("one")], session_id=sid, new_session=True))
    assert one(events, "session_init")["session_id"] != sid


def test_unknown_id_is_recovered_by_conversation_key(bridge: Bridge,
                                                     scripted: list[Step]) -> None:
    sid, _ = first_turn(bridge, scripted, "plan a trip", "where to?")
    scripted.append(text("Lisbon is nice"))
    history = [user("plan a trip"), assistant("where to?"), user("somewhere warm")]
    events = bridge.run(chat(history, session_id="00000000-dead-beef-0000-000000000000"))
    init = one(events, "session_init")
    assert init == {"type": "session_init", "session_id": sid, "recovered": True,
                    "recovery_reason": "session_not_found"}
    assert of_type(events, "warning") == []


def test_unknown_id_without_a_match_starts_new_with_a_warning(
        bridge: Bridge, scripted: list[Step], server: Any) -> None:
    scripted.append(text("ok"))
    history = [user("forgotten chat"), assistant("yes?"), user("go on")]
    events = bridge.run(chat(history, session_id="missing-session-1"))
    init = one(events, "session_init")
    assert init["recovered"] is False and init["session_id"] != "missing-session-1"
    warning = one(events, "warning")
    assert warning["code"] == "session_not_found_starting_new"
    # The new session was seeded with the history: the model still sees the conversation.
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "forgotten chat", "yes?", "go on"]
    assert stored_contents(bridge, init["session_id"])[:3] == [
        ("user", "forgotten chat"), ("assistant", "yes?"), ("user", "go on")]


def test_missing_id_is_recovered_by_conversation_key(bridge: Bridge,
                                                     scripted: list[Step]) -> None:
    sid, _ = first_turn(bridge, scripted, "write a poem", "about what?")
    scripted.append(text("roses..."))
    events = bridge.run(chat([user("write a poem"), assistant("about what?"), user("roses")]))
    assert one(events, "session_init") == {"type": "session_init", "session_id": sid,
                                           "recovered": True,
                                           "recovery_reason": "session_id_missing"}
    assert stored_contents(bridge, sid)[-2:] == [("user", "roses"), ("assistant", "roses...")]


def test_missing_id_continuation_without_match_warns_with_recent_sessions(
        bridge: Bridge, scripted: list[Step]) -> None:
    other, _ = first_turn(bridge, scripted, "unrelated", "sure")
    scripted.append(text("continuing"))
    events = bridge.run(chat([user("lost chat"), assistant("hm"), user("more")]))
    warning = one(events, "warning")
    assert warning["code"] == "session_id_missing_starting_fresh"
    recent = warning["details"]["recent_sessions"]
    assert [r["session_id"] for r in recent] == [other]
    assert one(events, "session_init")["session_id"] != other


def test_missing_id_new_history_creates_normally(bridge: Bridge, scripted: list[Step]) -> None:
    first_turn(bridge, scripted, "hi", "hello")
    scripted.append(text("hello again"))
    events = bridge.run(chat([user("hi")]))  # no id, no new_session flag, a new conversation
    assert of_type(events, "warning") == []
    assert one(events, "session_init")["recovered"] is False
    assert len(index_ids(bridge)) == 2


def test_same_first_message_never_recovers_the_wrong_conversation(
        bridge: Bridge, scripted: list[Step]) -> None:
    a, _ = first_turn(bridge, scripted, "hi", "hello A")
    scripted.append(text("A2"))
    bridge.run(chat([user("hi"), assistant("hello A"), user("talk about apples")], session_id=a))
    # Another conversation that also began with "hi" loses its id.
    scripted.append(text("B?"))
    events = bridge.run(chat([user("hi"), assistant("hello B"), user("talk about boats")]))
    init = one(events, "session_init")
    assert init["session_id"] != a and init["recovered"] is False
    assert one(events, "warning")["code"] == "session_id_missing_starting_fresh"


def test_two_conversations_alternating_never_cross(bridge: Bridge, scripted: list[Step]) -> None:
    """Two chats in one project share one id file: the id sent is often the other chat's."""
    a, _ = first_turn(bridge, scripted, "chat A", "A1")
    b, _ = first_turn(bridge, scripted, "chat B", "B1")
    held = b  # the provider's id file now holds B's id
    history_a = [user("chat A"), assistant("A1")]
    history_b = [user("chat B"), assistant("B1")]
    for turn in range(2, 5):
        scripted.append(text(f"A{turn}"))
        history_a.append(user(f"a{turn}"))
        events = bridge.run(chat(history_a, session_id=held))
        init = one(events, "session_init")
        assert init["session_id"] == a, f"turn {turn} of A landed in {init['session_id']}"
        history_a.append(assistant(f"A{turn}"))
        held = a
        scripted.append(text(f"B{turn}"))
        history_b.append(user(f"b{turn}"))
        events = bridge.run(chat(history_b, session_id=held))
        assert one(events, "session_init")["session_id"] == b
        history_b.append(assistant(f"B{turn}"))
        held = b
    assert [c for r, c in stored_contents(bridge, a) if r == "user"] == [
        "chat A", "a2", "a3", "a4"]
    assert [c for r, c in stored_contents(bridge, b) if r == "user"] == [
        "chat B", "b2", "b3", "b4"]
    assert sorted(index_ids(bridge)) == sorted([a, b]), "orphan sessions were created"


def test_title_requests_get_their_own_session(bridge: Bridge, scripted: list[Step]) -> None:
    sid, _ = first_turn(bridge, scripted, "fix the bug", "which one?")
    scripted.append(text("Fixing a bug"))
    events = bridge.run(chat([user("Generate a title for: fix the bug")], purpose="title",
                             session_id=sid))
    title_sid = one(events, "session_init")["session_id"]
    assert title_sid != sid
    assert stored_contents(bridge, sid) == [("user", "fix the bug"), ("assistant", "which one?")]
    assert index_ids(bridge) == [sid], "title sessions must stay out of the chat listing"
    assert set(index_ids(bridge, purpose=None)) == {sid, title_sid}
    titles = asyncio.run(_titles(bridge))
    assert titles[title_sid] == "Fixing a bug", "a title session is listed by its title"


async def _titles(bridge: Bridge) -> dict[str, str]:
    stores = open_project_stores(bridge.project)
    try:
        return {r.session_id: r.title for r in await stores.index.list_sessions(purpose=None)}
    finally:
        await stores.close()


def test_host_tools_pause_and_resume_in_a_new_process(bridge: Bridge, scripted: list[Step],
                                                      server: Any) -> None:
    tools = [{"name": "write", "description": "Write a file",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    scripted.append(call("write", {"path": "a.txt"}, id="call_w1"))
    events = bridge.run(chat([user("create a.txt")], tools=tools, new_session=True))
    sid = one(events, "session_init")["session_id"]
    tool_call = one(events, "tool_call")
    assert tool_call["executed_by"] == "host" and tool_call["tool_name"] == "write"
    assert events[-1]["finish_reason"] == "tool_calls"
    assert server.requests[-1]["tools"][0]["function"]["name"] == "write"

    call_message = assistant("", [{"id": "call_w1", "name": "write",
                                   "arguments": tool_call["arguments"]}])
    wrong = bridge.run(chat([user("create a.txt"), call_message, tool_message("call_zz", "ok")],
                            tools=tools, session_id=sid))
    error = one(wrong, "error")
    assert error["code"] == "tool_result_mismatch" and "call_w1" in error["message"]
    assert wrong[-1]["finish_reason"] == "error"
    assert stored_contents(bridge, sid)[-1][0] == "assistant", "a mismatched result was stored"
    assert len(stored_contents(bridge, sid)) == 2

    scripted.append(text("a.txt is written"))
    done = bridge.run(chat([user("create a.txt"), call_message, tool_message("call_w1", "ok")],
                           tools=tools, session_id=sid))
    assert done[-1]["finish_reason"] == "stop" and text_of(done) == "a.txt is written"
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["user", "assistant", "tool"]
    assert stored_contents(bridge, sid)[-2:] == [("tool", "ok"), ("assistant", "a.txt is written")]


def test_several_requests_in_one_process(bridge: Bridge, scripted: list[Step]) -> None:
    scripted.extend([text("one"), text("two")])
    events = bridge.run(chat([user("first")], new_session=True, request_id="r1"),
                        chat([user("second")], new_session=True, request_id="r2"))
    finishes = of_type(events, "finish")
    assert [f["request_id"] for f in finishes] == ["r1", "r2"]
    assert all(e.get("request_id") in ("r1", "r2") for e in events)
    assert next(e["type"] for e in events if e["request_id"] == "r2") == "protocol_ack"
