"""A process that runs one step of a session, for tests that kill it with SIGKILL.

Usage: ``python -m tests.runtime.crash_worker '<json job>'`` from the repository root. The
job names the database, the session, what to do (react, resume, plan), the model's script,
a directory where tools log each start, and which tool should hang (so the parent can kill
the process mid-call).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from nonoka import Agent, Plan, Runner, Step, Tool, ToolApproval, tool
from nonoka.errors import ModelError
from nonoka.events import RunEvent, RunWarning
from nonoka.llm.base import ModelResponse
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing import ScriptedModel, calls, text
from tests.support.tools import marked_tools


def build_tools(markers: Path, hang_on: str | None) -> list[Tool]:
    def started(name: str, key: str) -> None:
        with (markers / f"{name}.log").open("a") as log:
            log.write(f"{key}\n")
        if hang_on in (name, f"{name}:{key}"):
            time.sleep(3600)

    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file (needs a person's approval)."""
        started("delete_file", path)
        return f"deleted {path}"

    return [*marked_tools(started), delete_file]


def build_step(raw: dict[str, Any]) -> ModelResponse | BaseException:
    if "error" in raw:
        return ModelError(raw["error"], endpoint="http://model.invalid", status=503)
    if "calls" in raw:
        return calls(*[tuple(c) for c in raw["calls"]])
    return text(raw["text"])


async def main(job: dict[str, Any]) -> dict[str, Any]:
    markers = Path(job["markers"])
    store = SQLiteCheckpointStore(job["db"])
    model = ScriptedModel([build_step(s) for s in job["script"]])
    agent = Agent(model=model, tools=build_tools(markers, job.get("hang_on")),
                  extensions=[ToolApproval()])
    warnings: list[str] = []

    def on_event(event: RunEvent) -> None:
        if isinstance(event, RunWarning):
            warnings.append(event.code)

    runner = Runner(store)
    try:
        if job["mode"] == "react":
            result = await runner.run_react(agent, job["prompt"], session_id=job["session_id"],
                                            on_event=on_event)
        elif job["mode"] == "approve":
            await runner.approve_tool_call(job["session_id"], job["call_id"],
                                           approved=job["approved"])
            return {"success": True, "status": "decided", "output": None, "error": None,
                    "warnings": []}
        elif job["mode"] == "plan":
            plan = Plan(steps=[Step.model_validate(s) for s in job["plan"]])
            result = await runner.run_plan(agent, plan, session_id=job["session_id"],
                                           on_event=on_event)
        else:
            result = await runner.resume(agent, job["session_id"], on_event=on_event)
    finally:
        await store.close()
    return {"success": result.success, "status": str(result.status), "output": result.output,
            "error": result.error, "warnings": warnings}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
