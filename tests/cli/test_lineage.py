"""Branches from the command line: ``sessions fork``, ``run --at``, ``list --tree`` and
``--json``, ``show``'s parent and branches, and ``run -c`` on a session a host waits on."""

from __future__ import annotations

import json

from nonoka.testing import call, text
from tests.cli.conftest import Project
from tests.cli.test_run import session_of
from tests.cli.test_sessions import bridge_request
from tests.conftest import ScriptItem


def _two_turns(project: Project, scripted: list[ScriptItem]) -> str:
    scripted.extend([text("one"), text("two")])
    sid = session_of(project.nonoka("run", "first").stderr)
    done = project.nonoka("run", "--session", sid, "second")
    assert done.returncode == 0, done.stderr
    return sid


def test_fork_prints_a_branch_that_list_show_and_tree_know(
        project: Project, scripted: list[ScriptItem]) -> None:
    parent = _two_turns(project, scripted)
    done = project.nonoka("sessions", "fork", parent[:8], "--at", "3")
    assert done.returncode == 0, done.stderr
    child = done.stdout.strip()
    assert len(child) == 36 and child != parent

    rows = {r["session_id"]: r for r in json.loads(
        project.nonoka("sessions", "list", "--json").stdout)}
    assert rows[child]["forked_from"] == parent and rows[child]["fork_point"] == 3
    assert rows[parent]["forked_from"] is None
    assert rows[child]["title"] == rows[parent]["title"] == "first"

    shown = json.loads(project.nonoka("sessions", "show", parent, "--json").stdout)
    assert shown["lineage"]["branches"] == [child]
    branch = json.loads(project.nonoka("sessions", "show", child, "--json").stdout)
    assert branch["lineage"]["forked_from"] == parent
    assert [e["kind"] for e in branch["events"]] == ["forked"]
    assert "forked from" in project.nonoka("sessions", "show", child).stdout

    tree = project.nonoka("sessions", "list", "--tree").stdout.splitlines()
    assert tree[0].startswith(parent[:8])
    assert tree[1].startswith("└─ " + child[:8]) and "@3" in tree[1]


def test_run_at_continues_a_branch_and_leaves_the_parent(
        project: Project, scripted: list[ScriptItem]) -> None:
    parent = _two_turns(project, scripted)
    scripted.append(text("other answer"))
    done = project.nonoka("run", "--session", parent[:8], "--at", "3", "instead")
    assert done.returncode == 0, done.stderr
    branch = session_of(done.stderr)
    assert branch != parent
    sent = [c for r, c in project.sent(2) if r in ("user", "assistant")]
    assert sent == ["first", "one", "instead"]  # the parent's second turn is not in it
    scripted.append(text("and on"))
    assert project.nonoka("run", "--session", branch, "more").returncode == 0
    assert [c for r, c in project.sent(3) if r == "user"] == ["first", "instead", "more"]
    rows = {r["session_id"]: r for r in json.loads(
        project.nonoka("sessions", "list", "--json").stdout)}
    assert rows[branch]["forked_from"] == parent
    assert rows[parent]["turn_count"] == 2

    bad = project.nonoka("run", "--session", parent[:8], "--at", "99", "x")
    assert bad.returncode != 0 and "outside" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert project.nonoka("run", "--at", "1", "x").returncode != 0


def test_run_refuses_a_session_whose_host_waits_for_tool_results(
        project: Project, scripted: list[ScriptItem]) -> None:
    scripted.append(call("lookup", {"word": "nonoka"}))
    events = bridge_request(project, [{"role": "user", "content": "look it up"}], None)
    sid = str(next(e["session_id"] for e in events if e["type"] == "session_init"))
    assert events[-1]["finish_reason"] == "tool_calls"
    before = project.nonoka("sessions", "show", sid, "--json").stdout

    done = project.nonoka("run", "--session", sid, "what now?")
    assert done.returncode != 0
    assert "waiting for the results" in done.stderr and "lookup" in done.stderr
    assert "--at 1" in done.stderr  # entries: the user message (0), the call (1)
    assert len(project.server.requests) == 1  # no model call was made
    assert project.nonoka("sessions", "show", sid, "--json").stdout == before
    # A branch before the call is the way to go on from the terminal.
    scripted.append(text("from the terminal"))
    branched = project.nonoka("run", "--session", sid, "--at", "1", "what now?")
    assert branched.returncode == 0, branched.stderr
    assert [r for r, _ in project.sent(1)] == ["user", "user"]
