"""The Conversations API through the official client: create, get, update, delete;
items added (at most 20 a call), listed in the order they were stored, got, deleted;
responses in a conversation see its items (less the deleted ones) and add theirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.conftest import MODEL
from tests.serve.harness import Served
from tests.serve.test_keys import make_key


def user(content: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": content}


def sent(server: ScriptedOpenAIServer) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in server.requests[-1]["messages"]]


def ident(item: Any) -> str:
    assert isinstance(item.id, str)
    return item.id


def texts(items: Any) -> list[str]:
    return [item.content[0].text for item in items]


def test_a_conversations_life(client: OpenAI) -> None:
    made = client.conversations.create(items=[user("one"), user("two")],  # type: ignore[list-item]
                                       metadata={"topic": "demo"})
    assert made.id.startswith("conv_") and made.metadata == {"topic": "demo"}
    assert client.conversations.retrieve(made.id).metadata == {"topic": "demo"}
    assert client.conversations.update(made.id, metadata={"topic": "new"}).metadata == \
        {"topic": "new"}
    for n in range(3, 33):  # many adds within one second: the order is the sequence's
        client.conversations.items.create(made.id, items=[user(str(n))])  # type: ignore[list-item]
    listed = client.conversations.items.list(made.id, order="asc", limit=100)
    assert texts(listed.data) == [str(n) for n in ["one", "two", *range(3, 33)]]
    newest = client.conversations.items.list(made.id, limit=2)
    assert texts(newest.data) == ["32", "31"] and newest.has_more
    following = client.conversations.items.list(made.id, limit=2, after=ident(newest.data[-1]))
    assert texts(following.data) == ["30", "29"]
    second = listed.data[1]
    got = client.conversations.items.retrieve(ident(second), conversation_id=made.id)
    assert got.id == second.id
    client.conversations.items.delete(ident(second), conversation_id=made.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(ident(second), conversation_id=made.id)
    assert "two" not in texts(client.conversations.items.list(made.id, limit=100).data)
    assert client.conversations.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(made.id)


def test_responses_in_a_conversation(client: OpenAI, scripted: list[Any],
                                     server: ScriptedOpenAIServer) -> None:
    scripted += [text("Hello Ann."), text("Ann."), text("I do not know.")]
    conversation = client.conversations.create(items=[user("My name is Ann.")])  # type: ignore[list-item]
    first = client.responses.create(model="m", input="Greet me.",
                                    conversation=conversation.id)
    assert first.output_text == "Hello Ann."
    second = client.responses.create(model="m", input="What is my name?",
                                     conversation={"id": conversation.id})
    assert sent(server) == [("user", "My name is Ann."), ("user", "Greet me."),
                            ("assistant", "Hello Ann."), ("user", "What is my name?")]
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert texts(items) == ["My name is Ann.", "Greet me.", "Hello Ann.",
                            "What is my name?", "Ann."]
    # the items have the ids their responses give them
    assert items[2].id == first.output[0].id and items[-1].id == second.output[0].id
    assert items[3].id == client.responses.input_items.list(second.id).data[0].id
    # an item deleted is not sent again
    client.conversations.items.delete(ident(items[0]), conversation_id=conversation.id)
    client.responses.create(model="m", input="Who am I?", conversation=conversation.id)
    assert ("user", "My name is Ann.") not in sent(server)
    # the responses outlive their conversation
    client.conversations.delete(conversation.id)
    assert client.responses.retrieve(second.id).output_text == "Ann."


def test_what_conversations_refuse(client: OpenAI, scripted: list[Any]) -> None:
    scripted.append(text("first"))
    conversation = client.conversations.create()
    made = client.responses.create(model="m", input="hi", conversation=conversation.id)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", input="hi", conversation=conversation.id,
                                previous_response_id=made.id)
    assert raised.value.code == "mutually_exclusive_parameters"
    with pytest.raises(openai.BadRequestError) as raised:
        client.conversations.items.create(conversation.id,
                                          items=[user(str(n)) for n in range(21)])  # type: ignore[misc]
    assert raised.value.param == "items"
    with pytest.raises(openai.BadRequestError) as raised:
        client.conversations.create(metadata={f"k{n}": "v" for n in range(17)})
    assert raised.value.param == "metadata"
    for unknown in ("conv_nope", "conv_" + "0" * 40, conversation.id[:-1] + "x"):
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(unknown)


def test_another_owners_conversation_does_not_exist(project: Path,
                                                    upstream_env: dict[str, str]) -> None:
    alice, bob = make_key(project, "alice"), make_key(project, "bob")
    served = Served(project, MODEL, keys=True)
    try:
        with OpenAI(base_url=served.url, api_key=alice, max_retries=0) as as_alice, \
                OpenAI(base_url=served.url, api_key=bob, max_retries=0) as as_bob:
            made = as_alice.conversations.create(items=[user("secret")])  # type: ignore[list-item]
            [item] = as_alice.conversations.items.list(made.id).data
            for attempt in (lambda: as_bob.conversations.retrieve(made.id),
                            lambda: as_bob.conversations.items.list(made.id),
                            lambda: as_bob.conversations.items.retrieve(
                                ident(item), conversation_id=made.id),
                            lambda: as_bob.conversations.delete(made.id),
                            lambda: as_bob.responses.create(model="m", input="x",
                                                            conversation=made.id)):
                with pytest.raises(openai.NotFoundError):
                    attempt()
            assert as_alice.conversations.retrieve(made.id).id == made.id
    finally:
        served.stop()
