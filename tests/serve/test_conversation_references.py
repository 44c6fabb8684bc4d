"""``item_reference`` to a conversation's item added before its first response (an id
of the conversation's own), through the official client against a ``nonoka serve``
process: it resolves to the item's content in another request, in a
``previous_response_id`` chain, after the conversation's first response and after a
restart; another key's reference, a deleted item's and a deleted conversation's find
nothing, as an id that never existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.conftest import MODEL
from tests.serve.harness import ServeProcess
from tests.serve.test_campaign_owners import add_key, fake


def user(content: str) -> Any:
    return {"type": "message", "role": "user", "content": content}


def ref(ident: str) -> Any:
    return {"type": "item_reference", "id": ident}


def sent(server: ScriptedOpenAIServer) -> list[str]:
    return [m["content"] for m in server.requests[-1]["messages"]]


def refused(client: OpenAI, ident: str) -> str:
    """The message of the 400 a reference to ``ident`` gets."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", input=[ref(ident), user("?")])
    assert raised.value.param == "input[0]"
    return raised.value.message.replace(ident, "ID")


class Running:
    """A ``nonoka serve`` process, and a client for each key."""

    def __init__(self, project: Path, env: dict[str, str], keys: dict[str, str]) -> None:
        self.process = ServeProcess(project, MODEL, env)
        self.clients = {name: OpenAI(base_url=self.process.url, api_key=key, max_retries=0)
                        for name, key in keys.items()}

    def stop(self) -> None:
        for client in self.clients.values():
            client.close()
        assert "Traceback" not in self.process.stop()


def test_references_to_items_added_before_the_first_response(
        project: Path, upstream_env: dict[str, str], scripted: list[Any],
        server: ScriptedOpenAIServer) -> None:
    scripted += [text("Tangerine."), text("Noted."), text("Hello."), text("Still tangerine.")]
    keys = {"alice": add_key(project, "alice"), "bob": add_key(project, "bob")}
    running = Running(project, upstream_env, keys)
    try:
        said = talk(running, server)
    finally:
        running.stop()
    again = Running(project, upstream_env, keys)
    try:
        alice = again.clients["alice"]
        word, third = said["word"], said["third"]
        alice.responses.create(model="m", input=[ref(word), ref(third), user("Still?")])
        assert sent(server) == ["The code word is tangerine.", "A third item.", "Still?"]
        assert refused(again.clients["bob"], word) == refused(alice, fake(word))
        alice.conversations.items.delete(third, conversation_id=said["conversation"])
        assert refused(alice, third) == refused(alice, fake(third))
        alice.conversations.delete(said["conversation"])
        assert refused(alice, word) == refused(alice, fake(word))
    finally:
        again.stop()
    assert len(server.requests) == 4


def talk(running: Running, server: ScriptedOpenAIServer) -> dict[str, str]:
    """A conversation with three items, referenced before and after its first response;
    the ids to reference after the restart."""
    alice, bob = running.clients["alice"], running.clients["bob"]
    conversation = alice.conversations.create(items=[
        user("The code word is tangerine.")])
    alice.conversations.items.create(conversation.id, items=[
        user("Keep it secret."), user("A third item.")])
    word, secret, third = (str(item.id) for item in alice.conversations.items.list(
        conversation.id, order="asc").data)
    # in a response of its own, outside the conversation
    first = alice.responses.create(model="m", input=[ref(word), user("The code word?")])
    assert first.output_text == "Tangerine."
    assert sent(server) == ["The code word is tangerine.", "The code word?"]
    # in a previous_response_id chain
    alice.responses.create(model="m", previous_response_id=first.id,
                           input=[ref(secret), user("Understood?")])
    assert sent(server) == ["The code word is tangerine.", "The code word?", "Tangerine.",
                            "Keep it secret.", "Understood?"]
    # the conversation's first response leaves its earlier items' ids as they were
    alice.responses.create(model="m", input="Hi.", conversation=conversation.id)
    listed = alice.conversations.items.list(conversation.id, order="asc").data
    assert [item.id for item in listed[:3]] == [word, secret, third]
    # another owner's reference finds nothing, exactly as an id that never existed
    assert refused(bob, word) == refused(alice, fake(word))
    return {"conversation": conversation.id, "word": word, "third": third}
