"""The hook interface a loop extension implements.

An extension keeps its state in ``ctx.state``: a JSON-serialisable dict stored in the
session's ``extension_state`` under the extension's ``namespace``. Because that dict is
part of every checkpoint, counters and pending decisions survive process death and
host-tool pauses. Every hook has a no-op default; override what you need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from nonoka.llm.base import ModelResponse
from nonoka.runtime.tools import Tool
from nonoka.state.messages import ToolCall


@dataclass(frozen=True)
class ToolDecision:
    """What to do with a tool call: run it, pause the session, or refuse it."""

    action: Literal["allow", "pause", "deny"]
    reason: str = ""

    @classmethod
    def allow(cls) -> ToolDecision:
        return cls("allow")

    @classmethod
    def pause(cls, reason: str) -> ToolDecision:
        return cls("pause", reason)

    @classmethod
    def deny(cls, reason: str) -> ToolDecision:
        return cls("deny", reason)


@dataclass
class ExtensionContext:
    """What a hook sees: the session id and the extension's own persisted state."""

    session_id: str
    state: dict[str, Any]


class LoopExtension:
    """Base class for extensions; subclasses set ``namespace`` and override hooks."""

    namespace: str = "extension"

    async def before_model_call(self, ctx: ExtensionContext) -> None:
        """Called before every model call."""

    async def after_model_call(self, ctx: ExtensionContext, response: ModelResponse) -> None:
        """Called after every model call with its response."""

    async def before_tool_call(
        self, ctx: ExtensionContext, call: ToolCall, tool: Tool
    ) -> ToolDecision:
        """Decide whether a nonoka-run tool call may run now."""
        return ToolDecision.allow()

    async def after_tool_call(
        self, ctx: ExtensionContext, call: ToolCall, content: str, is_error: bool
    ) -> None:
        """Called after a tool call's result was recorded."""
