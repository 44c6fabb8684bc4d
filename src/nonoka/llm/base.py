"""The model port: what the runtime needs from any chat model, and one optional
capability (``AdoptsInflight``) that lets the bridge send a request early."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

from nonoka.state.messages import Message, ProviderMetadata, ReasoningPart, ToolCall

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
    wire: dict[str, Any] | None = None
    """The tool as the Responses API takes it, sent as given by the adapter that speaks
    that API (a hosted tool it runs, a custom or namespace tool); ``None``: a function."""

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
    """Token counts (and cost, when known) of one model call.

    ``input_tokens`` counts every input token, ``cache_read_tokens`` and
    ``cache_write_tokens`` the part of them read from or written to the provider's
    prompt cache (priced at their own rates); ``reasoning_tokens`` the part of
    ``output_tokens`` the model spent reasoning."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


def call_usage(usage: Usage) -> dict[str, Any]:
    """A call's usage as an assistant entry keeps it: its non-zero counts."""
    counts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
              "cost_usd": usage.cost_usd or 0.0,
              "cache_read_tokens": usage.cache_read_tokens,
              "cache_write_tokens": usage.cache_write_tokens,
              "reasoning_tokens": usage.reasoning_tokens}
    return {name: value for name, value in counts.items() if value}


@dataclass(frozen=True)
class ModelWarning:
    """Something an adapter did that the user should know of, without failing the call:
    an option it did not send, usage the endpoint reported that could not be counted.
    The runtime emits each as a ``warning`` event (``code``, ``message``, ``details``)."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


USAGE_INVALID = "model_usage_invalid"
"""The endpoint reported usage counts that are not token counts (negative, not finite,
not numbers, or beyond any call); they were counted as 0 and the answer kept."""
OPTION_DROPPED = "model_option_dropped"
"""A call option the provider's API has no field for (or nonoka does not know) was not
sent."""


@dataclass(frozen=True)
class ModelResponse:
    """One complete answer: text, tool calls, usage and why the model stopped, with
    the reasoning it streamed, what the provider attached to the message and what the
    adapter warns of (``warnings``)."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str = ""
    reasoning: list[ReasoningPart] = field(default_factory=list)
    provider_metadata: ProviderMetadata | None = None
    warnings: tuple[ModelWarning, ...] = ()


@dataclass(frozen=True)
class CallOptions:
    """How the host wants this one call made, forwarded as it gave them: a provider
    that takes a field receives it, with ``extra`` (provider-specific fields, by their
    wire names) added as they are."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    response_format: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    reasoning_effort: str | None = None
    top_k: int | None = None
    """Anthropic's ``top_k``: the other APIs have none, and their adapters leave it out."""
    eager_input_streaming: list[str] | None = None
    """Tools (by name) Anthropic streams the arguments of unbuffered; others ignore it."""
    extra: dict[str, Any] = field(default_factory=dict)

    def wire_fields(self, *, with_extra: bool = True) -> dict[str, Any]:
        """The Chat Completions body fields these options set (``extra`` last, as given,
        unless ``with_extra`` is false: the adapters send only the ones their API takes,
        ``nonoka.llm.options``)."""
        fields = {name: getattr(self, name) for name in _OPTION_FIELDS
                  if getattr(self, name) is not None}
        return {**fields, **self.extra} if with_extra else fields


_OPTION_FIELDS = ("max_tokens", "temperature", "top_p", "stop", "seed", "response_format",
                  "tool_choice", "reasoning_effort")


ReasoningSink = Callable[[str], Awaitable[None] | None]
"""Receives streamed reasoning text as it arrives."""


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
class TakesCallOptions(ChatModel, Protocol):
    """A model that takes the host's call options and streams its reasoning: the
    runtime calls ``complete_with`` instead of ``complete`` when a model has it (a
    model without it gets the conversation and tools only)."""

    async def complete_with(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
        on_reasoning: ReasoningSink | None = None,
        options: CallOptions | None = None,
    ) -> ModelResponse:
        """``complete``, with ``options`` sent and reasoning streamed to ``on_reasoning``."""
        ...


class CompletesWithOptions(TakesCallOptions):
    """A ``TakesCallOptions`` model's ``complete``: ``complete_with`` without options
    or reasoning, so an adapter writes only the one method."""

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        on_text: TextSink | None = None,
    ) -> ModelResponse:
        return await self.complete_with(messages, tools, on_text=on_text)


def takes_options(model: ChatModel) -> TypeGuard[TakesCallOptions]:
    """``isinstance(model, TakesCallOptions)``, answered at once for a model that derives
    from ``CompletesWithOptions`` (every adapter): a runtime protocol check walks the
    protocol's members on each call, tens of microseconds on every model step."""
    return isinstance(model, (CompletesWithOptions, TakesCallOptions))  # in this order


@runtime_checkable
class AdoptsInflight(ChatModel, Protocol):
    """A model whose request the bridge can send before the runtime has loaded.

    It tells the exact bytes it would post (``frame`` and ``request_body``, in the
    Chat Completions wire format of ``nonoka.llm.wire``), so a turn can leave a template
    of the next request behind, and it answers from a request already in flight
    (``adopt``) only when its own request is byte for byte that one. Optional: a model
    without it simply gets no early requests.
    """

    def frame(self, tools: Sequence[ToolSpec] = (),
              options: CallOptions | None = None) -> BodyFrame:
        """The request body around its messages, for ``tools`` and ``options``."""
        ...

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                     options: CallOptions | None = None) -> bytes:
        """The exact bytes the next call posts for ``messages``, ``tools``, ``options``."""
        ...

    def adopt(self, inflight: Inflight) -> None:
        """Take the early request held by ``inflight`` for the next call: its answer is
        read if the call's request is the same, and it is closed unread otherwise."""
        ...
