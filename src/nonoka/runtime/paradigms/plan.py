"""The plan executor: run a plan layer by layer, the steps of a layer concurrently.

Step progress is written as step updates (one small row per change). The snapshot is
saved too — before a tool step runs and with each step's outcome, one save at a time
within the process — because it carries the ledger: a killed process must leave no tool
call or model answer uncounted. On resume, completed steps are skipped. A step whose
status says it started but has no result is treated like a dangling tool call: rerun
when idempotent (prompt steps and idempotent tools), otherwise failed as "outcome
unknown".
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from nonoka import faults
from nonoka.errors import ToolError
from nonoka.events import ModelCalled, RunWarning
from nonoka.runtime.paradigms.env import LoopEnv, RunResult, result_of
from nonoka.runtime.session import Session
from nonoka.runtime.tools import RunContext
from nonoka.state.ledger import Termination
from nonoka.state.messages import Message
from nonoka.state.plan import Plan, Step
from nonoka.state.session_state import SessionStatus, StepFailure, StepResult, StepStatus


class _StepFailed(Exception):
    def __init__(self, failure: StepFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class PlanExecutor:
    """Executes (or resumes) the plan held by a session."""

    def __init__(self, env: LoopEnv) -> None:
        self.env = env
        self._saving = asyncio.Lock()

    async def _checkpoint(self, session: Session) -> None:
        """Save the snapshot, one step at a time: parallel steps share the session.

        The ledger (tool calls reserved, model usage) lives in the snapshot, so it is
        saved before a tool step runs (as the ReAct loop saves an intent) and together
        with a step's outcome: a killed process leaves no work done but uncounted.
        """
        async with self._saving:
            await self.env.save(session)

    async def execute(self, session: Session, plan: Plan) -> RunResult:
        session.current_plan = plan
        session.begin()
        for step in plan.steps:
            session.step_statuses.setdefault(step.id, StepStatus.PENDING)
        await self.env.save(session)
        return await self._run_layers(session, plan)

    async def resume(self, session: Session) -> RunResult:
        assert session.current_plan is not None
        session.begin()
        return await self._run_layers(session, session.current_plan)

    async def _run_layers(self, session: Session, plan: Plan) -> RunResult:
        for layer in plan.layers:
            pending = [plan.step(i) for i in layer if i not in session.completed_steps]
            if not pending:
                continue
            termination = session.exceeded()
            if termination is not None:
                return await self._finish(session, termination, SessionStatus.FAILED)
            outcomes = await asyncio.gather(*(self._run_step(session, s) for s in pending),
                                            return_exceptions=True)
            await self.env.save(session)
            for step, outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                if isinstance(outcome, BaseException):
                    detail = f"step {step.id!r} failed: {outcome}"
                    return await self._finish(session, Termination(reason="error", detail=detail),
                                              SessionStatus.FAILED)
        output = {k: v.output for k, v in session.completed_steps.items()}
        return await self._finish(session, Termination(reason="completed"),
                                  SessionStatus.COMPLETED, output)

    async def _finish(self, session: Session, termination: Termination, status: SessionStatus,
                      output: Any = None) -> RunResult:
        session.terminate(termination, status)
        await self.env.save(session)
        return result_of(session, output=output)

    async def _run_step(self, session: Session, step: Step) -> None:
        store, sid = self.env.store, session.session_id
        was_started = session.step_statuses.get(step.id) == StepStatus.RUNNING
        if was_started and not self._idempotent(step):
            failure = StepFailure(error_type="OutcomeUnknown", message=(
                f"step {step.id!r} started before the process stopped and its tool "
                f"{step.tool!r} is not idempotent, so it was not run again"))
            await self.env.emit(RunWarning("tool_outcome_unknown", failure.message,
                                           {"step_id": step.id, "tool_name": step.tool}))
            await self._fail(session, step, failure)
        session.step_statuses[step.id] = StepStatus.RUNNING
        faults.point("step.update.before")
        await store.save_step_status(sid, step.id, StepStatus.RUNNING)
        faults.point("step.update.after")
        outputs = {k: v.output for k, v in session.completed_steps.items()}
        for attempt in range(1, step.max_attempts + 1):
            try:
                output = await self._perform(session, step, outputs)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if attempt < step.max_attempts:
                    continue
                await self._fail(session, step, StepFailure(
                    error_type=type(exc).__name__, message=str(exc),
                    traceback=traceback.format_exc(limit=5), attempts=attempt))
            else:
                result = StepResult(output=output)
                session.completed_steps[step.id] = result
                session.failed_steps.pop(step.id, None)
                session.step_statuses[step.id] = StepStatus.COMPLETED
                session.step_count += 1
                await self._checkpoint(session)
                faults.point("step.update.before")
                await store.save_step_result(sid, step.id, result)
                faults.point("step.update.after")
                return

    async def _fail(self, session: Session, step: Step, failure: StepFailure) -> None:
        session.failed_steps[step.id] = failure
        session.completed_steps.pop(step.id, None)
        session.step_statuses[step.id] = StepStatus.FAILED
        await self._checkpoint(session)
        faults.point("step.update.before")
        await self.env.store.save_step_error(session.session_id, step.id, failure)
        faults.point("step.update.after")
        raise _StepFailed(failure)

    def _idempotent(self, step: Step) -> bool:
        if step.prompt is not None:
            return True
        tool = self.env.agent.tool_map.get(step.tool or "")
        return tool is not None and tool.idempotent

    async def _perform(self, session: Session, step: Step, outputs: dict[str, Any]) -> Any:
        if step.prompt is not None:
            model = self.env.model
            prompt = step.resolved_prompt(outputs)
            messages = [Message(role="user", content=prompt)]
            if self.env.agent.system_prompt:
                messages.insert(0, Message(role="system", content=self.env.agent.system_prompt))
            faults.point("model.call.before")
            response = await model.complete(messages)
            session.record_model_call(response.usage)
            await self._checkpoint(session)  # what the provider billed, before anything else
            faults.point("model.call.after")
            for warning in response.warnings:
                await self.env.emit(RunWarning(warning.code, warning.message, warning.details))
            await self.env.emit(ModelCalled(model.name, response.usage))
            return response.text
        tool = self.env.agent.tool_map.get(step.tool or "")
        if tool is None or tool.executed_by == "host":
            raise ToolError(f"step {step.id!r} uses tool {step.tool!r}, which this agent "
                            "cannot run itself")
        termination = session.reserve_tool_call()
        if termination is not None:
            raise ToolError(termination.detail)
        await self._checkpoint(session)  # the reservation counts even if the process dies
        ctx = RunContext(deps=self.env.deps, session_id=session.session_id,
                         tool_call_id=f"step:{step.id}")
        faults.point("tool.start")
        output = await tool.invoke(step.resolved_args(outputs), ctx)
        faults.point("tool.end")
        return output
