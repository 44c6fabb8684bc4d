"""Early dispatch: a prompt turn's model request leaves before the runtime has loaded.

Real bridge processes against the scripted server. The runtime uses the early request
only when its own request is byte for byte the same (the event log says ``used``); in
every other case nothing is sent early, or what was sent is dropped and the runtime
sends its own, and the host sees the right answer either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.bridge.early import NextTurn, body_digest
from nonoka.llm.base import ToolSpec
from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.wire import entry_wire_message
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import ToolCall
from nonoka.store.base import entry_json
from nonoka.store.sqlite.packing import register
from nonoka.testing import call, calls, text
from nonoka.testing.server import Delay, ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.support.bridge import Bridge, assistant, chat, one, text_of, tool_message, user

SEARCH = {"name": "search", "description": "Search the web",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        register(conn)  # ``entry_text``: an entry row's JSON, deflated or not
        rows = conn.execute(sql, args).fetchall()
    conn.close()
    return rows


def outcomes(bridge: Bridge, session_id: str) -> list[str]:
    rows = query(bridge.db, "SELECT entry_text(data_json) FROM events WHERE session_id = ? "
                 "AND kind = 'early_request' ORDER BY seq", session_id)
    return [json.loads(r[0])["outcome"] for r in rows]


def first_turn(bridge: Bridge, scripted: list[ScriptItem],
               **fields: Any) -> tuple[str, list[dict[str, Any]]]:
    scripted.append(text("first answer"))
    events = bridge.run(chat([user("hello")], **fields))
    assert text_of(events) == "first answer", events
    session_id = one(events, "session_init")["session_id"]
    return session_id, [user("hello"), assistant("first answer")]


LIVE_LEASES = "SELECT * FROM session_leases WHERE expires_at <> 0"
"""Leases not given up (a released one keeps its row, with expiry 0)."""

def test_a_prompt_turn_sends_its_request_early_and_the_runtime_uses_it(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    sid, history = first_turn(bridge, scripted, tools=[SEARCH])
    for n in range(2):
        scripted.append(text(f"answer {n}"))
        history = [*history, user(f"question {n}")]
        events = bridge.run(chat(history, session_id=sid, tools=[SEARCH]))
        assert text_of(events) == f"answer {n}"
        assert one(events, "finish")["finish_reason"] == "stop"
        history.append(assistant(f"answer {n}"))
    assert outcomes(bridge, sid) == ["used", "used"]
    assert len(server.requests) == 3, "a model request was sent twice"
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "hello", "first answer", "question 0", "answer 0", "question 1"]
    assert query(bridge.db, LIVE_LEASES) == [], "a lease was left behind"


def test_the_early_request_is_the_request_the_runtime_sends_without_it(
        tmp_path: Path, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    bridges = []
    for name, flag in (("early", "1"), ("late", "0")):
        (tmp_path / name).mkdir()
        bridge = Bridge(tmp_path / name, server)
        bridge.env["NONOKA_EARLY_DISPATCH"] = flag
        bridges.append(bridge)
    histories: list[list[dict[str, Any]]] = [[], []]
    sids: list[str | None] = [None, None]
    prompts = ["hi", "tell me more", "café ☕ \u0000 \"quoted\"\n", "and then?"]
    for prompt in prompts:
        for i, bridge in enumerate(bridges):
            scripted.append(text(f"re: {prompt}"))
            histories[i].append(user(prompt))
            fields = {"session_id": sids[i]} if sids[i] else {}
            events = bridge.run(chat(histories[i], tools=[SEARCH], **fields))
            sids[i] = one(events, "session_init")["session_id"]
            histories[i].append(assistant(text_of(events)))
    early_bodies, late_bodies = server.requests[0::2], server.requests[1::2]
    assert early_bodies == late_bodies
    assert server.headers[-2]["authorization"] == server.headers[-1]["authorization"]
    assert outcomes(bridges[0], sids[0] or "") == ["used"] * (len(prompts) - 1)
    assert outcomes(bridges[1], sids[1] or "") == []


def _bump_revision(bridge: Bridge, sid: str) -> None:
    with sqlite3.connect(bridge.db) as db:
        db.execute("UPDATE checkpoints SET revision = revision + 1 WHERE session_id = ?", (sid,))
    db.close()


def _hold_lease(bridge: Bridge, sid: str) -> None:
    owner = f"{os.uname().nodename}:{os.getpid()}:othertest"  # alive: this process
    with sqlite3.connect(bridge.db) as db:
        db.execute("INSERT OR REPLACE INTO session_leases VALUES (?, ?, ?, ?)",
                   (sid, owner, time.time() + 60, time.time()))
    db.close()


CHANGES: dict[str, Any] = {
    "the tools changed": {"tools": []},
    "the limits changed": {"limits": {"max_model_turns": 50}},
    "another model": {"model": "openai:another-model"},
    "disabled": {"env": {"NONOKA_EARLY_DISPATCH": "0"}},
    "a newer checkpoint": {"prepare": _bump_revision},
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_nothing_is_sent_early_when_the_turn_is_not_the_expected_one(
        change: str, bridge: Bridge, scripted: list[ScriptItem],
        server: ScriptedOpenAIServer) -> None:
    spec = dict(CHANGES[change])
    sid, history = first_turn(bridge, scripted, tools=[SEARCH])
    bridge.env.update(spec.pop("env", {}))
    prepare = spec.pop("prepare", None)
    if prepare is not None:
        prepare(bridge, sid)
    history.append(user("next"))
    scripted.append(text("second answer"))
    events = bridge.run(chat(history, session_id=sid, **{"tools": [SEARCH], **spec}))
    assert text_of(events) == "second answer", events
    assert outcomes(bridge, sid) == []
    assert len(server.requests) == 2


def call_message(*ids: str) -> dict[str, Any]:
    return assistant("", [{"id": i, "name": "search", "arguments": json.dumps({"q": i})}
                          for i in ids])


def test_host_tool_results_send_the_next_request_early(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    scripted.append(calls(("search", {"q": "c1"}, "c1"), ("search", {"q": "c2"}, "c2")))
    events = bridge.run(chat([user("look it up")], tools=[SEARCH]))
    sid = one(events, "session_init")["session_id"]
    assert events[-1]["finish_reason"] == "tool_calls"
    history = [user("look it up"), call_message("c1", "c2"),
               tool_message("c2", "second result"), tool_message("c1", "first result")]
    scripted.append(text("found both"))
    events = bridge.run(chat(history, session_id=sid, tools=[SEARCH]))
    assert text_of(events) == "found both"
    assert outcomes(bridge, sid) == ["used"]
    assert [(m["role"], m.get("tool_call_id")) for m in server.requests[-1]["messages"]] == [
        ("user", None), ("assistant", None), ("tool", "c2"), ("tool", "c1")]
    # Results with a new message, after another round of calls.
    scripted.append(call("search", {"q": "c3"}, id="c3"))
    history += [assistant("found both"), user("and one more")]
    events = bridge.run(chat(history, session_id=sid, tools=[SEARCH]))
    assert events[-1]["finish_reason"] == "tool_calls"
    history += [call_message("c3"), tool_message("c3", "third"), user("quickly please")]
    scripted.append(text("done"))
    assert text_of(bridge.run(chat(history, session_id=sid, tools=[SEARCH]))) == "done"
    assert outcomes(bridge, sid) == ["used", "used", "used"]
    assert server.requests[-1]["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "c3", "content": "third"},
        {"role": "user", "content": "quickly please"}]
    assert len(server.requests) == 4


def test_results_for_some_of_the_calls_send_nothing_early(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    scripted.append(calls(("search", {"q": "c1"}, "c1"), ("search", {"q": "c2"}, "c2")))
    sid = one(bridge.run(chat([user("look it up")], tools=[SEARCH])), "session_init")[
        "session_id"]
    history = [user("look it up"), call_message("c1", "c2"), tool_message("c1", "first")]
    events = bridge.run(chat(history, session_id=sid, tools=[SEARCH]))
    assert events[-1]["finish_reason"] == "tool_calls", "the session waits for c2"
    assert outcomes(bridge, sid) == []
    assert len(server.requests) == 1
    scripted.append(text("now both"))
    history.append(tool_message("c2", "second"))
    assert text_of(bridge.run(chat(history, session_id=sid, tools=[SEARCH]))) == "now both"
    assert len(server.requests) == 2


def test_user_messages_sent_together_are_stored_apart_and_the_next_turn_goes_early(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    sid, history = first_turn(bridge, scripted)
    history += [user("one"), user("two")]
    scripted.append(text("both read"))
    assert text_of(bridge.run(chat(history, session_id=sid))) == "both read"
    assert server.requests[-1]["messages"][-2:] == [{"role": "user", "content": "one"},
                                                    {"role": "user", "content": "two"}]
    # The session stored them one entry each, as the host resends them: the next
    # request's earlier user messages match the stored ones, so it is sent early.
    history += [assistant("both read"), user("three")]
    scripted.append(text("third"))
    assert text_of(bridge.run(chat(history, session_id=sid))) == "third"
    assert outcomes(bridge, sid) == ["used"]
    assert len(server.requests) == 3


def test_a_busy_session_gets_no_early_request(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    sid, history = first_turn(bridge, scripted)
    _hold_lease(bridge, sid)
    events = bridge.run(chat([*history, user("next")], session_id=sid))
    assert one(events, "error")["code"] == "session_busy"
    assert len(server.requests) == 1, "a busy session's turn called the model"


def test_a_wrong_early_request_is_dropped_and_the_runtime_sends_its_own(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    sid, history = first_turn(bridge, scripted)
    # Make the stored template describe a request the runtime would not send: a template
    # that still passes every check, so only the final byte comparison can catch it.
    ((raw,),) = query(bridge.db, "SELECT template_json FROM next_calls WHERE session_id = ?",
                      sid)
    template = json.loads(raw)
    template["tail"] = template["tail"][:-1] + ', "temperature": 1.5}'
    entries = [json.dumps(entry_wire_message(json.loads(r[0]))) for r in query(
        bridge.db, "SELECT entry_text(entry_json) FROM session_entries WHERE session_id = ? "
        "ORDER BY seq",
        sid)]
    body = template["head"] + ", ".join(entries) + template["tail"]
    template["digest"] = body_digest(body)
    with sqlite3.connect(bridge.db) as db:
        db.execute("UPDATE next_calls SET template_json = ?", (json.dumps(template),))
    db.close()

    def answer(request: dict[str, Any]) -> Any:
        return Delay(3, text("wrong")) if "temperature" in request else text("right")

    scripted.extend([answer, answer])
    events = bridge.run(chat([*history, user("next")], session_id=sid))
    assert text_of(events) == "right"
    assert outcomes(bridge, sid) == ["mismatch"]
    assert sorted("temperature" in r for r in server.requests[1:]) == [False, True]
    assert query(bridge.db, LIVE_LEASES) == []


@pytest.mark.parametrize(("request_", "expected"), [
    (chat([user("a")], session_id="s"), ([], "a", [])),
    (chat([user("a"), assistant("b"), user("c"), user("d")], session_id="s"),
     ([], "c\n\nd", ["a"])),
    (chat([user("a"), assistant("b"), tool_message("c2", "y"), tool_message("c1", "x")],
          session_id="s"), ([("c2", "y"), ("c1", "x")], None, ["a"])),
    (chat([user("a"), assistant("b"), tool_message("c1", "x"), user("d")], session_id="s"),
     ([("c1", "x")], "d", ["a"])),
    (chat([user("a"), assistant("b"), tool_message("", "x")], session_id="s"), None),
    # Requests the runtime's validation refuses must not cost a model request first.
    (chat([{"role": "developer", "content": "x"}, user("a")], session_id="s"), None),
    (chat([user("a"), {"role": "assistant", "content": None}, user("c")], session_id="s"),
     None),
    (chat([user("a"), assistant("b", [{"id": 1, "name": "f"}]), user("c")], session_id="s"),
     None),
    (chat([user("a"), assistant("b", [{"id": "1", "name": "f", "arguments": {}}]), user("c")],
          session_id="s"), None),
    (chat([user("a")], session_id="s", new_session=[]), None),
    (chat([user("a")], session_id=" "), None),
    (chat([user("a")], session_id="s", model=3), None),
    (chat([user("a")]), None),                                    # no session id
    (chat([user("a")], session_id="s", new_session=True), None),
    (chat([user("a")], session_id="s", purpose="title"), None),
    (chat([user("a"), assistant("b")], session_id="s"), None),    # nothing new
    (chat([{"role": "user", "content": [{"type": "text"}]}], session_id="s"), None),
])
def test_which_requests_continue_a_named_session(request_: dict[str, Any],
                                                expected: tuple[Any, ...] | None) -> None:
    turn = NextTurn.of(request_)
    assert (None if turn is None else (turn.results, turn.prompt, turn.earlier_users)
            ) == expected


# -- the stored rows rebuild exactly the messages the adapter sends ------------------------

texts = st.text(max_size=40)
tool_calls = st.lists(st.builds(ToolCall, id=st.text(min_size=1, max_size=8),
                                name=st.text(min_size=1, max_size=8), arguments=texts),
                      max_size=3)
entries = st.lists(st.one_of(
    st.builds(lambda c: MemoryEntry.make("user", c), texts),
    st.builds(lambda c: MemoryEntry.make("system", c), texts),
    st.builds(MemoryEntry.assistant, texts, tool_calls),
    st.builds(lambda i, c: MemoryEntry.make("tool", c, tool_call_id=i),
              st.text(min_size=1, max_size=8), texts),
), max_size=8)


@settings(max_examples=200, deadline=None)
@given(entries, st.lists(st.builds(ToolSpec, st.text(min_size=1, max_size=8), texts,
                                   st.just({"type": "object"})), max_size=2), texts)
def test_stored_rows_rebuild_the_adapters_request_body_byte_for_byte(
        stored: list[MemoryEntry], tools: list[ToolSpec], model_name: str) -> None:
    model = OpenAIChatModel(model_name or "m", base_url="http://127.0.0.1:9/v1", api_key="k")
    expected = model.request_body([e.to_message() for e in stored], tools)
    rebuilt = [json.dumps(entry_wire_message(json.loads(entry_json(e)))) for e in stored]
    assert model.frame(tools).body(rebuilt).encode() == expected


# -- a request early dispatch takes is one the runtime accepts -----------------------------

odd = st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=2), max_size=1))
text_mostly = st.one_of(st.text(max_size=3), st.text(max_size=3), st.text(max_size=3), odd)
call_items = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"id": text_mostly, "name": text_mostly}, optional={"arguments": text_mostly}),
    max_size=2), odd)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "user", "developer"])},
    optional={"content": text_mostly, "tool_call_id": text_mostly, "tool_calls": call_items})


@settings(max_examples=500, deadline=None)
@given(st.lists(message, min_size=1, max_size=4), st.fixed_dictionaries(
    {"session_id": st.one_of(st.just("s"), st.just("s"), text_mostly)}, optional={
        "new_session": st.one_of(st.just(False), st.booleans(), odd),
        "purpose": st.one_of(st.just("chat"), st.just("title"), odd),
        "request_id": text_mostly, "conversation_key": text_mostly, "cwd": text_mostly,
        "model": text_mostly}))
def test_a_request_early_dispatch_takes_is_one_the_runtime_accepts(
        messages: list[dict[str, Any]], fields: dict[str, Any]) -> None:
    from nonoka.protocol.models import ChatRequest, decode_request

    request = {"type": "chat", "protocol": {"version": "1"}, "messages": messages, **fields}
    if NextTurn.of(request) is not None:
        assert isinstance(decode_request(json.dumps(request).encode()), ChatRequest)


def test_a_host_copy_that_differs_in_bytes_falls_back_to_the_stored_rows(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    sid, history = first_turn(bridge, scripted)
    scripted.append(text("answer 0"))
    history = [*history, user("question 0")]
    bridge.run(chat(history, session_id=sid))
    # The host re-encoded an earlier answer (whitespace): the same conversation, but not
    # the bytes the template was built from, so the body is rebuilt from the stored rows.
    history = [user("hello"), assistant("first answer  "), user("question 0"),
               assistant("answer 0"), user("question 1")]
    scripted.append(text("answer 1"))
    events = bridge.run(chat(history, session_id=sid))
    assert text_of(events) == "answer 1"
    assert outcomes(bridge, sid) == ["used", "used"]
    assert server.requests[-1]["messages"][1]["content"] == "first answer"


@settings(max_examples=500, deadline=None)
@given(st.lists(message, min_size=1, max_size=6))
def test_the_host_history_is_encoded_as_the_wire_encodes_it(
        messages: list[dict[str, Any]]) -> None:
    from nonoka.llm.wire import wire_message
    from nonoka.protocol.turns import split_after_reply

    turn = NextTurn.of(chat([*messages, user("next")], session_id="s"))
    if turn is None or turn.history is None:
        return
    before = split_after_reply([*messages, user("next")])[0]
    assert turn.history == [json.dumps(wire_message(
        m["role"], m.get("content", ""), m.get("tool_calls") or None, m.get("tool_call_id")))
        for m in before]


@given(st.text())
def test_plain_messages_are_encoded_as_json_dumps_would(content: str) -> None:
    turn = NextTurn.of(chat([user(content), assistant(content), user("next")], session_id="s"))
    assert turn is not None
    assert turn.history == [json.dumps({"role": "user", "content": content}),
                            json.dumps({"role": "assistant", "content": content})]


def stored_template(bridge: Bridge, sid: str) -> dict[str, Any]:
    ((raw,),) = query(bridge.db, "SELECT template_json FROM next_calls WHERE session_id = ?",
                      sid)
    template: dict[str, Any] = json.loads(raw)
    return template


def digest_of_rows(bridge: Bridge, sid: str, template: dict[str, Any]) -> str:
    entries = [json.dumps(entry_wire_message(json.loads(r[0]))) for r in query(
        bridge.db, "SELECT entry_text(entry_json) FROM session_entries WHERE session_id = ? "
        "ORDER BY seq",
        sid)]
    body = template["head"] + ", ".join(entries) + template["tail"]
    return hashlib.blake2b(body.encode(), digest_size=32).hexdigest()


def test_a_template_taken_from_the_early_request_is_the_stored_conversations(
        bridge: Bridge, scripted: list[ScriptItem]) -> None:
    # After a turn that used its early request, the next template's digest is taken over
    # what that request sent plus the entries added since: it must be the digest of the
    # stored rows, through prompts and host tool calls alike.
    sid, history = first_turn(bridge, scripted, tools=[SEARCH])
    scripted.append(calls(("search", {"q": "c1"}, "c1")))
    history.append(user("look it up"))
    bridge.run(chat(history, session_id=sid, tools=[SEARCH]))
    template = stored_template(bridge, sid)
    assert template["kind"] == "tool_results" and template["plain"]
    assert template["digest"] == digest_of_rows(bridge, sid, template)
    scripted.append(text("found it"))
    history += [call_message("c1"), tool_message("c1", "a result")]
    assert text_of(bridge.run(chat(history, session_id=sid, tools=[SEARCH]))) == "found it"
    template = stored_template(bridge, sid)
    assert template["kind"] == "prompt" and template["pending"] == []
    assert template["digest"] == digest_of_rows(bridge, sid, template)
    assert outcomes(bridge, sid) == ["used", "used"]
