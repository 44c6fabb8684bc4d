"""The ReAct loop: call the model, run the tools it asks for, repeat until it answers.

Every step is checkpointed, so the loop can stop anywhere and a new process can pick
it up. The crash-repair rule: tool calls of the last assistant entry that have no
result are settled before anything else happens —

* a call that never started runs now;
* a call that started but has no result (the process died while running it) runs
  again if its tool is idempotent; otherwise its unknown outcome is recorded as an
  error result and surfaced as a ``tool_outcome_unknown`` warning, never silently re-run;
* a call the host must run, or one waiting for approval, pauses the session.

Before a tool runs, its intent is written to the checkpoint; that is how the two cases
above are told apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nonoka import faults
from nonoka.errors import ToolError
from nonoka.events import (
    ModelCalled,
    ReasoningDelta,
    RunWarning,
    TextDelta,
    ToolCallFinished,
    ToolCallRequested,
)
from nonoka.extensions.base import ToolDecision
from nonoka.llm.base import ModelResponse, call_usage, takes_options
from nonoka.runtime.paradigms.env import LoopEnv, RunResult, result_of
from nonoka.runtime.session import Session
from nonoka.runtime.tools import RunContext, Tool
from nonoka.runtime.window import summary_request
from nonoka.state.entries import MemoryEntry, user_entry
from nonoka.state.ledger import Termination
from nonoka.state.messages import Message, ToolCall
from nonoka.state.session_state import SessionStatus

CONTRACT_NAMESPACE = "nonoka.contract"


class ReActAgent:
    """Runs one session's conversation loop against an environment."""

    def __init__(self, env: LoopEnv) -> None:
        self.env = env

    async def run(self, session: Session, prompt: str | Message) -> RunResult:
        """Add the user's prompt (closing whatever the last turn left open) and loop."""
        session.begin()
        outcome = await self._settle(session, abandon_waiting=True)
        if outcome is not None:
            return outcome
        session.memory.append(user_entry(prompt))
        session.turn_count += 1
        await self.env.save(session)
        return await self._loop(session)

    async def resume(self, session: Session) -> RunResult:
        """Repair a turn cut short (dangling tool calls), then carry the loop on."""
        session.begin()
        return await self._loop(session)

    # -- the loop -----------------------------------------------------------------------

    async def _loop(self, session: Session) -> RunResult:
        while True:
            outcome = await self._settle(session)
            if outcome is not None:
                return outcome
            answer = _stored_answer(session)
            if answer is None:
                termination = session.exceeded()
                if termination is not None:
                    return await self._stop(session, termination, SessionStatus.FAILED)
                await self._maybe_compact(session)
                response = await self._call_model(session)
                if response.tool_calls:
                    for call in response.tool_calls:
                        tool = self.env.agent.tool_map.get(call.name)
                        executed_by = tool.executed_by if tool is not None else "nonoka"
                        await self.env.emit(ToolCallRequested(call, executed_by))
                    continue
                answer = response.text
            if await self._repair_contract(session, answer):
                continue
            session.terminate(Termination(reason="completed"), SessionStatus.COMPLETED)
            await self.env.save(session)
            return result_of(session, output=answer)

    async def _call_model(self, session: Session) -> ModelResponse:
        """Ask the model; the answer is stored with its usage before anything else."""
        for extension in self.env.extensions:
            await extension.before_model_call(self.env.ext_ctx(session, extension))

        async def on_text(chunk: str) -> None:
            await self.env.emit(TextDelta(chunk))

        async def on_reasoning(chunk: str) -> None:
            await self.env.emit(ReasoningDelta(chunk))

        model, agent = self.env.model, self.env.agent
        specs = [t.spec for t in agent.tool_map.values()]
        messages = session.memory.messages()
        faults.point("model.call.before")
        if takes_options(model):
            response = await model.complete_with(messages, specs, on_text=on_text,
                                                 on_reasoning=on_reasoning,
                                                 options=agent.call_options)
        else:
            response = await model.complete(messages, specs, on_text=on_text)
        # The provider billed the call: the answer and its usage are stored before anything
        # else (the timeline, extensions) can fail, so the ledger matches the bill.
        session.record_model_call(response.usage)
        session.memory.append(MemoryEntry.assistant(
            response.text, response.tool_calls, reasoning=response.reasoning,
            provider_metadata=response.provider_metadata, usage=call_usage(response.usage),
            model=model.name))
        session.step_count += 1
        await self.env.save(session)
        faults.point("model.call.after")
        for warning in response.warnings:  # the adapter's: an option not sent, bad usage
            await self.env.emit(RunWarning(warning.code, warning.message, warning.details))
        await self.env.emit(ModelCalled(model.name, response.usage, tuple(response.reasoning),
                                        response.provider_metadata, response.finish_reason))
        for extension in self.env.extensions:
            await extension.after_model_call(self.env.ext_ctx(session, extension), response)
        return response

    async def _stop(self, session: Session, termination: Termination,
                    status: SessionStatus) -> RunResult:
        session.terminate(termination, status)
        await self.env.save(session)
        return result_of(session)

    # -- settling tool calls --------------------------------------------------------------

    async def _settle(self, session: Session, *, abandon_waiting: bool = False) -> RunResult | None:
        """Give every open call of the last assistant entry a result, or pause for it."""
        _, dangling = session.memory.dangling_tool_calls()
        host_wait: list[ToolCall] = []
        approval_wait: list[ToolCall] = []
        limit_hit: Termination | None = None
        for call in dangling:
            tool = self.env.agent.tool_map.get(call.name)
            if limit_hit is None and tool is not None and tool.executed_by == "nonoka":
                limit_hit = await self._settle_local(session, call, tool, abandon_waiting,
                                                     approval_wait)
            elif limit_hit is not None:
                await self._record(session, call, f"not run: {limit_hit.detail}", is_error=True)
            elif abandon_waiting:
                await self._record(session, call, "no result: the call was still open when "
                                   "the conversation continued", is_error=True)
            elif tool is None:
                known = ", ".join(self.env.agent.tool_map) or "none"
                await self._record(session, call, f"unknown tool {call.name!r}; available: {known}",
                                   is_error=True)
            else:
                host_wait.append(call)
        if limit_hit is not None:
            return await self._stop(session, limit_hit, SessionStatus.FAILED)
        if host_wait or approval_wait:
            session.status = SessionStatus.PAUSED
            await self.env.save(session)
            result = result_of(session)
            result.pending_tool_calls = host_wait
            result.pending_approvals = approval_wait
            return result
        return None

    async def _settle_local(self, session: Session, call: ToolCall, tool: Tool,
                            abandon_waiting: bool, approval_wait: list[ToolCall],
                            ) -> Termination | None:
        """Settle one call of a tool nonoka runs; returns the limit that stopped it, if any."""
        if session.has_intent(call.id) and not tool.idempotent:
            await self._record_unknown_outcome(session, call)
            return None
        decision = await self._decide(session, call, tool)
        if decision.action == "pause":
            if abandon_waiting:
                await self._record(session, call, "not run: it was still waiting for "
                                   "approval when the conversation continued", is_error=True)
            else:
                approval_wait.append(call)
            return None
        if decision.action == "deny":
            await self._record(session, call, decision.reason, is_error=True)
            return None
        limit_hit = session.reserve_tool_call()
        if limit_hit is not None:
            await self._record(session, call, f"not run: {limit_hit.detail}", is_error=True)
            return limit_hit
        session.record_intent(call)
        await self.env.save(session)
        content, is_error = await self._run_tool(session, tool, call)
        await self._record(session, call, content, is_error=is_error)
        return None

    async def _decide(self, session: Session, call: ToolCall, tool: Tool) -> ToolDecision:
        for extension in self.env.extensions:
            decision = await extension.before_tool_call(
                self.env.ext_ctx(session, extension), call, tool)
            if decision.action != "allow":
                return decision
        return ToolDecision.allow()

    async def _run_tool(self, session: Session, tool: Tool, call: ToolCall) -> tuple[str, bool]:
        ctx = RunContext(deps=self.env.deps, session_id=session.session_id, tool_call_id=call.id)
        faults.point("tool.start")
        try:
            outcome = await tool.run(call.arguments, ctx), False
        except asyncio.CancelledError:
            raise
        except ToolError as exc:
            outcome = str(exc), True
        except Exception as exc:  # a tool's failure is the model's to handle
            outcome = f"{type(exc).__name__}: {exc}", True
        faults.point("tool.end")
        return outcome

    async def _record(self, session: Session, call: ToolCall, content: str, *,
                      is_error: bool) -> None:
        """Append the call's result, drop its intent, checkpoint, and tell everyone."""
        session.memory.append(MemoryEntry.tool_result(call, content, is_error=is_error))
        session.clear_intent(call.id)
        await self.env.save(session)
        await self.env.emit(ToolCallFinished(call, content, is_error))
        for extension in self.env.extensions:
            await extension.after_tool_call(self.env.ext_ctx(session, extension), call,
                                            content, is_error)

    async def _record_unknown_outcome(self, session: Session, call: ToolCall) -> None:
        message = (f"outcome unknown: the process running {call.name!r} stopped before it "
                   "finished, and the tool is not marked idempotent, so it was not run again. "
                   "Check whether its effect happened before retrying.")
        await self.env.emit(RunWarning("tool_outcome_unknown", message,
                                       {"tool_call_id": call.id, "tool_name": call.name}))
        session.add_trace("tool_outcome_unknown", call.id)
        await self._record(session, call, message, is_error=True)

    # -- compaction and the completion contract -------------------------------------------

    async def _maybe_compact(self, session: Session) -> None:
        budget = session.limits.max_context_tokens
        if budget is None or session.memory.total_tokens <= budget:
            return
        summarizer = self._summarize if session.limits.summarize_on_compaction else None
        if await session.memory.compact(budget, summarizer):
            session.add_trace("compaction", f"generation {session.memory.generation}")

    async def _summarize(self, entries: Sequence[MemoryEntry]) -> str:
        faults.point("model.call.before")
        response = await self.env.model.complete(summary_request(entries))
        faults.point("model.call.after")
        for warning in response.warnings:
            await self.env.emit(RunWarning(warning.code, warning.message, warning.details))
        await self.env.emit(ModelCalled(self.env.model.name, response.usage))
        return response.text

    async def _repair_contract(self, session: Session, output: str) -> bool:
        """When the answer misses the completion contract, say so and keep going."""
        contract = session.completion_contract or self.env.agent.completion_contract
        if contract is None:
            return False
        done_tools = {e.metadata.get("tool_name") for e in session.memory.entries
                      if e.role == "tool" and not e.metadata.get("is_error")}
        missing = [f"call the tool {t!r}" for t in contract.required_tools if t not in done_tools]
        missing += [f"complete step {s!r}" for s in contract.required_steps
                    if s not in session.completed_steps]
        missing += [f"mention {s!r} in the answer" for s in contract.output_must_contain
                    if s not in output]
        state = session.ext(CONTRACT_NAMESPACE)
        if not missing or state.get("repairs", 0) >= contract.max_repairs:
            return False
        state["repairs"] = state.get("repairs", 0) + 1
        note = "The task is not complete yet. Still to do: " + "; ".join(missing) + "."
        session.memory.append(MemoryEntry.make("user", note, contract_repair=True))
        await self.env.save(session)
        return True


def _stored_answer(session: Session) -> str | None:
    """The text of a final answer stored last by a process that died before it ended the
    turn: the turn is finished from it, never asked again (the answer is stored, as soon
    as it arrives, with the usage the provider billed)."""
    entries = session.memory.entries
    if not entries or entries[-1].role != "assistant" or entries[-1].tool_calls:
        return None
    return entries[-1].content
