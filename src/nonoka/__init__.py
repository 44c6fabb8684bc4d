"""nonoka: an agent runtime whose sessions survive process death.

Processes compute; the database remembers; only the ``session_id`` crosses. The public
names below are loaded on first use, so importing a small submodule (as the per-turn
``nonoka bridge`` does) stays cheap.
"""

# No `from __future__ import annotations` here: it imports a module, and the handler below
# must come first.


def _starting_the_bridge() -> bool:
    """Whether this process is ``nonoka bridge`` (``sys.argv[0]`` is ``-m`` while ``-m``
    imports the package, or the ``nonoka`` script)."""
    import sys

    argv = sys.argv
    return argv[1:2] == ["bridge"] and (
        argv[0] == "-m" or argv[0].replace("\\", "/").rsplit("/", 1)[-1]
        in ("nonoka", "nonoka.exe"))


def _quiet_while_the_bridge_starts() -> None:
    """``nonoka bridge``: until the bridge installs its own handlers (its first line of
    ``main``), SIGINT or SIGTERM end the process at once, quietly, with status 0, as a
    signal before any request does later: nothing was read or written yet (but with
    ``128 + signal`` and a line on stderr when a request is already waiting in the input,
    as ``bridge.server.stopped_code`` says it later, so the host never takes the silence
    for an answer). Without this,
    SIGINT in the bridge's first ~30 ms (Python still importing) printed a
    KeyboardInterrupt traceback. Run first thing here, where ``python -m nonoka bridge``
    and the ``nonoka`` script both begin; it imports nothing that is not loaded already.
    SIGINT's handler goes in first: Python runs a signal's handler after the next call
    returns, and the one in place then is the one that runs."""
    if not _starting_the_bridge():
        return
    import _signal  # type: ignore[import-not-found]  # `signal` without its enums: faster
    import os

    def stop(signum: int, frame: object) -> None:
        import select

        try:
            waiting = bool(select.select([0], [], [], 0)[0]) and bool(os.read(0, 1))
        except OSError:
            waiting = False
        if waiting:
            os.write(2, b"nonoka bridge: stopped by a signal before it read the request "
                        b"waiting in its input; nothing was done: send the request again\n")
        os._exit(128 + signum if waiting else 0)

    try:
        for signum in (_signal.SIGINT, _signal.SIGTERM):
            _signal.signal(signum, stop)
    except ValueError:  # not the main thread: not the bridge starting
        pass


try:
    _quiet_while_the_bridge_starts()
except KeyboardInterrupt:  # SIGINT came before its handler above was in place
    if not _starting_the_bridge():
        raise
    import os as _os

    _os._exit(0)

from importlib import import_module  # noqa: E402

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs every spawn ~4 ms

__version__ = "0.1.0"
"""The one place the version is written: ``pyproject.toml`` reads this literal statically
(setuptools ``attr``), ``nonoka --version`` prints it and the bridge sends it as
``server_version``, with no ``importlib.metadata`` lookup on the per-turn path."""

_EXPORTS = {
    "Agent": "nonoka.runtime.agent",
    "Runner": "nonoka.runtime.runner",
    "RunResult": "nonoka.runtime.paradigms.env",
    "Plan": "nonoka.state.plan",
    "Step": "nonoka.state.plan",
    "Ref": "nonoka.state.plan",
    "tool": "nonoka.runtime.tools",
    "host_tool": "nonoka.runtime.tools",
    "Tool": "nonoka.runtime.tools",
    "RunContext": "nonoka.runtime.tools",
    "Session": "nonoka.runtime.session",
    "SessionState": "nonoka.state.session_state",
    "SessionStatus": "nonoka.state.session_state",
    "TraceEvent": "nonoka.state.session_state",
    "StepStatus": "nonoka.state.session_state",
    "StepResult": "nonoka.state.session_state",
    "StepFailure": "nonoka.state.session_state",
    "CompletionContract": "nonoka.state.session_state",
    "WorkingMemory": "nonoka.runtime.window",
    "MemoryBackend": "nonoka.runtime.window",
    "MemoryEntry": "nonoka.state.entries",
    "Message": "nonoka.state.messages",
    "ToolCall": "nonoka.state.messages",
    "ToolResult": "nonoka.state.messages",
    "RuntimeLimits": "nonoka.state.ledger",
    "RuntimeUsage": "nonoka.state.ledger",
    "SessionRuntimeState": "nonoka.state.ledger",
    "Termination": "nonoka.state.ledger",
    "ChatModel": "nonoka.llm.base",
    "ModelResponse": "nonoka.llm.base",
    "Usage": "nonoka.llm.base",
    "LoopExtension": "nonoka.extensions.base",
    "ToolDecision": "nonoka.extensions.base",
    "ToolApproval": "nonoka.extensions.approval",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from nonoka.extensions.approval import ToolApproval as ToolApproval
    from nonoka.extensions.base import LoopExtension as LoopExtension
    from nonoka.extensions.base import ToolDecision as ToolDecision
    from nonoka.llm.base import ChatModel as ChatModel
    from nonoka.llm.base import ModelResponse as ModelResponse
    from nonoka.llm.base import Usage as Usage
    from nonoka.runtime.agent import Agent as Agent
    from nonoka.runtime.paradigms.env import RunResult as RunResult
    from nonoka.runtime.runner import Runner as Runner
    from nonoka.runtime.session import Session as Session
    from nonoka.runtime.tools import RunContext as RunContext
    from nonoka.runtime.tools import Tool as Tool
    from nonoka.runtime.tools import host_tool as host_tool
    from nonoka.runtime.tools import tool as tool
    from nonoka.runtime.window import MemoryBackend as MemoryBackend
    from nonoka.runtime.window import WorkingMemory as WorkingMemory
    from nonoka.state.entries import MemoryEntry as MemoryEntry
    from nonoka.state.ledger import RuntimeLimits as RuntimeLimits
    from nonoka.state.ledger import RuntimeUsage as RuntimeUsage
    from nonoka.state.ledger import SessionRuntimeState as SessionRuntimeState
    from nonoka.state.ledger import Termination as Termination
    from nonoka.state.messages import Message as Message
    from nonoka.state.messages import ToolCall as ToolCall
    from nonoka.state.messages import ToolResult as ToolResult
    from nonoka.state.plan import Plan as Plan
    from nonoka.state.plan import Ref as Ref
    from nonoka.state.plan import Step as Step
    from nonoka.state.session_state import CompletionContract as CompletionContract
    from nonoka.state.session_state import SessionState as SessionState
    from nonoka.state.session_state import SessionStatus as SessionStatus
    from nonoka.state.session_state import StepFailure as StepFailure
    from nonoka.state.session_state import StepResult as StepResult
    from nonoka.state.session_state import StepStatus as StepStatus
    from nonoka.state.session_state import TraceEvent as TraceEvent


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nonoka' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
