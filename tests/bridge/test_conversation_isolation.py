"""No conversation ever reaches another's data: the host's own conversation id decides
before any rule on content, every such rule looks only at the request's project, and a
message is all of its parts (its files by their bytes), through real bridge processes."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.testing import text
from nonoka.testing.server import HttpError, ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.pg import schema_url, temp_schema
from tests.support.bridge import Bridge, assistant, chat, of_type, one, text_of, user

PARTS = {"version": "1", "required_capabilities": ["parts"]}
TOO_LARGE = HttpError(400, {"error": {"message": "image exceeds 5 MB maximum",
                                      "type": "invalid_request_error"}})


def picture(seed: int, size: int = 3000) -> str:
    return base64.b64encode(random.Random(seed).randbytes(size)).decode()


def with_picture(prompt: str, data: str) -> dict[str, Any]:
    return {"role": "user", "content": prompt, "parts": [
        {"type": "text", "text": prompt},
        {"type": "file", "media_type": "image/png", "data": data, "filename": "shot.png"}]}


def pictures_sent(request: dict[str, Any]) -> list[str]:
    """The base64 data of every image a model request carries."""
    return [part["image_url"]["url"].split(",", 1)[1] for message in request["messages"]
            if isinstance(message["content"], list)
            for part in message["content"] if part["type"] == "image_url"]


def session_of(events: list[dict[str, Any]]) -> str:
    return str(one(events, "session_init")["session_id"])


A, B = picture(1), picture(2)


def test_a_host_conversation_never_runs_in_another_ones_failed_first_turn(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    # Conversation X's first turn (words and an image) fails; conversation Y, another
    # host conversation, opens with the same words and its own image.
    scripted.append(TOO_LARGE)
    failed = bridge.run(chat([with_picture("what is in this picture?", A)],
                             protocol=PARTS, host_session_id="ses_X"))
    assert failed[-1]["finish_reason"] == "error"
    x = session_of(failed)
    scripted.append(text("a picture of Y"))
    events = bridge.run(chat([with_picture("what is in this picture?", B)],
                             protocol=PARTS, host_session_id="ses_Y"))
    assert text_of(events) == "a picture of Y"
    assert session_of(events) != x, "Y ran in X's session"
    assert pictures_sent(server.requests[-1]) == [B], "the model was sent X's image"
    # X retried is X's own session again, with X's image.
    scripted.append(text("a picture of X"))
    again = bridge.run(chat([with_picture("what is in this picture?", A)],
                            protocol=PARTS, host_session_id="ses_X"))
    assert session_of(again) == x
    assert pictures_sent(server.requests[-1]) == [A]


def test_the_hosts_own_id_decides_before_the_words_of_a_failed_first_turn(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    scripted.append(TOO_LARGE)
    x = session_of(bridge.run(chat([user("fix the failing test")], host_session_id="ses_X")))
    scripted.append(text("which test?"))
    y = session_of(bridge.run(chat([user("fix the failing test")], host_session_id="ses_Y")))
    assert y != x, "a host conversation was given another's session by its words"
    scripted.append(text("on it"))
    retried = bridge.run(chat([user("fix the failing test")], host_session_id="ses_X"))
    assert session_of(retried) == x
    assert [m["content"] for m in server.requests[-1]["messages"]] == ["fix the failing test"]


def test_a_retried_first_turn_is_one_with_the_same_parts_not_only_the_same_words(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    scripted.append(TOO_LARGE)
    failed = bridge.run(chat([with_picture("describe it", A)], protocol=PARTS))
    scripted.append(text("described B"))
    other = bridge.run(chat([with_picture("describe it", B)], protocol=PARTS))
    assert session_of(other) != session_of(failed)
    assert pictures_sent(server.requests[-1]) == [B]
    # The very same first turn, retried, goes on in its own session.
    scripted.append(text("described A"))
    retried = bridge.run(chat([with_picture("describe it", A)], protocol=PARTS))
    assert session_of(retried) == session_of(failed)
    assert pictures_sent(server.requests[-1]) == [A]


def test_a_turn_refused_for_its_image_and_resent_smaller_sends_the_smaller_image(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    big, small = picture(3, 20_000), picture(4, 2_000)
    scripted.append(text("hi"))
    history = [user("hello")]
    sid = session_of(bridge.run(chat(history, protocol=PARTS)))
    history.append(assistant("hi"))
    scripted.append(TOO_LARGE)
    refused = bridge.run(chat([*history, with_picture("what is this?", big)],
                              session_id=sid, protocol=PARTS))
    assert one(refused, "error")["code"] and pictures_sent(server.requests[-1]) == [big]
    scripted.append(text("a cat"))
    events = bridge.run(chat([*history, with_picture("what is this?", small)],
                             session_id=sid, protocol=PARTS))
    assert text_of(events) == "a cat", events
    assert session_of(events) == sid
    assert pictures_sent(server.requests[-1]) == [small], "the refused image was sent again"


def test_an_earlier_image_the_host_changed_is_never_sent_early_from_the_stored_rows(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    # The next-call template holds the stored conversation; a host whose copy has the
    # same words but another image is another conversation, for early dispatch too.
    scripted.append(text("hi"))
    history: list[dict[str, Any]] = [user("hello")]
    sid = session_of(bridge.run(chat(history, protocol=PARTS)))
    history += [assistant("hi"), with_picture("and this?", A)]
    scripted.append(text("that is A"))
    bridge.run(chat(history, session_id=sid, protocol=PARTS))
    edited = [*history[:2], with_picture("and this?", B), assistant("that is A"),
              user("are you sure?")]
    scripted.append(text("looking again"))
    events = bridge.run(chat(edited, session_id=sid, protocol=PARTS))
    assert text_of(events) == "looking again", events
    assert pictures_sent(server.requests[-1]) == [B], "the stored image went out instead"


# -- projects sharing one database -------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """One database two projects point at: a SQLite file, a PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'team.db'}"
        return
    with temp_schema() as schema:
        yield schema_url(schema)


