"""A host's step that ends in an assistant message: sent to the model as the host sent it.

A host owns its agent loop, and some of its steps end the history with an assistant
message of its own: OpenCode's last step under an agent's step limit adds "CRITICAL -
MAXIMUM STEPS REACHED ... Respond with text only." as an assistant message; a client
may prefill the start of an answer. Such a step still needs a model call, and the model
must see that message last, as it would directly (each adapter applies its provider's
own rules for a final assistant message, Anthropic's prefill among them).

That message is not part of the conversation nonoka stores: it is the host's
instruction for this one call (OpenCode does not keep it, and its next request does not
carry it), not an answer. So the bridge takes it off the history it reconciles with the
stored conversation (``host_step``), and the turn's model (``StepModel``) sends it after
the conversation in the turn's first model request. The answer is stored as usual, so a
process that dies after storing it leaves the host's retry an answer to replay, never a
second model call — nonoka's crash repair, which ends a turn on a stored final answer,
sees only answers the model wrote.

Internal: this module's layout may change.
"""

from __future__ import annotations

from collections.abc import Sequence

from nonoka.errors import ConfigurationError
from nonoka.llm.base import (
    CallOptions,
    ChatModel,
    ModelResponse,
    ReasoningSink,
    TextSink,
    ToolSpec,
    takes_options,
)
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message


def host_step(messages: Sequence[Message]) -> tuple[list[Message], Message | None]:
    """The host's history, and the assistant message it ends with when that message
    calls no tool (``None`` otherwise): the history is what is compared with the stored
    conversation, the message is sent to the model after it.

    Raises ``ConfigurationError`` when no user message or tool result comes right
    before that message (two assistant messages in a row, or one alone): nothing there
    for the model to answer, and a stored answer would end the turn without a call."""
    if not messages or messages[-1].role != "assistant" or messages[-1].tool_calls:
        return list(messages), None
    history, last = list(messages[:-1]), messages[-1]
    before = next((m.role for m in reversed(history) if m.role != "system"), None)
    if before not in ("user", "tool"):
        raise ConfigurationError(
            "the history ends with an assistant message that follows "
            f"{'another assistant message' if before else 'no user message'}: nonoka sends "
            "a final assistant message (a prefill, an agent's last-step instruction) to the "
            "model after a user message or tool results only; end the history with one "
            "assistant message after the message it answers")
    return history, last


class StepModel:
    """``model``, whose first conversation call in this turn ends with ``step``, the
    host's own final assistant message.

    Only the turn's conversation call (``complete_with``, which the runtime makes for
    the model's answer) carries it; ``complete`` (what a compaction summary asks) is the
    model's own, unchanged."""

    def __init__(self, model: ChatModel, step: Message) -> None:
        self.model = model
        self.step: Message | None = step

    @property
    def name(self) -> str:
        return self.model.name

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *,
                       on_text: TextSink | None = None) -> ModelResponse:
        return await self.model.complete(messages, tools, on_text=on_text)

    async def complete_with(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                            *, on_text: TextSink | None = None,
                            on_reasoning: ReasoningSink | None = None,
                            options: CallOptions | None = None) -> ModelResponse:
        sent = self._with_step(messages)
        model = self.model
        if takes_options(model):
            return await model.complete_with(sent, tools, on_text=on_text,
                                             on_reasoning=on_reasoning, options=options)
        return await model.complete(sent, tools, on_text=on_text)

    def _with_step(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The conversation, then the host's message (the first call only). A session's
        conversation stays entries, so the adapter encodes it as it always does."""
        step, self.step = self.step, None
        if step is None:
            return messages
        if isinstance(messages, EntryMessages):
            return EntryMessages([*messages.entries, MemoryEntry.from_message(step)])
        return [*messages, step]
