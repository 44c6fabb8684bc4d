"""``Agent``: pure configuration — which model, which tools, which instructions.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nonoka.errors import ToolError
from nonoka.runtime.tools import Tool, make_tool
from nonoka.state.ledger import RuntimeLimits
from nonoka.state.session_state import CompletionContract

if TYPE_CHECKING:
    from nonoka.extensions.base import LoopExtension
    from nonoka.llm.base import CallOptions, ChatModel


@dataclass
class Agent:
    """What to run. Holds no state: the same agent serves any number of sessions.

    ``model`` is a ``"provider:model"`` string (resolved on first use) or a ``ChatModel``.
    ``tools`` are ``Tool`` objects or plain functions (wrapped with ``@tool`` defaults).
    ``limits`` apply to new sessions; stored sessions keep the limits they were given.
    """

    model: str | ChatModel
    tools: Sequence[Tool | Callable[..., Any]] = ()
    system_prompt: str = ""
    name: str = "agent"
    limits: RuntimeLimits = field(default_factory=RuntimeLimits)
    extensions: Sequence[LoopExtension] = ()
    completion_contract: CompletionContract | None = None
    call_options: CallOptions | None = None
    """How each model call is made (``max_tokens``, ``temperature``, provider fields...),
    for a model that takes them (``nonoka.llm.TakesCallOptions``)."""

    def __post_init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        for item in self.tools:
            built = item if isinstance(item, Tool) else make_tool(item)
            if built.name in self._tools:
                raise ToolError(f"agent {self.name!r} has two tools named {built.name!r}")
            self._tools[built.name] = built
        self._model: ChatModel | None = None

    @property
    def tool_map(self) -> dict[str, Tool]:
        return self._tools

    def get_model(self) -> ChatModel:
        """The model instance, resolved from its string form on first use."""
        if self._model is None:
            from nonoka.llm import resolve_model

            self._model = resolve_model(self.model)
        return self._model
