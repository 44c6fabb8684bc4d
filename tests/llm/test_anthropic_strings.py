"""A message a Messages API client sent with string content (``STRING_CONTENT`` in its
provider metadata, or its place in ``STRING_ANSWERS``) is encoded as that string, but
where a breakpoint lands on it, where it merges with a neighbour or holds more than its
text; the resumed pass (``ConversationPasses.blocks``) gives the same bytes as a pass
from scratch; an entry without the field (an older session's) is blocks, as before."""

from __future__ import annotations

import json
from typing import Any

from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.anthropic_wire import STRING_ANSWERS, STRING_CONTENT
from nonoka.llm.base import CallOptions
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message, ReasoningPart
from nonoka.state.prefix_memo import ConversationPasses

AS_STRING: dict[str, Any] = {"anthropic": dict(STRING_CONTENT)}


def model(passes: ConversationPasses | None = None,
          prompt_cache: str = "off") -> AnthropicChatModel:
    return AnthropicChatModel("claude-test", base_url="http://127.0.0.1:9",
                              api_key="sk-ant-test", passes=passes, prompt_cache=prompt_cache)


def sent(body: bytes) -> dict[str, Any]:
    return dict(json.loads(body))


def exchange(n: int) -> list[Message]:
    """A user string, an answer nonoka stored (no form of its own), a user text block."""
    return [Message(role="user", content=f"question {n}", provider_metadata=AS_STRING),
            Message(role="assistant", content=f"answer {n}"),
            Message(role="user", content=f"block {n}"),
            Message(role="assistant", content=f"again {n}")]


def answers(turns: int) -> CallOptions:
    """The client sent every first answer back as a string, every second as blocks."""
    return CallOptions(extra={STRING_ANSWERS: "sb" * turns})


def test_strings_and_blocks_as_sent_without_breakpoints() -> None:
    messages = [Message(role="system", content="Be brief.", provider_metadata=AS_STRING),
                *exchange(0), *exchange(1)]
    body = sent(model().request_body(messages, options=answers(2)))
    assert body["system"] == "Be brief."
    assert [m["content"] for m in body["messages"]] == [
        "question 0", "answer 0", [{"type": "text", "text": "block 0"}],
        [{"type": "text", "text": "again 0"}],
        "question 1", "answer 1", [{"type": "text", "text": "block 1"}],
        [{"type": "text", "text": "again 1"}]]
    # STRING_ANSWERS is nonoka's: never sent
    assert STRING_ANSWERS not in body


def test_a_breakpoint_makes_a_string_one_marked_block() -> None:
    messages = [Message(role="system", content="Be brief.", provider_metadata=AS_STRING),
                *exchange(0)[:2], exchange(0)[0].model_copy(update={"content": "next"})]
    body = sent(model(prompt_cache="5m").request_body(messages))
    mark = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": mark}]
    assert [m["content"] for m in body["messages"]] == [
        [{"type": "text", "text": "question 0", "cache_control": mark}],  # before the answer
        [{"type": "text", "text": "answer 0"}],  # no form of its own, no STRING_ANSWERS
        [{"type": "text", "text": "next", "cache_control": mark}]]  # the last


def test_merged_or_fuller_messages_are_blocks() -> None:
    thought = ReasoningPart(text="hm", provider_metadata={"anthropic": {"signature": "s"}})
    messages = [Message(role="user", content="one", provider_metadata=AS_STRING),
                Message(role="user", content="two", provider_metadata=AS_STRING),
                Message(role="assistant", content="said", reasoning=[thought],
                        provider_metadata=AS_STRING),
                Message(role="user", content="three", provider_metadata=AS_STRING),
                Message(role="assistant", content="prefill  ", provider_metadata=AS_STRING)]
    body = sent(model().request_body(messages))
    assert [m["content"] for m in body["messages"]] == [
        [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        [{"type": "thinking", "thinking": "hm", "signature": "s"},
         {"type": "text", "text": "said"}],
        "three",
        "prefill"]  # a prefill's trailing whitespace trimmed, still a string


def test_an_older_sessions_entries_are_blocks() -> None:
    stored = [MemoryEntry.make("system", "Be brief."), MemoryEntry.make("user", "hi"),
              MemoryEntry.assistant("hello")]
    body = sent(model().request_body(EntryMessages(stored)))
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert [m["content"] for m in body["messages"]] == [
        [{"type": "text", "text": "hi"}], [{"type": "text", "text": "hello"}]]


def test_the_resumed_pass_gives_the_bytes_of_a_pass_from_scratch() -> None:
    passes = ConversationPasses()
    stored: list[MemoryEntry] = [MemoryEntry.from_message(
        Message(role="system", content="Be brief.", provider_metadata=AS_STRING))]
    for n in range(30):
        stored = [*stored, *(MemoryEntry.from_message(m) for m in exchange(n))]
        cut = stored[:-1] if n % 2 else stored  # some calls end on the user's message
        options = CallOptions(extra={STRING_ANSWERS: "sb" * n + ("s" if n % 2 else "sb")})
        for cache in ("off", "5m"):
            resumed = passes.blocks.resume(cut)
            body = model(passes, cache).request_body(EntryMessages(cut), options=options)
            assert body == model(prompt_cache=cache).request_body(
                EntryMessages(cut), options=options)
            if len(stored) > 80:
                assert resumed is not None  # the pass went on from the last call's end
        texts = [m["content"] for m in sent(body)["messages"]]
        assert texts[0] == "question 0" and texts[1] == "answer 0"
        assert isinstance(texts[2], list) and isinstance(texts[3], list)