def project_bridge(root: Path, name: str, server: ScriptedOpenAIServer, url: str) -> Bridge:
    path = root / name
    path.mkdir()
    bridge = Bridge(path, server)
    bridge.env["NONOKA_DATABASE_URL"] = url
    return bridge


def test_projects_sharing_one_database_never_reach_each_others_sessions(
        tmp_path: Path, shared_url: str, scripted: list[ScriptItem],
        server: ScriptedOpenAIServer) -> None:
    one_, two = (project_bridge(tmp_path, n, server, shared_url) for n in ("one", "two"))
    # A failed first turn in project one is not project two's retry.
    scripted.append(TOO_LARGE)
    failed = one_.run(chat([user("hello")]))
    assert failed[-1]["finish_reason"] == "error"
    scripted.append(text("hello from two"))
    assert session_of(two.run(chat([user("hello")]))) != session_of(failed)
    # A conversation of project one is not continued by project two's history that
    # lost its session id, and two's warning lists none of one's sessions.
    scripted.append(text("where to?"))
    trip = session_of(one_.run(chat([user("plan a trip")])))
    scripted.append(text("Rome it is"))
    events = two.run(chat([user("plan a trip"), assistant("where to?"), user("to Rome")]))
    assert session_of(events) != trip, "project two continued project one's session"
    warned = [w for w in of_type(events, "warning")
              if w["code"] == "session_id_missing_starting_fresh"]
    listed = {r["session_id"] for w in warned for r in w["details"]["recent_sessions"]}
    assert trip not in listed and session_of(failed) not in listed
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "plan a trip", "where to?", "to Rome"]
    # In its own project, the same history goes on in its session.
    scripted.append(text("Rome, then"))
    assert session_of(one_.run(chat([user("plan a trip"), assistant("where to?"),
                                     user("to Rome")]))) == trip


def test_a_session_named_by_its_id_is_shared_across_projects(
        tmp_path: Path, shared_url: str, scripted: list[ScriptItem],
        server: ScriptedOpenAIServer) -> None:
    # An id is the host's own knowledge of a session: two workers in two directories
    # that share a database continue the same session by its id (docs/operations.md).
    one_, two = (project_bridge(tmp_path, n, server, shared_url) for n in ("one", "two"))
    scripted.append(text("noted"))
    sid = session_of(one_.run(chat([user("remember 7")])))
    scripted.append(text("it was 7"))
    events = two.run(chat([user("remember 7"), assistant("noted"), user("what was it?")],
                          session_id=sid))
    assert session_of(events) == sid and text_of(events) == "it was 7"


