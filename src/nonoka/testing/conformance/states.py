"""Session states for the conformance suite, from minimal to fully populated."""

from __future__ import annotations

import uuid
from typing import Any

from nonoka import (
    CompletionContract,
    MemoryEntry,
    Plan,
    RuntimeLimits,
    RuntimeUsage,
    SessionRuntimeState,
    SessionState,
    SessionStatus,
    Step,
    StepFailure,
    StepResult,
    StepStatus,
    Termination,
    ToolCall,
    TraceEvent,
)


def new_id() -> str:
    return str(uuid.uuid4())


def plan() -> Plan:
    return Plan(steps=[
        Step(id="fetch", tool="http_get", args={"url": "https://example.com/ü"}),
        Step(id="parse", tool="parse_html", args={"html": {"$ref": "fetch", "path": "body"}},
             max_attempts=3),
        Step(id="summarise", prompt="Summarise {{parse.title}} in one line"),
        Step(id="notify", tool="send", args={"to": ["a@example.com"],
                                             "items": [{"$ref": "parse"}]},
             depends_on=["summarise"]),
    ])


def turn(n: int, *, tools: bool = False) -> list[MemoryEntry]:
    """One user/assistant exchange; with ``tools``, a paired tool call in between."""
    user = MemoryEntry.make("user", f"question {n}: what is in file {n}.txt? ✓")
    if not tools:
        return [user, MemoryEntry.assistant(f"answer {n}: " + "lorem ipsum " * 20)]
    call = ToolCall(id=f"call_{n}", name="read_file", arguments=f'{{"path": "{n}.txt"}}')
    return [
        user,
        MemoryEntry.assistant("", [call]),
        MemoryEntry.tool_result(call, f"contents of {n}.txt\n" * 5, elapsed_ms=12.5),
        MemoryEntry.assistant(f"file {n} says hello"),
    ]


def conversation(turns: int) -> list[MemoryEntry]:
    entries = [MemoryEntry.make("system", "You are a careful assistant.")]
    for n in range(turns):
        entries += turn(n, tools=n % 3 == 1)
    return entries


def minimal(session_id: str | None = None, **fields: Any) -> SessionState:
    return SessionState.model_validate({"session_id": session_id or new_id(), **fields})


def full(session_id: str | None = None) -> SessionState:
    """Every field set to something other than its default."""
    return SessionState(
        session_id=session_id or new_id(),
        status=SessionStatus.PAUSED,
        current_plan=plan(),
        step_statuses={"fetch": StepStatus.COMPLETED, "parse": StepStatus.FAILED,
                       "summarise": StepStatus.RUNNING, "notify": StepStatus.PENDING},
        completed_steps={"fetch": StepResult(output={"body": "<h1>hi</h1>", "status": 200},
                                             completed_at=1_764_000_000.25)},
        failed_steps={"parse": StepFailure(error_type="ValueError", message="no <title>",
                                           traceback="Traceback...\nValueError", attempts=3,
                                           failed_at=1_764_000_001.5)},
        memory_entries=conversation(4),
        memory_generation=3,
        runtime_state=SessionRuntimeState(
            limits=RuntimeLimits(max_model_turns=40, max_tool_calls=100,
                                 max_total_tokens=200_000, max_cost_usd=1.5,
                                 wall_timeout_seconds=600.0, deadline_seconds=3600.0,
                                 max_context_tokens=32_000, summarize_on_compaction=True),
            usage=RuntimeUsage(model_turns=7, tool_calls=3, input_tokens=12_345,
                               output_tokens=678, cost_usd=0.0123, wall_seconds=42.5),
            started_at=1_764_000_000.0, deadline_at=1_764_003_600.0,
            cancelled_at=1_764_000_100.0,
            termination=Termination(reason="limit", detail="max_tool_calls reached",
                                    limit="max_tool_calls", at=1_764_000_100.5),
        ),
        completion_contract=CompletionContract(
            description="tests pass", required_tools=["run_tests"],
            required_steps=["notify"], output_must_contain=["PASS"], max_repairs=4),
        extension_state={
            "approval": {"pending": ["rm -rf build"], "granted": {"ls": True}},
            "progress": {"repeats": 2, "last_hash": "ab12", "window": [1, 2.5, None, "x"]},
        },
        start_time=1_764_000_000.0,
        end_time=1_764_000_200.0,
        turn_count=9,
        step_count=4,
        trace=[TraceEvent(kind="resume", detail="from process 1234", at=1_764_000_050.0),
               TraceEvent(kind="compaction", detail="kept 9 entries", at=1_764_000_060.0)],
    )


def stored_as(state: SessionState, revision: int) -> SessionState:
    """What loading ``state`` after it was saved as ``revision`` must give."""
    return state.model_copy(update={"revision": revision})
