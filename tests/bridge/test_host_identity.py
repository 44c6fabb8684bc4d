"""The host's own conversation id decides before content: one host conversation, one
line of nonoka sessions; and after a compaction a fork or an undo is a branch."""

from __future__ import annotations

from typing import Any

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.bridge.test_lineage import SYSTEM, rows, sent, stored, timeline, turn
from tests.support.bridge import Bridge, assistant, chat, one, user


def test_two_host_conversations_with_the_same_first_message_stay_apart(
        bridge: Bridge, scripted: list[Step]) -> None:
    a = [SYSTEM, user("fix the bug")]
    b = [SYSTEM, user("fix the bug")]
    first = one(turn(bridge, scripted, a, "looking", host_session_id="ses_A"),
                "session_init")["session_id"]
    second = one(turn(bridge, scripted, b, "looking", host_session_id="ses_B"),
                 "session_init")["session_id"]
    assert first != second
    a.append(user("in parser.py"))
    b.append(user("in lexer.py"))
    assert one(turn(bridge, scripted, b, "ok b", host_session_id="ses_B"),
               "session_init")["session_id"] == second
    assert one(turn(bridge, scripted, a, "ok a", host_session_id="ses_A"),
               "session_init")["session_id"] == first
    assert stored(bridge, first)[-2:] == [("user", "in parser.py"), ("assistant", "ok a")]
    assert stored(bridge, second)[-2:] == [("user", "in lexer.py"), ("assistant", "ok b")]
    hosts = {r.session_id: r.host_session_id for r in rows(bridge)}
    assert hosts == {first: "ses_A", second: "ses_B"}


def test_a_host_fork_is_a_branch_at_the_point_the_histories_part(
        bridge: Bridge, scripted: list[Step]) -> None:
    history = [SYSTEM, user("one")]
    parent = one(turn(bridge, scripted, history, "1", host_session_id="ses_P"),
                 "session_init")["session_id"]
    history.append(user("two"))
    turn(bridge, scripted, history, "2", host_session_id="ses_P")
    forked = [*history, user("three, in the fork")]
    init = one(turn(bridge, scripted, forked, "3f", host_session_id="ses_F",
                    session_id=parent), "session_init")
    assert init["session_id"] != parent
    assert init["forked_from"] == parent and init["fork_point"] == 5  # every stored entry
    assert stored(bridge, parent)[-1] == ("assistant", "2")
    # The parent's own host conversation goes on in the parent.
    history.append(user("three"))
    assert one(turn(bridge, scripted, history, "3", host_session_id="ses_P"),
               "session_init")["session_id"] == parent


def test_a_session_stored_before_the_host_said_its_id_is_adopted(
        bridge: Bridge, scripted: list[Step]) -> None:
    history = [user("hello")]
    sid = one(turn(bridge, scripted, history, "hi"), "session_init")["session_id"]
    history.append(user("again"))
    assert one(turn(bridge, scripted, history, "hi again", host_session_id="ses_X",
                    session_id=sid), "session_init")["session_id"] == sid
    assert {r.session_id: r.host_session_id for r in rows(bridge)} == {sid: "ses_X"}


def _compacted(bridge: Bridge, scripted: list[Step], **host: Any
               ) -> tuple[str, list[dict[str, Any]]]:
    """A session of three turns whose history the host compacted; the host's history
    after the compaction."""
    history = [SYSTEM, user("build a parser")]
    sid = one(turn(bridge, scripted, history, "done: parser.py", new_session=True, **host),
              "session_init")["session_id"]
    for step in ("add tests", "add docs"):
        history.append(user(step))
        turn(bridge, scripted, history, f"done: {step}", session_id=sid, **host)
    summary = "We built parser.py, its tests and docs."
    scripted.append(text(summary))
    bridge.run(chat([{"role": "system", "content": "You are a context summarization agent."},
                     user("Here is the conversation so far: ...")],
                    purpose="compaction", session_id=sid))
    after = [SYSTEM, user("What did we do so far?"), assistant(summary), user("ship it")]
    assert one(turn(bridge, scripted, after, "shipped", session_id=sid, **host),
               "session_init")["session_id"] == sid
    return sid, after


def test_an_undo_after_a_compaction_is_a_branch_not_a_rewrite(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    sid, after = _compacted(bridge, scripted)
    compacted = stored(bridge, sid)
    undone = [*after[:3], user("ship it, but signed")]
    init = one(turn(bridge, scripted, undone, "signed and shipped", session_id=sid),
               "session_init")
    assert init["session_id"] != sid
    assert init["forked_from"] == sid and init["fork_point"] == 3
    assert stored(bridge, sid) == compacted, "the compacted session was rewritten in place"
    edits = [e.data["reason"] for e in timeline(bridge, sid) if e.kind == "history_edited"]
    assert edits == ["history_compacted"]
    assert sent(server)[-1] == ("user", "ship it, but signed")


def test_a_fork_after_a_compaction_then_the_original_leaves_two_lines(
        bridge: Bridge, scripted: list[Step]) -> None:
    sid, after = _compacted(bridge, scripted, host_session_id="ses_A")
    fork = [*after, user("x")]
    init = one(turn(bridge, scripted, fork, "x done", session_id=sid,
                    host_session_id="ses_B"), "session_init")
    branch = init["session_id"]
    assert branch != sid and init["forked_from"] == sid and init["fork_point"] == 5
    after.append(user("y"))
    assert one(turn(bridge, scripted, after, "y done", session_id=sid,
                    host_session_id="ses_A"), "session_init")["session_id"] == sid
    assert stored(bridge, sid)[-2:] == [("user", "y"), ("assistant", "y done")]
    assert stored(bridge, branch)[-2:] == [("user", "x"), ("assistant", "x done")]
    lines = {r.session_id: (r.host_session_id, r.metadata.get("forked_from"))
             for r in rows(bridge)}
    assert lines == {sid: ("ses_A", None), branch: ("ses_B", sid)}


def test_a_branch_made_by_hand_is_never_taken_over_by_a_hosts_edit(
        bridge: Bridge, scripted: list[Step]) -> None:
    from tests.support.processes import run_nonoka

    history = [user("u1")]
    parent = one(turn(bridge, scripted, history, "a1"), "session_init")["session_id"]
    history.append(user("u2"))
    turn(bridge, scripted, history, "a2", session_id=parent)
    made = run_nonoka(bridge.project, "sessions", "fork", parent, "--at", "3", env=bridge.env)
    assert made.returncode == 0, made.stderr
    by_hand = made.stdout.strip().split()[-1]
    assert stored(bridge, by_hand) == [("user", "u1"), ("assistant", "a1"), ("user", "u2")]
    edited = [user("u1"), assistant("a1"), user("u2, said otherwise")]
    init = one(turn(bridge, scripted, edited, "a2'", session_id=parent), "session_init")
    assert init["session_id"] not in (parent, by_hand)
    assert init["forked_from"] == parent and init["fork_point"] == 2
    assert stored(bridge, by_hand) == [("user", "u1"), ("assistant", "a1"), ("user", "u2")]
