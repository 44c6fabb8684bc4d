"""The model port: what the runtime needs from any chat model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nonoka.messages import Message, ToolCall

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
