"""What the server keeps between requests that resend a growing history
(``nonoka.serve.histories``): parsed bodies and the bridge's passes per conversation."""

from __future__ import annotations

from typing import Any

from nonoka.llm.workers import Workers
from nonoka.serve.chat import parse_chat
from nonoka.serve.histories import SHORT, KeptPasses, ParsedBodies
from nonoka.serve.messages import parse_messages
from nonoka.state.messages import Message
from nonoka.store.kept import KeptStores
from nonoka.store.reuse import StoreReuse


def counted(seen: list[int]) -> Any:
    def parse(raw: Any, n: int) -> Message:
        seen.append(n)
        return Message(**raw)

    return parse


def history(turns: int) -> list[dict[str, Any]]:
    return [m for n in range(turns) for m in (
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": f"answer {n}"})]


def test_a_body_that_extends_a_kept_one_parses_only_what_it_adds(tmp_path: Any) -> None:
    kept = ParsedBodies[Message]()
    seen: list[int] = []

    def parse(raw: Any, n: int) -> Message:
        seen.append(n)
        return Message(role=raw["role"], content=raw["content"])

    first = kept.parsed(history(20), parse)
    again = kept.parsed(history(21), parse)
    assert seen == [*range(40), 40, 41]
    assert all(a is b for a, b in zip(first, again[:40], strict=True))
    assert [m.content for m in again] == [m["content"] for m in history(21)]


def test_a_body_that_parts_from_the_kept_one_is_parsed_whole() -> None:
    kept = ParsedBodies[Message]()
    kept.parsed(history(20), lambda raw, n: Message(**raw))
    edited = history(21)
    edited[3] = {"role": "assistant", "content": "another answer"}
    seen: list[int] = []
    out = kept.parsed(edited, counted(seen))
    assert seen == list(range(42))
    assert out[3].content == "another answer"


def test_short_bodies_are_not_kept() -> None:
    kept = ParsedBodies[Message]()
    kept.parsed(history(SHORT // 2 - 1), lambda raw, n: Message(**raw))
    seen: list[int] = []
    kept.parsed(history(SHORT // 2), counted(seen))
    assert seen == list(range(SHORT))


def test_requests_parse_to_the_same_messages_with_or_without_kept_bodies(
        tmp_path: Any) -> None:
    chats = ParsedBodies[Message]()
    anthropic = ParsedBodies[list[Message]]()
    for turns in (10, 11, 12):
        chat_body = {"model": "m", "messages": history(turns)}
        assert parse_chat(chat_body, {}, tmp_path, "openai:m", chats)[0].messages \
            == parse_chat(chat_body, {}, tmp_path, "openai:m")[0].messages
        body = {"model": "m", "max_tokens": 10, "system": "Be brief.",
                "messages": history(turns)[:-1]}
        assert parse_messages(body, {}, tmp_path, "anthropic:m", anthropic).messages \
            == parse_messages(body, {}, tmp_path, "anthropic:m").messages


def test_each_conversations_passes_go_to_one_request_at_a_time() -> None:
    store, kept, workers = StoreReuse(), KeptStores(), Workers()
    passes = KeptPasses(store, kept, workers, conversations=2)
    first = passes.take("a")
    assert (first.store, first.kept, first.workers) == (store, kept, workers)
    assert passes.take("a") is not first  # the first request of "a" still runs
    passes.give("a", first)
    assert passes.take("a") is first
    passes.give("a", first)
    passes.give("b", passes.take("b"))
    passes.give("c", passes.take("c"))
    assert passes.take("a") is not first  # the least recent conversation was let go
    assert passes.take(None) is not passes.take(None)


def test_a_caller_changing_its_list_does_not_change_what_is_kept() -> None:
    kept = ParsedBodies[Message]()
    first = kept.parsed(history(20), lambda raw, n: Message(**raw))
    first.append(Message(role="user", content="added by the caller"))
    again = kept.parsed(history(21), lambda raw, n: Message(**raw))
    assert [m.content for m in again] == [m["content"] for m in history(21)]
