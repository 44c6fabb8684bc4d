"""Two requests on one line at once.

Two clients sending on one thread at once (whole histories, named by Codex's
``session-id``): each gets the response its own history asks for, stored where the
lineage rules put it — the first continues the line, the second, whose history no
longer matches the line's tip, a branch where the histories part — never an answer
stored and its response reported failed.

The order is made by events, not by time: the second request is sent once the first
turn's model is asked, and the model holds that answer until the second request has
been placed on the line (its decision read the line while the first turn ran on it)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from nonoka.serve.ids import parse_response_id
from nonoka.serve.lines import LineDecision
from nonoka.testing import text
from nonoka.testing.server import Delay, ScriptedOpenAIServer
from nonoka.turn.service import Opening
from tests.serve.harness import Served, request
from tests.serve.test_codex import exported, said, tree

THREAD = {"session-id": "two-at-once"}


def user(words: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": words}


def said_by(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A response's output as the next request's input items."""
    return [{"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": part["text"]}
                         for part in item["content"]]}
            for item in response["output"] if item["type"] == "message"]


@pytest.mark.parametrize("lease_wait", ["0", "30"])
def test_two_requests_on_one_thread_at_once(project: Path, served: Served,
                                            scripted: list[Any],
                                            server: ScriptedOpenAIServer,
                                            monkeypatch: pytest.MonkeyPatch,
                                            lease_wait: str) -> None:
    monkeypatch.setenv("NONOKA_LEASE_WAIT", lease_wait)
    running, placed = threading.Event(), threading.Event()
    decide: Callable[[LineDecision], Awaitable[Opening]] = LineDecision.choose

    async def watched(line: LineDecision) -> Opening:
        """The decision as it is; the test learns when the second request's is made."""
        opening = await decide(line)
        if any(m.content == "Two?" for m in line.history):
            placed.set()
        return opening

    monkeypatch.setattr(LineDecision, "choose", watched)

    def answer(body: dict[str, Any]) -> Any:
        asked = body["messages"][-1]["content"]
        if asked == "One?":  # the first turn's answer waits for the second's placing
            running.set()
            return Delay(60, text(f"re {asked}"), until=placed)
        return text(f"re {asked}")

    scripted += [text("Hello."), answer, answer]
    body = {"model": "m", "store": False}
    status, _, raw = request(served.port, "POST", "/v1/responses",
                             {**body, "input": [user("Hi.")]}, THREAD)
    assert status == 200, raw
    history = [user("Hi."), *said_by(json.loads(raw))]
    got: dict[str, tuple[int, dict[str, Any]]] = {}

    def ask(prompt: str) -> None:
        status, _, raw = request(served.port, "POST", "/v1/responses",
                                 {**body, "input": [*history, user(prompt)]}, THREAD)
        got[prompt] = (status, json.loads(raw))

    first = threading.Thread(target=ask, args=("One?",))
    first.start()
    assert running.wait(60)  # the first turn runs on the line: its model is asked
    second = threading.Thread(target=ask, args=("Two?",))
    second.start()
    first.join(120)
    second.join(120)
    for prompt in ("One?", "Two?"):
        status, response = got[prompt]
        assert status == 200 and response["status"] == "completed", response
        assert response["output"][-1]["content"][0]["text"] == f"re {prompt}"
    # each was asked with its own history, nothing of the other's
    sent = sorted([m["content"] for m in r["messages"]] for r in server.requests[1:])
    assert sent == [["Hi.", "Hello.", "One?"], ["Hi.", "Hello.", "Two?"]]
    lines = {said(s["entries"])[-1][1]: s for s in exported(project)}
    assert said(lines["re One?"]["entries"]) == [
        ("user", "Hi."), ("assistant", "Hello."), ("user", "One?"), ("assistant", "re One?")]
    branch = lines["re Two?"]
    assert branch["lineage"]["forked_from"] == lines["re One?"]["id"]
    assert branch["lineage"]["fork_point"] == 2
    assert said(branch["entries"]) == [
        ("user", "Hi."), ("assistant", "Hello."), ("user", "Two?"), ("assistant", "re Two?")]
    assert not [kind for s in lines.values() for kind, _ in s["events"] if kind == "error"]


