"""openai-python runs the 3-step tool loop (``tests/serve/client_loop.py``) through a
real ``nonoka serve``, in each of its three ways to keep a conversation: Responses
chained by ``previous_response_id``, Responses inside a Conversation, and Chat
Completions resending the whole history. Each ends with the client holding the answer
built from its own tool results, one session line holding every step, and the upstream
having been sent each step's conversation exactly, reasoning included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from openai import OpenAI
from openai.types.responses import Response

from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.client_loop import (
    FINAL,
    NOTES,
    QUESTION,
    READ_NOTE,
    assert_one_line,
    assert_upstream_loop,
    note,
    records,
    server,
)

__all__ = ("server",)  # the strict upstream replaces the shared one

TOOLS: list[Any] = [{"type": "function", "name": "read_note", "description": "Read a note.",
                     "parameters": READ_NOTE, "strict": True}]


def outputs_for(response: Response) -> list[Any]:
    """The client running each ``read_note`` call the response asks for."""
    return [{"type": "function_call_output", "call_id": item.call_id,
             "output": note(json.loads(item.arguments)["name"])}
            for item in response.output if item.type == "function_call"]


def summaries(response: Response) -> list[str]:
    return [part.text for item in response.output if item.type == "reasoning"
            for part in item.summary]


def respond(client: OpenAI, stream: bool, **asked: Any) -> Response:
    """A response, whole or streamed (then the response its last event carries, checked
    against the output items the stream announced)."""
    if not stream:
        return cast(Response, client.responses.create(model="m", tools=TOOLS, **asked))
    with client.responses.stream(model="m", tools=TOOLS, **asked) as events:
        done = [e.item.model_dump()["id"] for e in events
                if e.type == "response.output_item.done"]
        final = events.get_final_response()
    assert done == [item.model_dump()["id"] for item in final.output]
    return final


@pytest.mark.parametrize("stream", [False, True])
def test_responses_chained_by_previous_response_id(client: OpenAI, project: Path,
                                                   server: ScriptedOpenAIServer,
                                                   stream: bool) -> None:
    response = respond(client, stream, input=QUESTION)
    ids = [response.id]
    for step in range(len(NOTES)):
        assert summaries(response) == [f"thinking about note {step}"]
        outputs = outputs_for(response)
        assert len(outputs) == 1, response.output
        response = respond(client, stream, input=outputs, previous_response_id=response.id)
        assert response.previous_response_id == ids[-1]
        ids.append(response.id)
    assert response.status == "completed" and response.output_text == FINAL
    assert outputs_for(response) == []
    assert len(set(ids)) == 4
    assert_upstream_loop(server)
    assert_one_line(project)
    listed = client.responses.input_items.list(response.id, order="asc")
    assert [item.type for item in listed.data] == ["function_call_output"]


def test_responses_inside_a_conversation(client: OpenAI, project: Path,
                                         server: ScriptedOpenAIServer) -> None:
    conversation = client.conversations.create(metadata={"topic": "notes"})
    response = client.responses.create(model="m", input=QUESTION, tools=TOOLS,
                                       conversation=conversation.id)
    for _ in NOTES:
        outputs = outputs_for(response)
        assert len(outputs) == 1, response.output
        response = client.responses.create(model="m", input=outputs, tools=TOOLS,
                                           conversation=conversation.id)
    assert response.status == "completed" and response.output_text == FINAL
    assert_upstream_loop(server)
    assert_one_line(project)
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == [
        "message",
        *["reasoning", "message", "function_call", "function_call_output"] * len(NOTES),
        "message"]
    assert items[-1].id == response.output[-1].id


def test_chat_completions_resending_the_history(client: OpenAI, project: Path,
                                                server: ScriptedOpenAIServer) -> None:
    tools: list[Any] = [{"type": "function", "function": {
        "name": "read_note", "description": "Read a note.", "parameters": READ_NOTE}}]
    history: list[Any] = [{"role": "user", "content": QUESTION}]
    for _ in NOTES:
        answer = client.chat.completions.create(model="m", messages=history, tools=tools)
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        [called] = choice.message.tool_calls or []
        assert called.type == "function"
        assert (choice.message.model_extra or {})["reasoning_content"] == \
            f"thinking about note {len(history) // 2}"
        history += [choice.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": called.id,
                     "content": note(json.loads(called.function.arguments)["name"])}]
    answer = client.chat.completions.create(model="m", messages=history, tools=tools)
    assert answer.choices[0].message.content == FINAL
    assert answer.choices[0].finish_reason == "stop"
    assert_upstream_loop(server)
    assert_one_line(project)


def run_to_the_end(client: OpenAI, response: Response) -> Response:
    """The client answering every call until the model answers."""
    while outputs := outputs_for(response):
        response = client.responses.create(model="m", input=outputs, tools=TOOLS,
                                           previous_response_id=response.id)
    return response


def test_a_turn_resent_with_the_conversations_first_id(client: OpenAI, project: Path,
                                                       server: ScriptedOpenAIServer) -> None:
    """A client that continues a conversation by the id of its last answer and sends the
    current turn's steps again with each request (as the AI SDK does) goes on with the
    line: the steps it resends are the stored ones, reasoning included. Where the resent
    steps part from the line, the line branches there."""
    answered = run_to_the_end(client, client.responses.create(model="m", input=QUESTION,
                                                               tools=TOOLS))
    asked = client.responses.create(model="m", input=QUESTION, tools=TOOLS,
                                    previous_response_id=answered.id)
    [called] = [item for item in asked.output if item.type == "function_call"]
    [said] = [item for item in asked.output if item.type == "message"]
    resent: list[Any] = [
        {"type": "message", "role": "user", "content": QUESTION},
        {"type": "item_reference", "id": said.id},
        {"type": "function_call", "call_id": called.call_id, "name": called.name,
         "arguments": json.dumps(json.loads(called.arguments), separators=(",", ":"))}]
    step = client.responses.create(model="m", tools=TOOLS, previous_response_id=answered.id,
                                   input=[*resent, *outputs_for(asked)])
    assert outputs_for(step)  # the next call, on the same line
    assert len(records(project)) == 1
    changed: Any = {"type": "function_call_output", "call_id": called.call_id,
               "output": "note alpha: CHANGED"}
    client.responses.create(model="m", tools=TOOLS, previous_response_id=answered.id,
                            input=[*resent, changed])
    rows = records(project)
    assert len(rows) == 2
    [branch] = [row for row in rows if row.metadata.get("forked_from")]
    assert branch.metadata["fork_point"] == 2 * len(NOTES) + 2 + 2  # after the resent call
    sent = [r for r in server.requests if r.get("tools")]
    assert server.rejections == []
    assert sent[-1]["messages"][-3:-1] == sent[-2]["messages"][-3:-1]  # the stored call
    assert sent[-1]["messages"][-2]["reasoning_content"] == "thinking about note 3"
    assert sent[-1]["messages"][-1] == {"role": "tool", "tool_call_id": called.call_id,
                                        "content": "note alpha: CHANGED"}
