"""Loop extensions: hooks around model and tool calls with state that survives restarts."""

from nonoka.extensions.approval import ToolApproval
from nonoka.extensions.base import ExtensionContext, LoopExtension, ToolDecision

__all__ = ("ExtensionContext", "LoopExtension", "ToolApproval", "ToolDecision")
