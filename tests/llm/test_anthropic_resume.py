"""The Messages API adapter goes on from the conversation its last call built, when the
process keeps its passes (``ConversationPasses.blocks``), with the same bytes."""

from __future__ import annotations

from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.anthropic_wire import Conversation
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import FilePart, Message, TextPart, ToolCall
from nonoka.state.prefix_memo import ConversationPasses

PNG = "iVBORw0KGgo="
MEDIA = "Attached media from tool result:"


def model(passes: ConversationPasses | None = None) -> AnthropicChatModel:
    return AnthropicChatModel("claude-test", base_url="http://127.0.0.1:9",
                              api_key="sk-ant-test", passes=passes)


def exchange(n: int) -> list[Message]:
    """A turn whose last messages merge with the next turn's first ones (a user message
    after tool results, whose files move into the result before it)."""
    return [
        Message(role="user", content=f"question {n}"),
        Message(role="user", content=f"and more {n}"),
        Message(role="assistant", content=f"looking {n}", tool_calls=[
            ToolCall(id=f"toolu_{n}", name="read", arguments="{}")]),
        Message(role="tool", content="chart.png", tool_call_id=f"toolu_{n}"),
        Message(role="user", content=MEDIA, parts=[
            TextPart(text=MEDIA), FilePart(media_type="image/png", data=PNG)]),
        Message(role="assistant", content=f"answer {n}"),
    ]


def test_each_longer_conversation_encodes_as_from_scratch_and_resumes() -> None:
    passes = ConversationPasses()
    stored: list[MemoryEntry] = [MemoryEntry.from_message(
        Message(role="system", content="Be brief."))]
    for n in range(30):
        stored = [*stored, *(MemoryEntry.from_message(m) for m in exchange(n))]
        cut = stored[:-1] if n % 3 == 0 else stored  # some calls end on a tool result
        resumed = passes.blocks.resume(cut)
        assert model(passes).request_body(EntryMessages(cut)) \
            == model().request_body(EntryMessages(cut))
        if len(stored) > 80:
            assert resumed is not None  # the pass went on from the last call's end


def test_a_conversation_that_does_not_extend_the_kept_one_is_built_whole() -> None:
    passes = ConversationPasses()
    first = [MemoryEntry.from_message(m) for n in range(20) for m in exchange(n)]
    model(passes).request_body(EntryMessages(first))
    edited = [*first[:5], MemoryEntry.from_message(Message(role="user", content="edited")),
              *first[6:]]
    assert passes.blocks.resume(edited) is None
    assert model(passes).request_body(EntryMessages(edited)) \
        == model().request_body(EntryMessages(edited))


def test_a_resumed_conversation_encodes_only_the_messages_it_added() -> None:
    passes = ConversationPasses()
    stored = [MemoryEntry.from_message(m) for n in range(20) for m in exchange(n)]
    model(passes).request_body(EntryMessages(stored))
    resumed = passes.blocks.resume(stored)
    assert resumed is not None
    kept = resumed[1]
    assert len(kept._texts) == len(kept.messages) - 1  # all but the last, made once
    assert kept.encoded(None) == Conversation.copy(kept).encoded(None)
