"""A project database filled the way real use fills it, for the ui's tests and screenshots.

Every conversation is made of real ``nonoka bridge`` processes answering a local scripted
OpenAI-compatible server: a tool the host runs, a session recovered after the host lost
its id, a conversation edited three times (each edit a new session, tagged with the
lineage metadata the index carries), and markup that must never run. The plan session
runs through ``Runner.run_plan`` on the project's own store, its timeline written by the
same bookkeeping the bridge uses.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonoka import Agent, Plan, Runner, Step, tool
from nonoka.store.project import open_project_stores
from nonoka.testing import ScriptedModel, call, text
from nonoka.testing.server import Delay, ScriptedOpenAIServer
from nonoka.testing.server import Step as ServerStep
from nonoka.turn.journal import Journal
from tests.support.bridge import Bridge, assistant, chat, one, text_of, tool_message, user
from tests.ui.harness import run_async

WRITE = {"name": "write", "description": "Write a file in the project",
         "parameters": {"type": "object", "properties": {
             "path": {"type": "string"}, "content": {"type": "string"}}}}
HOSTILE = ('Check this: <script>window.__pwned = "script"</script> and '
           '<img src="x" onerror="window.__pwned = \'img\'"> please')
ANSWER = """Here is the **haiku**, saved to `notes.txt`:

```text
An old silent pond
A frog jumps into the pond
Splash! Silence again
```

- 17 syllables
- written by *the host's* `write` tool
"""


def said(content: str, tokens_in: int, tokens_out: int, cost: float,
         delay: float = 0.05) -> ServerStep:
    return Delay(delay, text(content, input_tokens=tokens_in, output_tokens=tokens_out,
                             cost_usd=cost))


@dataclass
class Filled:
    """The project and the ids of its notable sessions."""

    project: Path
    ids: dict[str, str] = field(default_factory=dict)
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class Host:
    """One conversation as a chat front end keeps it: the whole history, resent each turn."""

    def __init__(self, bridge: Bridge, script: list[ServerStep], first: str) -> None:
        self.bridge = bridge
        self.script = script
        self.history: list[dict[str, Any]] = [user(first)]
        self.session_id: str | None = None

    def send(self, *steps: ServerStep, tools: list[dict[str, Any]] | None = None,
             forget_id: bool = False) -> list[dict[str, Any]]:
        self.script.extend(steps)
        fields: dict[str, Any] = {"tools": tools or []}
        if self.session_id and not forget_id:
            fields["session_id"] = self.session_id
        events = self.bridge.run(chat(self.history, **fields))
        init = one(events, "session_init")
        self.session_id = init["session_id"]
        calls = [e for e in events if e["type"] == "tool_call"]
        if calls:
            self.history.append(assistant(text_of(events), [
                {"id": c["tool_call_id"], "name": c["tool_name"], "arguments": c["arguments"]}
                for c in calls]))
        else:
            self.history.append(assistant(text_of(events)))
        return events

    def say(self, content: str, *steps: ServerStep, **options: Any) -> list[dict[str, Any]]:
        self.history.append(user(content))
        return self.send(*steps, **options)


def fill(project: Path) -> Filled:
    """Fill ``project``'s database; a few seconds of real bridge processes."""
    project.mkdir(parents=True, exist_ok=True)
    script: list[ServerStep] = []

    def next_step(_body: dict[str, Any]) -> ServerStep:
        return script.pop(0)

    filled = Filled(project)
    with ScriptedOpenAIServer(next_step) as server:
        bridge = Bridge(project, server)
        _host_tool(bridge, script, filled)
        _recovery(bridge, script, filled)
        _branches(bridge, script, filled)
        _hostile(bridge, script, filled)
        assert not server.failures, server.failures
    run_async(_plan(project, filled))
    return filled


def _host_tool(bridge: Bridge, script: list[ServerStep], filled: Filled) -> None:
    host = Host(bridge, script, "Create notes.txt with a haiku about a pond")
    events = host.send(Delay(0.2, call("write", {"path": "notes.txt",
                                                 "content": "An old silent pond..."},
                                       id="call_write_1")), tools=[WRITE])
    assert events[-1]["finish_reason"] == "tool_calls", events
    host.history.append(tool_message("call_write_1", "wrote 62 bytes to notes.txt"))
    host.send(said(ANSWER, 1840, 96, 0.00231, delay=0.3), tools=[WRITE])
    host.say("Now translate it to French", said(
        "Voici la traduction :\n\n> Un vieil étang silencieux\n> Une grenouille plonge\n"
        "> Plouf ! Le silence revient", 2105, 61, 0.00262, delay=0.25), tools=[WRITE])
    host.say("Thanks! Keep the file as it is.", said("Done: `notes.txt` is unchanged.",
                                                      2190, 14, 0.00227), tools=[WRITE])
    filled.ids["host_tool"] = str(host.session_id)
    filled.history["host_tool"] = host.history


def _recovery(bridge: Bridge, script: list[ServerStep], filled: Filled) -> None:
    host = Host(bridge, script, "What does the bookkeeping module record?")
    host.send(said("It records each turn's index row and timeline events.", 420, 18, 0.0004))
    first = host.session_id
    # The host lost the id file: the conversation key finds the session again.
    events = host.say("And where is it stored?", said(
        "Next to the checkpoints, in `.nonoka/sessions.db`.", 480, 16, 0.00045),
                      forget_id=True)
    init = one(events, "session_init")
    assert init["session_id"] == first and init["recovered"], init
    filled.ids["recovered"] = str(first)


