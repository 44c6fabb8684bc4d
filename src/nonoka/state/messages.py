"""Messages: what crosses the wire, to a model or between a provider and the bridge.

A ``Message`` is the OpenAI-style shape every front end speaks, with what a lossless
middle layer must carry besides text: the content as ``parts`` when it is more than
one text (text and files: an image, a PDF, a text file), an assistant's ``reasoning``
(its text and the provider's opaque metadata, such as a signature the provider wants
back), per-call and per-message ``provider_metadata`` (opaque, sent back as received:
a Gemini thought signature, a DeepSeek field). ``content`` always holds the message's
text (the parts' text joined), so readers that know only text still read it.

A ``MemoryEntry`` (``nonoka.state.entries``) is what a session stores of a message.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]

ProviderMetadata = dict[str, Any]
"""Opaque data a provider attached to a message, part or call, keyed by the provider
(``{"openai_compatible": {...}}``, ``{"anthropic": {"signature": ...}}``): stored as
received and sent back to the provider it came from."""


class TextPart(BaseModel):
    """A piece of a message's text."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str
    provider_metadata: ProviderMetadata | None = None


class FilePart(BaseModel):
    """A file in a message: an image, a PDF, a text file. Its bytes are inline
    (``data``, base64) or at a ``url``; stored sessions keep inline bytes once, by
    digest, whatever the number of entries and branches holding them."""

    model_config = ConfigDict(frozen=True)

    type: Literal["file"] = "file"
    media_type: str = Field(min_length=1)
    """``image/png``, ``application/pdf``, ``text/plain``..."""
    data: str | None = None
    """The bytes, base64-encoded."""
    url: str | None = None
    filename: str | None = None
    provider_metadata: ProviderMetadata | None = None


Part = Annotated[TextPart | FilePart, Field(discriminator="type")]


class ReasoningPart(BaseModel):
    """What a model thought before it answered, as it streamed it: the text (empty when
    the provider gives only an opaque form) and the provider's metadata that must come
    back with it (a signature, an encrypted form, the field it arrived in)."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    provider_metadata: ProviderMetadata | None = None


class ToolCall(BaseModel):
    """One call the model asked for. ``arguments`` is the JSON text the model wrote;
    ``provider_metadata`` what the provider sent with the call and wants back."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"
    provider_metadata: ProviderMetadata | None = None


class Message(BaseModel):
    """A chat message in the OpenAI-style shape every front end speaks."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str = ""
    """The message's text (with ``parts``: their text, joined by newlines)."""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    parts: list[Part] | None = None
    """The content in order, when it is more than one text: several texts, files."""
    reasoning: list[ReasoningPart] | None = None
    """An assistant message's reasoning, in the order it came."""
    provider_metadata: ProviderMetadata | None = None


def joined_text(parts: list[TextPart | FilePart]) -> str:
    """The text of ``parts``, joined by newlines (what ``Message.content`` holds)."""
    return "\n".join(p.text for p in parts if isinstance(p, TextPart))


class ToolResult(BaseModel):
    """A result the host sends back for one of its pending tool calls."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    content: str
    is_error: bool = False
    parts: list[Part] | None = None
    """The result in order when it is more than one text (an image a tool read)."""
