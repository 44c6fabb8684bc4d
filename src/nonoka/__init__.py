"""nonoka: an agent runtime whose sessions survive process death.

Processes compute; the database remembers; only the ``session_id`` crosses. The public
names below are loaded on first use, so importing a small submodule (as the per-turn
``nonoka bridge`` does) stays cheap.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs every spawn ~4 ms

__version__ = "0.1.0"
"""The one place the version is written: ``pyproject.toml`` reads this literal statically
(setuptools ``attr``), ``nonoka --version`` prints it and the bridge sends it as
``server_version``, with no ``importlib.metadata`` lookup on the per-turn path."""

_EXPORTS = {
    "Agent": "nonoka.agent",
    "Runner": "nonoka.runner",
    "RunResult": "nonoka.paradigms.env",
    "Plan": "nonoka.plan",
    "Step": "nonoka.plan",
    "Ref": "nonoka.plan",
    "tool": "nonoka.tools",
    "host_tool": "nonoka.tools",
    "Tool": "nonoka.tools",
    "RunContext": "nonoka.tools",
    "Session": "nonoka.session",
    "SessionState": "nonoka.state",
    "SessionStatus": "nonoka.state",
    "StepStatus": "nonoka.state",
    "StepResult": "nonoka.state",
    "StepFailure": "nonoka.state",
    "CompletionContract": "nonoka.state",
    "WorkingMemory": "nonoka.memory",
    "MemoryBackend": "nonoka.memory",
    "MemoryEntry": "nonoka.messages",
    "Message": "nonoka.messages",
    "ToolCall": "nonoka.messages",
    "ToolResult": "nonoka.messages",
    "RuntimeLimits": "nonoka.runtime",
    "RuntimeUsage": "nonoka.runtime",
    "Termination": "nonoka.runtime",
    "ChatModel": "nonoka.llm.base",
    "ModelResponse": "nonoka.llm.base",
    "Usage": "nonoka.llm.base",
    "LoopExtension": "nonoka.extensions.base",
    "ToolDecision": "nonoka.extensions.base",
    "ToolApproval": "nonoka.extensions.approval",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from nonoka.agent import Agent as Agent
    from nonoka.extensions.approval import ToolApproval as ToolApproval
    from nonoka.extensions.base import LoopExtension as LoopExtension
    from nonoka.extensions.base import ToolDecision as ToolDecision
    from nonoka.llm.base import ChatModel as ChatModel
    from nonoka.llm.base import ModelResponse as ModelResponse
    from nonoka.llm.base import Usage as Usage
    from nonoka.memory import MemoryBackend as MemoryBackend
    from nonoka.memory import WorkingMemory as WorkingMemory
    from nonoka.messages import MemoryEntry as MemoryEntry
    from nonoka.messages import Message as Message
    from nonoka.messages import ToolCall as ToolCall
    from nonoka.messages import ToolResult as ToolResult
    from nonoka.paradigms.env import RunResult as RunResult
    from nonoka.plan import Plan as Plan
    from nonoka.plan import Ref as Ref
    from nonoka.plan import Step as Step
    from nonoka.runner import Runner as Runner
    from nonoka.runtime import RuntimeLimits as RuntimeLimits
    from nonoka.runtime import RuntimeUsage as RuntimeUsage
    from nonoka.runtime import Termination as Termination
    from nonoka.session import Session as Session
    from nonoka.state import CompletionContract as CompletionContract
    from nonoka.state import SessionState as SessionState
    from nonoka.state import SessionStatus as SessionStatus
    from nonoka.state import StepFailure as StepFailure
    from nonoka.state import StepResult as StepResult
    from nonoka.state import StepStatus as StepStatus
    from nonoka.tools import RunContext as RunContext
    from nonoka.tools import Tool as Tool
    from nonoka.tools import host_tool as host_tool
    from nonoka.tools import tool as tool


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nonoka' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