def _branches(bridge: Bridge, script: list[ServerStep], filled: Filled) -> None:
    """A conversation edited three times; each edit continues in a new session."""
    host = Host(bridge, script, "Plan a three-day trip to Kyoto")
    host.send(said("Day 1: Higashiyama. Day 2: Arashiyama. Day 3: Fushimi Inari.",
                   610, 40, 0.0007))
    host.say("Add a day trip to Nara", said("Day 4: Nara park and Todai-ji.", 700, 22,
                                            0.00075))
    root = str(host.session_id)
    branches: list[str] = []
    for base, edit in ((host.history[:2], "Add a day trip to Osaka instead"),
                       (host.history[:2], "Make it a food-focused trip"),
                       (None, "Make it vegetarian-friendly")):
        fork = Host(bridge, script, "Plan a three-day trip to Kyoto")
        if base is None:  # an edit inside the first branch: a branch of a branch
            first = filled.history["branch_1"]
            base = first[:4]
        fork.history = [*base, user(edit)]
        fork.send(said(f"Revised plan: {edit.lower()}.", 650, 30, 0.0007))
        assert fork.session_id not in (root, *branches)
        branches.append(str(fork.session_id))
        if len(branches) == 1:  # the first branch goes on for a turn before it is edited
            fork.say("Two nights only", said("Then skip Day 3.", 700, 8, 0.0007))
            assert fork.session_id == branches[0]
        filled.history[f"branch_{len(branches)}"] = fork.history
    filled.ids["branch_root"] = root
    for index, sid in enumerate(branches, 1):
        filled.ids[f"branch_{index}"] = sid
    run_async(_tag_lineage(filled.project, [
        (branches[0], root, 2), (branches[1], root, 2), (branches[2], branches[0], 4)]))


async def _tag_lineage(project: Path, links: list[tuple[str, str, int]]) -> None:
    """Write ``forked_from``/``fork_point`` into real index rows, as forking will."""
    async with open_project_stores(project) as stores:
        for child, parent, point in links:
            row = await stores.index.get_session(child)
            assert row is not None
            meta = {**row.metadata, "forked_from": parent, "fork_point": point}
            await stores.index.upsert_session(row.model_copy(update={"metadata": meta}))


def _hostile(bridge: Bridge, script: list[ServerStep], filled: Filled) -> None:
    host = Host(bridge, script, HOSTILE)
    host.send(said("You wrote: " + HOSTILE.split(": ", 1)[1], 300, 40, 0.0003))
    filled.ids["hostile"] = str(host.session_id)


async def _plan(project: Path, filled: Filled) -> None:
    """A 12-step release report: concurrent layers, a retried failure, steps left pending."""

    @tool(idempotent=True)
    def fetch(source: str) -> dict[str, Any]:
        """Fetch records from a source."""
        time.sleep(0.02)
        return {"source": source, "count": len(source) * 3}

    @tool(idempotent=True)
    def check(name: str, data: Any = None, fail: bool = False) -> str:
        """Run a named check over data."""
        time.sleep(0.02)
        if fail:
            raise RuntimeError(f"{name}: staging cluster unreachable (timeout after 30 s)")
        return f"{name}: ok ({json.dumps(data)[:60]})"

    steps = [
        Step(id="fetch_issues", tool="fetch", args={"source": "issues"}),
        Step(id="fetch_prs", tool="fetch", args={"source": "pull-requests"}),
        Step(id="fetch_ci", tool="fetch", args={"source": "ci"}),
        Step(id="triage", tool="check", args={"name": "triage", "data": {"$ref": "fetch_issues"}}),
        Step(id="review", tool="check", args={"name": "review", "data": {"$ref": "fetch_prs"}}),
        Step(id="flaky_tests", tool="check", args={"name": "flaky", "data": {"$ref": "fetch_ci"}}),
        Step(id="summarize", prompt="Summarize the triage: {{triage}}"),
        Step(id="risk", tool="check", args={"name": "risk"}, depends_on=["review", "flaky_tests"]),
        Step(id="deploy_check", tool="check", args={"name": "deploy", "fail": True},
             depends_on=["risk"], max_attempts=2),
        Step(id="release_notes", prompt="Write release notes from {{summarize}}"),
        Step(id="announce", tool="check", args={"name": "announce"},
             depends_on=["release_notes", "deploy_check"]),
        Step(id="archive", tool="check", args={"name": "archive"}, depends_on=["announce"]),
    ]
    model = ScriptedModel([
        text("Triage: 3 regressions, 12 features, 4 docs fixes.", input_tokens=900,
             output_tokens=60, cost_usd=0.0011),
        text("## Release notes\n\n- faster resume\n- plan graphs", input_tokens=1200,
             output_tokens=120, cost_usd=0.0016)], name="openai:gpt-4o-mini")
    async with open_project_stores(project) as stores:
        book = Journal(stores, title="Weekly release report (plan)",
                      metadata={"purpose": "chat", "cwd": str(project)})
        sid = "5e1f0c2a-7d4b-4c1e-9a3f-2b8d6e0f1a7c"
        book.start(sid)
        await book.log("request", {"source": "plan", "purpose": "chat", "messages": 1,
                                   "tools": ["fetch", "check"], "model": model.name})
        result = await Runner(stores.checkpoints).run_plan(
            Agent(model=model, tools=[fetch, check]), Plan(steps=steps), session_id=sid,
            on_event=book.on_event)
        assert not result.success, "deploy_check is scripted to fail"
        await book.error("step_failed", result.error or "")
        await book.finish("error")
        row = await stores.index.get_session(sid)
        assert row is not None
        await stores.index.upsert_session(row.model_copy(update={"model": model.name}))
    filled.ids["plan"] = sid
