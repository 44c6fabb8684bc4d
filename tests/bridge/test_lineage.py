"""Session lineage through real bridge processes: every history a host sends continues,
edits or branches its session — never a silent split (docs/protocol.md, "Session lineage").
"""

from __future__ import annotations

import asyncio
from typing import Any

from nonoka.store.project import open_project_stores
from nonoka.store.records import EventRecord, SessionRecord
from nonoka.testing import call, text
from nonoka.testing.server import HttpError, ScriptedOpenAIServer, Step
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
from tests.support.processes import run_nonoka

SYSTEM = {"role": "system", "content": "You are OpenCode, a coding agent."}
BASH = [{"name": "bash", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


def stored(bridge: Bridge, session_id: str) -> list[tuple[str, str]]:
    state = load_state(bridge, session_id)
    assert state is not None
    return [(e.role, e.content) for e in state.memory_entries]


def sent(server: ScriptedOpenAIServer, index: int = -1) -> list[tuple[str, str]]:
    """The (role, content) pairs of a request the model received."""
    return [(m["role"], m.get("content") or "") for m in server.requests[index]["messages"]]


def rows(bridge: Bridge, purpose: str | None = "chat") -> list[SessionRecord]:
    async def load() -> list[SessionRecord]:
        stores = open_project_stores(bridge.project)
        try:
            return await stores.index.list_sessions(purpose=purpose)
        finally:
            await stores.close()

    return asyncio.run(load())


def timeline(bridge: Bridge, session_id: str) -> list[EventRecord]:
    async def load() -> list[EventRecord]:
        stores = open_project_stores(bridge.project)
        try:
            return await stores.events.list_events(session_id, limit=500)
        finally:
            await stores.close()

    return asyncio.run(load())


def turn(bridge: Bridge, scripted: list[Step], history: list[dict[str, Any]], answer: str,
         **fields: Any) -> list[dict[str, Any]]:
    """One chat turn that the model answers with ``answer``; the answer joins ``history``."""
    scripted.append(text(answer))
    events = bridge.run(chat(history, **fields))
    assert events[-1]["finish_reason"] == "stop", events
    history.append(assistant(answer))
    return events


def test_a_resend_after_a_failed_turn_stores_the_failed_message_once(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    sid, _ = first_turn(bridge, scripted, "first", "1")
    history = [user("first"), assistant("1"), user("second")]
    scripted.append(HttpError(400))
    failed = bridge.run(chat(history, session_id=sid))
    assert failed[-1]["finish_reason"] == "error" and one(failed, "error")["code"] == \
        "model_error"
    # The host keeps the failed message and sends the next one after it.
    history.append(user("third"))
    events = turn(bridge, scripted, history, "3", session_id=sid)
    assert one(events, "session_init")["session_id"] == sid
    assert of_type(events, "warning") == []
    assert sent(server) == [("user", "first"), ("assistant", "1"), ("user", "second"),
                            ("user", "third")]
    for n in ("fourth", "fifth"):
        history.append(user(n))
        events = turn(bridge, scripted, history, n.upper(), session_id=sid)
        assert one(events, "session_init") == {"type": "session_init", "session_id": sid,
                                               "recovered": False}
        assert of_type(events, "warning") == []
    assert [c for r, c in stored(bridge, sid) if r == "user"] == [
        "first", "second", "third", "fourth", "fifth"]
    assert [c for r, c in sent(server) if r == "user"].count("second") == 1
    assert [r.session_id for r in rows(bridge)] == [sid]


def test_retries_of_a_failed_first_turn_reuse_its_session(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    ids = []
    for _ in range(3):
        scripted.append(HttpError(400))
        events = bridge.run(chat([SYSTEM, user("hello")], new_session=True))
        assert events[-1]["finish_reason"] == "error"
        ids.append(one(events, "session_init")["session_id"])
    scripted.append(text("hi!"))
    events = bridge.run(chat([SYSTEM, user("hello")], new_session=True))
    ids.append(one(events, "session_init")["session_id"])
    assert text_of(events) == "hi!"
    assert len(set(ids)) == 1, ids
    assert [r.session_id for r in rows(bridge)] == ids[:1]
    assert stored(bridge, ids[0]) == [("system", SYSTEM["content"]), ("user", "hello"),
                                      ("assistant", "hi!")]
    assert sent(server) == [("system", SYSTEM["content"]), ("user", "hello")]
    # Once answered, the same first message with new_session is a new conversation.
    scripted.append(text("hello again"))
    again = bridge.run(chat([SYSTEM, user("hello")], new_session=True))
    assert one(again, "session_init")["session_id"] != ids[0]


def test_a_pruned_tool_output_continues_the_session_with_the_hosts_version(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    scripted.append(call("bash", {"cmd": "ls"}, id="call_1"))
    events = bridge.run(chat([SYSTEM, user("list the files")], tools=BASH, new_session=True))
    sid = one(events, "session_init")["session_id"]
    arguments = one(events, "tool_call")["arguments"]
    call_message = assistant("", [{"id": "call_1", "name": "bash", "arguments": arguments}])
    history = [SYSTEM, user("list the files"), call_message,
               tool_message("call_1", "a.txt\nb.txt\n" * 50)]
    turn(bridge, scripted, history, "two files", tools=BASH, session_id=sid)
    # The host prunes the old tool output and sends the next message.
    history[3] = tool_message("call_1", "[Old tool result content cleared]")
    history.append(user("and now?"))
    events = turn(bridge, scripted, history, "still two", tools=BASH, session_id=sid)
    assert one(events, "session_init")["session_id"] == sid
    assert of_type(events, "warning") == []
    assert sent(server)[3] == ("tool", "[Old tool result content cleared]")
    assert stored(bridge, sid)[3] == ("tool", "[Old tool result content cleared]")
    edits = [e for e in timeline(bridge, sid) if e.kind == "history_edited"]
    assert len(edits) == 1
    assert edits[0].data["reason"] == "tool_output_pruned"
    assert edits[0].data["positions"] == [3]
    assert edits[0].data["original"][0]["content"].startswith("a.txt\nb.txt")
    assert [r.session_id for r in rows(bridge)] == [sid]


def test_a_compacted_prefix_continues_the_session_it_summarises(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    history = [SYSTEM, user("build a parser")]
    events = turn(bridge, scripted, history, "done: parser.py", new_session=True)
    sid = one(events, "session_init")["session_id"]
    history.append(user("add tests"))
    turn(bridge, scripted, history, "done: test_parser.py", session_id=sid)
    before = stored(bridge, sid)

    summary = "We built parser.py and its tests."
    scripted.append(text(summary))
    compaction = bridge.run(chat(
        [{"role": "system", "content": "You are a context summarization agent."},
         user("Here is the conversation so far: build a parser, add tests")],
        purpose="compaction", session_id=sid))
    compaction_sid = one(compaction, "session_init")["session_id"]
    assert compaction_sid != sid, "the provider must never adopt a compaction's id as the chat's"
    assert text_of(compaction) == summary
    assert stored(bridge, sid) == before, "the compaction ran in the chat session"

    after = [SYSTEM, user("What did we do so far?"), assistant(summary), user("add docs")]
    events = turn(bridge, scripted, after, "done: README", session_id=sid)
    assert one(events, "session_init") == {"type": "session_init", "session_id": sid,
                                           "recovered": False}
    assert of_type(events, "warning") == []
    assert sent(server) == [("system", SYSTEM["content"]), ("user", "What did we do so far?"),
                            ("assistant", summary), ("user", "add docs")]
    edits = [e for e in timeline(bridge, sid) if e.kind == "history_edited"]
    assert [e.data["reason"] for e in edits] == ["history_compacted"]
    assert [o["content"] for o in edits[0].data["original"]] == [c for r, c in before
                                                                 if r != "system"]
    # The next turn continues the compacted conversation as usual.
    after.append(user("ship it"))
    events = turn(bridge, scripted, after, "shipped", session_id=sid)
    assert one(events, "session_init")["session_id"] == sid
    chat_rows = rows(bridge)
    assert [r.session_id for r in chat_rows] == [sid]
    record = {r.session_id: r for r in rows(bridge, purpose=None)}[compaction_sid]
    assert record.metadata["compaction_of"] == sid


def test_a_compacted_prefix_without_a_session_id_finds_its_session(
        bridge: Bridge, scripted: list[Step]) -> None:
    history = [user("write a poem")]
    sid = one(turn(bridge, scripted, history, "roses are red", new_session=True),
              "session_init")["session_id"]
    scripted.append(text("A poem about roses."))
    bridge.run(chat([user("Here is the conversation so far: write a poem")],
                    purpose="compaction", session_id=sid))
    after = [user("What did we do so far?"), assistant("A poem about roses."), user("another")]
    events = turn(bridge, scripted, after, "violets are blue")
    init = one(events, "session_init")
    assert init["session_id"] == sid and init["recovered"] is True
    assert [r.session_id for r in rows(bridge)] == [sid]


def five_turns(bridge: Bridge, scripted: list[Step]) -> tuple[str, list[dict[str, Any]]]:
    history = [SYSTEM, user("turn 1")]
    sid = one(turn(bridge, scripted, history, "answer 1", new_session=True),
              "session_init")["session_id"]
    for n in range(2, 6):
        history.append(user(f"turn {n}"))
        turn(bridge, scripted, history, f"answer {n}", session_id=sid)
    return sid, history


def test_a_revert_to_turn_two_of_five_branches_and_leaves_the_parent_intact(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    sid, history = five_turns(bridge, scripted)
    parent = stored(bridge, sid)
    assert len(parent) == 11
    # The host undoes turns 3-5 and says something else after turn 2.
    reverted = [*history[:5], user("turn 3, differently")]
    events = turn(bridge, scripted, reverted, "answer 3b", session_id=sid)
    init = one(events, "session_init")
    branch = init["session_id"]
    assert branch != sid
    assert init["forked_from"] == sid and init["fork_point"] == 5
    warning = one(events, "warning")
    assert warning["code"] == "session_branched"
    assert warning["details"]["forked_from"] == sid and warning["details"]["fork_point"] == 5
    assert sent(server) == [(m["role"], m["content"]) for m in reverted[:-1]]
    assert stored(bridge, branch) == [*parent[:5], ("user", "turn 3, differently"),
                                      ("assistant", "answer 3b")]
    assert stored(bridge, sid) == parent, "the parent changed"
    kinds = [e.kind for e in timeline(bridge, branch)]
    assert "warning" in kinds
    # The host goes on from the branch it was told about: no further branching.
    reverted.append(user("turn 4b"))
    events = turn(bridge, scripted, reverted, "answer 4b", session_id=branch)
    assert one(events, "session_init") == {"type": "session_init", "session_id": branch,
                                           "recovered": False}
    assert of_type(events, "warning") == []
    assert {r.session_id for r in rows(bridge)} == {sid, branch}


def test_a_fork_and_its_parent_each_continue_in_their_own_session(
        bridge: Bridge, scripted: list[Step]) -> None:
    sid, history = five_turns(bridge, scripted)
    # A fork of the conversation after turn 4, sent with the id file's (the parent's) id.
    fork = [*history[:9], user("turn 5, forked")]
    events = turn(bridge, scripted, fork, "fork answer 5", session_id=sid)
    branch = one(events, "session_init")["session_id"]
    assert branch != sid and one(events, "warning")["code"] == "session_branched"
    held = branch
    for n in (6, 7):
        history.append(user(f"turn {n}"))
        events = turn(bridge, scripted, history, f"answer {n}", session_id=held)
        init = one(events, "session_init")
        assert init["session_id"] == sid, f"the parent's turn {n} landed in {init}"
        assert of_type(events, "warning") == []
        fork.append(user(f"fork turn {n}"))
        events = turn(bridge, scripted, fork, f"fork answer {n}", session_id=sid)
        assert one(events, "session_init")["session_id"] == branch
        assert of_type(events, "warning") == []
        held = branch
    assert [c for r, c in stored(bridge, sid) if r == "user"][-2:] == ["turn 6", "turn 7"]
    assert [c for r, c in stored(bridge, branch) if r == "user"][-3:] == [
        "turn 5, forked", "fork turn 6", "fork turn 7"]
    assert {r.session_id for r in rows(bridge)} == {sid, branch}


def test_turns_the_host_never_saw_make_a_branch(bridge: Bridge, scripted: list[Step]) -> None:
    sid, history = five_turns(bridge, scripted)
    # Another front end added a turn to the session; the host's next message follows
    # what it saw.
    turn(bridge, scripted, [*history, user("a turn the host never saw")], "unseen",
         session_id=sid)
    history.append(user("turn 6"))
    events = turn(bridge, scripted, history, "answer 6", session_id=sid)
    init = one(events, "session_init")
    assert init["forked_from"] == sid and init["fork_point"] == 11
    assert stored(bridge, init["session_id"])[-2:] == [("user", "turn 6"),
                                                       ("assistant", "answer 6")]


def test_two_conversations_that_began_alike_alternating_never_cross(
        bridge: Bridge, scripted: list[Step]) -> None:
    """Same first message (same conversation key), one id file, alternating turns."""
    a_history = [user("hi")]
    a = one(turn(bridge, scripted, a_history, "hello A", new_session=True),
            "session_init")["session_id"]
    b_history = [user("hi")]
    b = one(turn(bridge, scripted, b_history, "hello B", new_session=True),
            "session_init")["session_id"]
    held = b
    for n in range(2, 5):
        a_history.append(user(f"a{n}"))
        events = turn(bridge, scripted, a_history, f"A{n}", session_id=held)
        assert one(events, "session_init")["session_id"] == a, f"turn {n} of A"
        assert of_type(events, "warning") == []
        b_history.append(user(f"b{n}"))
        events = turn(bridge, scripted, b_history, f"B{n}", session_id=a)
        assert one(events, "session_init")["session_id"] == b, f"turn {n} of B"
        assert of_type(events, "warning") == []
        held = b
    assert [c for r, c in stored(bridge, a) if r == "user"] == ["hi", "a2", "a3", "a4"]
    assert [c for r, c in stored(bridge, b) if r == "user"] == ["hi", "b2", "b3", "b4"]
    assert {r.session_id for r in rows(bridge)} == {a, b}, "orphan sessions were created"


def test_the_host_continuing_after_nonoka_run_added_a_turn_gets_a_branch(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    history = [user("plan the release")]
    sid = one(turn(bridge, scripted, history, "step one", new_session=True),
              "session_init")["session_id"]
    scripted.append(text("from the terminal"))
    done = run_nonoka(bridge.project, "run", "--session", sid, "a terminal question",
                      env=bridge.env)
    assert done.returncode == 0, done.stderr
    parent = stored(bridge, sid)
    assert parent[-2:] == [("user", "a terminal question"), ("assistant", "from the terminal")]
    # The host never saw the terminal's turn; its next message follows what it saw.
    history.append(user("step two?"))
    events = turn(bridge, scripted, history, "step two", session_id=sid)
    init = one(events, "session_init")
    assert init["forked_from"] == sid and init["fork_point"] == 2
    assert sent(server) == [("user", "plan the release"), ("assistant", "step one"),
                            ("user", "step two?")]
    assert stored(bridge, sid) == parent
    # Both go on: the host in its branch, the terminal in the session it used.
    history.append(user("step three?"))
    events = turn(bridge, scripted, history, "step three", session_id=init["session_id"])
    assert one(events, "session_init")["session_id"] == init["session_id"]
    assert of_type(events, "warning") == []


def test_run_continue_on_a_session_paused_for_host_tools_leaves_it_to_the_host(
        bridge: Bridge, scripted: list[Step]) -> None:
    scripted.append(call("bash", {"cmd": "ls"}, id="call_9"))
    events = bridge.run(chat([user("look around")], tools=BASH, new_session=True))
    sid = one(events, "session_init")["session_id"]
    before = stored(bridge, sid)
    done = run_nonoka(bridge.project, "run", "-c", "what is going on?", env=bridge.env)
    assert done.returncode != 0
    assert stored(bridge, sid) == before, "nonoka run answered the host's pending call"
    arguments = one(events, "tool_call")["arguments"]
    history = [user("look around"),
               assistant("", [{"id": "call_9", "name": "bash", "arguments": arguments}]),
               tool_message("call_9", "a.txt")]
    events = turn(bridge, scripted, history, "one file", tools=BASH, session_id=sid)
    assert one(events, "session_init")["session_id"] == sid
    assert of_type(events, "warning") == []
    assert stored(bridge, sid)[-2:] == [("tool", "a.txt"), ("assistant", "one file")]


def test_a_title_session_asked_again_answers_the_new_request(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    title_system = {"role": "system", "content": "You are a title generator."}
    scripted.append(text("Fixing a bug"))
    events = bridge.run(chat([title_system, user("Generate a title for: fix the bug")],
                             purpose="title"))
    title_sid = one(events, "session_init")["session_id"]
    scripted.append(text("Writing docs"))
    again = bridge.run(chat([title_system, user("Generate a title for: write docs")],
                            purpose="title", session_id=title_sid))
    assert one(again, "session_init")["session_id"] == title_sid
    assert text_of(again) == "Writing docs"
    assert sent(server)[-1] == ("user", "Generate a title for: write docs")
    assert rows(bridge) == []
