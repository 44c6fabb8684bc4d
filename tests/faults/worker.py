"""One step of the campaign's local-tools conversation, in a process the campaign may kill.

Usage: ``python -m tests.faults.worker '<json job>'``. The bridge only knows host tools, so
nonoka-run tools and plans with parallel steps are driven here through ``Runner``, with the
index row and timeline written by the turn service's ``Journal`` as ``nonoka run``'s are. The
model is a pure function of the conversation, so a retried step asks it the same questions.

Job fields: ``project`` (its ``.nonoka/sessions.db`` is used), ``markers`` (a file every tool
start is appended to, ``<tool> <key>``), ``session_id``, ``mode`` (``react`` | ``plan``),
``prompt`` (react) and ``retry`` (continue a step a killed process left behind, as a host
that never saw the answer retries the same request).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from nonoka import Agent, Plan, Runner, Step, Tool
from nonoka.events import RunEvent, RunWarning
from nonoka.llm.base import ModelResponse
from nonoka.runtime.paradigms.env import RunResult
from nonoka.state.messages import Message
from nonoka.store.project import open_project_stores
from nonoka.testing import FunctionModel, calls, text
from nonoka.turn.journal import Journal
from nonoka.turn.outcome import finish_reason_of
from tests.support.tools import marked_tools

PLAN = [
    {"id": "a", "tool": "lookup", "args": {"key": "a"}},
    {"id": "b", "tool": "lookup", "args": {"key": "b"}},
    {"id": "m", "tool": "send_email", "args": {"to": "team"}},
    {"id": "c", "tool": "lookup", "args": {"key": "c"}, "depends_on": ["a", "b"]},
    {"id": "d", "prompt": "summarise {{c}}", "depends_on": ["c", "m"]},
]
"""Layer one runs a, b and m in parallel; c and then d follow."""


def respond(messages: list[Message], _tools: Any) -> ModelResponse:
    """The model: a pure function of what it is shown (so retries see the same answers)."""
    last = messages[-1]
    if last.role == "user" and last.content == "start":
        return calls(("lookup", {"key": "k1"}, "c1"), ("lookup", {"key": "k2"}, "c2"),
                     ("send_email", {"to": "ana"}, "m1"))
    if last.role == "user" and last.content == "more":
        return calls(("lookup", {"key": "k3"}, "c3"))
    if last.role == "tool":
        answered = sum(1 for m in messages if m.role == "tool")
        return text(f"done after {answered} tool results", input_tokens=7, output_tokens=5)
    return text(f"answer to {last.content}", input_tokens=7, output_tokens=5)


def build_tools(markers: Path) -> list[Tool]:
    def started(name: str, key: str) -> None:
        with markers.open("a") as log:
            log.write(f"{name} {key}\n")

    return marked_tools(started)


async def run(job: dict[str, Any]) -> dict[str, Any]:
    project = Path(job["project"])
    sid = job["session_id"]
    stores = open_project_stores(project)
    warnings: list[str] = []
    try:
        model = FunctionModel(respond, name="test:campaign")
        agent = Agent(model=model, tools=build_tools(Path(job["markers"])))
        runner = Runner(stores.checkpoints)
        book = Journal(stores, title=f"campaign {sid}",
                           metadata={"purpose": "chat", "source": "fault campaign"})

        async def on_event(event: RunEvent) -> None:
            if isinstance(event, RunWarning):
                warnings.append(event.code)
            await book.on_event(event)

        await book.log("request", {"mode": job["mode"], "retry": job.get("retry", False)})
        if await runner.load_session(sid) is None:
            session = await runner.open_session(agent, sid)
            await runner.save_session(session)
            await book.index(session, model=model.name, created=True)
        book.start(sid)
        result = await _step(runner, agent, job, on_event)
        await book.finish(finish_reason_of(result))
    finally:
        await stores.close()
    return {"status": str(result.status), "output": result.output, "error": result.error,
            "warnings": warnings}


async def _step(runner: Runner, agent: Agent, job: dict[str, Any],
                on_event: Any) -> RunResult:
    sid = job["session_id"]
    if job["mode"] == "plan":
        plan = Plan(steps=[Step.model_validate(s) for s in PLAN])
        return await runner.run_plan(agent, plan, session_id=sid, on_event=on_event)
    prompt = job["prompt"]
    if job.get("retry"):
        session = await runner.load_session(sid)
        users = [e for e in session.memory.entries if e.role == "user"] if session else []
        if users and users[-1].content == prompt:  # the killed process stored the prompt
            return await runner.resume(agent, sid, on_event=on_event)
    return await runner.run_react(agent, prompt, session_id=sid, on_event=on_event)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))))
