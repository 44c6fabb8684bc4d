"""The model port: what the runtime needs from any chat model, and one optional
capability (``AdoptsInflight``) that lets the bridge send a request early."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nonoka.state.messages import Message, ToolCall

if TYPE_CHECKING:
    from nonoka.llm.inflight import Inflight
    from nonoka.llm.wire import BodyFrame

TextSink = Callable[[str], Awaitable[None] | None]
"""Receives streamed text as it arrives."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON Schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class Usage:
    """Token counts (and cost, when known) of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None


@dataclass(frozen=True)
class ModelResponse:
    """One complete answer: text, tool calls, usage and why the model stopped."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str = ""


@runtime_checkable
class ChatModel(Protocol):
    """Anything that can answer a chat: the OpenAI-compatible adapter, test doubles."""

    @property
    def name(self) -> str:
        """A label for logs and the session index, e.g. ``openai:gpt-4o-mini``."""
        ...

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
    ) -> ModelResponse:
        """Answer the conversation; stream text to ``on_text`` as it arrives."""
        ...


@runtime_checkable
class AdoptsInflight(ChatModel, Protocol):
    """A model whose request the bridge can send before the runtime has loaded.

    It tells the exact bytes it would post (``frame`` and ``request_body``, in the
    Chat Completions wire format of ``nonoka.llm.wire``), so a turn can leave a template
    of the next request behind, and it answers from a request already in flight
    (``adopt``) only when its own request is byte for byte that one. Optional: a model
    without it simply gets no early requests.
    """

    def frame(self, tools: Sequence[ToolSpec] = ()) -> BodyFrame:
        """The request body around its messages, for ``tools``."""
        ...

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> bytes:
        """The exact bytes the next ``complete`` posts for ``messages`` and ``tools``."""
        ...

    def adopt(self, inflight: Inflight) -> None:
        """Take the early request held by ``inflight`` for the next call: its answer is
        read if the call's request is the same, and it is closed unread otherwise."""
        ...