def compared(stored: dict[str, Any], hosted: dict[str, Any]) -> bool:
    """Whether a stored message and a host's are the same message, asked every way the
    bridge asks it (typed and raw, pairwise and by identity): one answer."""
    from nonoka.bridge.entry_rules import agree, hosted_identity, identity, same_message
    from nonoka.bridge.reconcile import _same
    from nonoka.state.entries import MemoryEntry
    from nonoka.state.messages import Message

    entry = MemoryEntry.from_message(Message.model_validate(stored))
    message = Message.model_validate(hosted)
    row = json.loads(json.dumps({"role": entry.role, "content": entry.content,
                                 "metadata": entry.metadata}))
    answers = {
        _same(entry, message),
        same_message(entry.role, entry.content, entry.metadata,
                     hosted["role"], hosted.get("content", ""), hosted),
        agree(identity(entry.role, entry.content, entry.metadata),
              identity(message.role, message.content, message)),
        agree(identity(row["role"], row["content"], row["metadata"]), hosted_identity(hosted)),
    }
    assert len(answers) == 1, "the comparisons of one message disagree"
    return answers.pop()


TEXTS = st.sampled_from(["look", "look ", "look  here", "数据"])
FILES = st.lists(st.sampled_from([("image/png", A), ("image/png", B), ("image/jpeg", A)]),
                 max_size=2)
REASONING = st.lists(st.sampled_from(["", "2 + 2", "2  +  2", "2 * 2"]), max_size=2)
ARGUMENTS = st.sampled_from(['{"a": 1}', '{"a":1.0}', '{"a": 2}', "", "{}", '"{bad"', "{bad"])


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "tool"]))
    content = draw(TEXTS)
    message: dict[str, Any] = {"role": role, "content": content}
    files = draw(FILES) if role != "assistant" else []
    if files:
        message["parts"] = [{"type": "text", "text": content}, *[
            {"type": "file", "media_type": t, "data": d} for t, d in files]]
    if role == "tool":
        message["tool_call_id"] = draw(st.sampled_from(["c1", "c2"]))
    if role == "assistant":
        calls = draw(st.lists(st.tuples(st.sampled_from(["c1", "c2"]),
                                        st.sampled_from(["bash", "read"]), ARGUMENTS),
                              max_size=2, unique_by=lambda c: c[0]))
        if calls:
            message["tool_calls"] = [{"id": i, "name": n, "arguments": a}
                                     for i, n, a in calls]
        reasoning = draw(REASONING)
        if reasoning:
            message["reasoning"] = [{"text": t} for t in reasoning]
    return message


@settings(max_examples=400, deadline=None)
@given(messages(), messages())
def test_every_comparison_of_two_messages_gives_one_answer(
        stored: dict[str, Any], hosted: dict[str, Any]) -> None:
    compared(stored, hosted)
    assert compared(stored, stored)


def test_message_identity_is_every_part_of_a_message() -> None:
    from nonoka.bridge.entry_rules import hosted_identity, identity
    from nonoka.state.messages import Message

    def same(stored: dict[str, Any], hosted: dict[str, Any]) -> bool:
        return compared(stored, hosted)

    assert not same(with_picture("look", A), with_picture("look", B))
    assert same(with_picture("look", A), with_picture("look  ", A))
    call = {"id": "c1", "name": "bash", "arguments": '{"cmd": "ls", "n": 1.0}'}
    calling = {"role": "assistant", "content": "", "tool_calls": [call]}
    assert same(calling, {**calling, "tool_calls": [{**call, "arguments": '{"n":1,"cmd":"ls"}'}]})
    assert not same(calling, {**calling, "tool_calls": [{**call, "arguments": '{"cmd":"rm"}'}]})
    assert not same(calling, {**calling, "tool_calls": [{**call, "name": "read"}]})
    thought = {"role": "assistant", "content": "4", "reasoning": [{"text": "2 + 2"}]}
    assert same(thought, {"role": "assistant", "content": "4"}), "a host that keeps no reasoning"
    assert same(thought, {**thought, "reasoning": [{"text": "2  +  2"}]})
    assert not same(thought, {**thought, "reasoning": [{"text": "2 * 2"}]})
    assert not same({"role": "assistant", "content": "4"}, thought)
    result = {"role": "tool", "content": "out", "tool_call_id": "c1"}
    assert not same(result, {**result, "tool_call_id": "c2"})
    raw = json.loads(json.dumps(with_picture("look", A)))
    assert hosted_identity(raw) == identity("user", "look", Message.model_validate(raw))