def test_a_continuation_behind_the_tip_waits_for_no_running_turn(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    """A response behind its line's tip is continued in a branch at once, while a turn
    on the tip still runs: the tip's model answers only once that branch has answered."""
    running, forked = threading.Event(), threading.Event()
    making: list[int] = []

    def slow(body: dict[str, Any]) -> Any:
        running.set()  # held outside the script's lock: the endpoint answers others
        return Delay(60, text("Done at the tip."), until=forked)

    def behind(body: dict[str, Any]) -> Any:
        making.append(len(served.api.responses.running))  # the tip's response, and this
        return text("Forked.")

    scripted += [text("Root."), text("Second."), slow, behind]

    def create(prompt: str, previous: str | None = None) -> tuple[int, dict[str, Any]]:
        status, _, raw = request(served.port, "POST", "/v1/responses", {
            "model": "m", "input": prompt,
            **({"previous_response_id": previous} if previous else {})})
        return status, json.loads(raw)

    root = create("start")[1]["id"]
    second = create("next", root)[1]["id"]
    at_tip: dict[str, tuple[int, dict[str, Any]]] = {}
    tip = threading.Thread(target=lambda: at_tip.update(slow=create("slow", second)))
    tip.start()
    assert running.wait(60)  # the tip's turn runs: its model is asked
    status, other = create("other", root)
    forked.set()
    tip.join(120)
    assert status == 200 and other["output"][0]["content"][0]["text"] == "Forked.", other
    assert making == [2]  # the branch's model was asked while the tip's turn still ran
    status, done = at_tip["slow"]
    assert status == 200 and done["output"][0]["content"][0]["text"] == "Done at the tip."
    assert [m["content"] for m in server.requests[3]["messages"]] == ["start", "Root.", "other"]
    assert session_of(other["id"]) != session_of(root) == session_of(done["id"])


def session_of(response_id: str) -> str:
    point = parse_response_id(response_id)
    assert point is not None
    return point.session_id


@pytest.mark.parametrize("lease_wait", ["0", "30"])
def test_two_first_requests_of_a_new_thread_at_once_start_one_line(
        project: Path, served: Served, scripted: list[Any], server: ScriptedOpenAIServer,
        monkeypatch: pytest.MonkeyPatch, lease_wait: str) -> None:
    """Two first requests of a new Codex thread (its name, a whole history each) both
    decided before either has a session: one starts the line, the other is placed on it
    (as the line's rules place a history that parts from it at its start) instead of
    starting a second session. Each decision is held until both are made (events)."""
    monkeypatch.setenv("NONOKA_LEASE_WAIT", lease_wait)
    decide: Callable[[LineDecision], Awaitable[Opening]] = LineDecision.choose
    made: list[LineDecision] = []
    both: list[asyncio.Event] = []

    async def watched(line: LineDecision) -> Opening:
        """The decision as it is; the first two (one per request) wait for each other."""
        opening = await decide(line)
        if not both:
            both.append(asyncio.Event())
        made.append(line)
        if len(made) == 2:
            both[0].set()
        if len(made) <= 2:
            await asyncio.wait_for(both[0].wait(), 60)
        return opening

    monkeypatch.setattr(LineDecision, "choose", watched)
    scripted += [lambda body: text("re " + body["messages"][-1]["content"])] * 2
    got: dict[str, tuple[int, dict[str, Any]]] = {}
    base = [user("The repository is here.")]

    def ask(prompt: str) -> None:
        status, _, raw = request(served.port, "POST", "/v1/responses",
                                 {"model": "m", "store": False,
                                  "input": [*base, user(prompt)]},
                                 {"session-id": "first-at-once"})
        got[prompt] = (status, json.loads(raw))

    threads = [threading.Thread(target=ask, args=(p,)) for p in ("One?", "Two?")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for prompt in ("One?", "Two?"):
        status, response = got[prompt]
        assert status == 200 and response["status"] == "completed", response
        assert response["output"][-1]["content"][0]["text"] == f"re {prompt}"
    sessions = exported(project)
    assert len(sessions) == 2, [said(s["entries"]) for s in sessions]
    [root] = [s for s in sessions if s["lineage"] is None]
    [branch] = [s for s in sessions if s["lineage"] is not None]
    assert (branch["lineage"]["forked_from"], branch["lineage"]["fork_point"]) == \
        (root["id"], 1)  # where the two histories part
    first, second = said(root["entries"])[-1][1][3:], said(branch["entries"])[-1][1][3:]
    assert {first, second} == {"One?", "Two?"}
    for s, prompt in ((root, first), (branch, second)):
        assert said(s["entries"]) == [("user", "The repository is here."),
                                      ("user", prompt), ("assistant", f"re {prompt}")]
    rows = tree(project)  # one line, its branch under it
    assert len(rows) == 2 and rows[1].startswith("└─") and "@1" in rows[1]
