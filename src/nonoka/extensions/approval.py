"""Tool approval: a call to a tool that needs approval pauses the session until decided.

The decision may come from another process, hours later: ``record_decision`` writes it
into the stored session, and the next resume runs (or refuses) the call. Counters of
requests, approvals and denials live in the extension state and survive restarts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from nonoka.errors import ToolResultMismatchError
from nonoka.extensions.base import ExtensionContext, LoopExtension, ToolDecision
from nonoka.runtime.tools import Tool
from nonoka.state.messages import ToolCall

NAMESPACE = "approval"


class ToolApproval(LoopExtension):
    """Pause before tools marked ``requires_approval`` (or named in ``tools``)."""

    namespace = NAMESPACE

    def __init__(self, tools: Iterable[str] = ()) -> None:
        self._names = set(tools)

    def needs_approval(self, tool: Tool) -> bool:
        return tool.requires_approval or tool.name in self._names

    async def before_tool_call(
        self, ctx: ExtensionContext, call: ToolCall, tool: Tool
    ) -> ToolDecision:
        if not self.needs_approval(tool):
            return ToolDecision.allow()
        counters = ctx.state.setdefault("counters", {"requested": 0, "approved": 0, "denied": 0})
        decision = ctx.state.setdefault("decisions", {}).pop(call.id, None)
        pending = ctx.state.setdefault("pending", {})
        if decision is None:
            if call.id not in pending:
                pending[call.id] = {"tool": call.name, "arguments": call.arguments,
                                    "requested_at": time.time()}
                counters["requested"] += 1
            return ToolDecision.pause(f"tool {call.name!r} needs approval")
        pending.pop(call.id, None)
        if decision["approved"]:
            counters["approved"] += 1
            return ToolDecision.allow()
        counters["denied"] += 1
        note = f": {decision['note']}" if decision.get("note") else ""
        return ToolDecision.deny(f"the user denied this call to {call.name!r}{note}")


def pending_approvals(extension_state: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Calls waiting for a decision, by tool-call id."""
    return dict(extension_state.get(NAMESPACE, {}).get("pending", {}))


def apply_decision(
    extension_state: dict[str, dict[str, Any]], call_id: str, approved: bool, note: str
) -> None:
    """Record a decision for a pending call; raises if no such call is waiting."""
    state = extension_state.setdefault(NAMESPACE, {})
    if call_id not in state.get("pending", {}):
        waiting = ", ".join(state.get("pending", {})) or "none"
        raise ToolResultMismatchError(
            f"no tool call {call_id!r} is waiting for approval (waiting: {waiting})"
        )
    state.setdefault("decisions", {})[call_id] = {
        "approved": approved, "note": note, "decided_at": time.time(),
    }
