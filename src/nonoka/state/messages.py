"""Conversation entries and the tool-call pairing that crash repair relies on.

A ``MemoryEntry`` is what a session stores; a ``Message`` is what crosses the wire (to a
model, or between a provider and the bridge). An assistant entry lists its tool calls in
``metadata["tool_calls"]``; a tool entry names the call it answers in
``metadata["tool_call_id"]``. A call is complete when both halves exist.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One call the model asked for. ``arguments`` is the JSON text the model wrote."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"


class Message(BaseModel):
    """A chat message in the OpenAI-style shape every front end speaks."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class ToolResult(BaseModel):
    """A result the host sends back for one of its pending tool calls."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    content: str
    is_error: bool = False
