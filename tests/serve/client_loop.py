"""The 3-step tool loop every real client runs against ``nonoka serve``: the upstream
model asks for ``read_note`` three times (``alpha``, ``beta``, ``gamma``), thinking
before each call and saying what it does, then answers with the three results it was
sent. The upstream is the scripted Chat Completions endpoint in its ``reasoning_back``
strict mode, so a loop whose reasoning does not go back with its tool calls is refused
as a thinking model's endpoint refuses it. What the client got, what nonoka stored and
what the upstream received are each checked here."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.state.messages import ToolCall
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing.server import Reply, ScriptedOpenAIServer, Step

NOTES = ("alpha", "beta", "gamma")
QUESTION = "Read the notes alpha, beta and gamma, then tell me what they say."
READ_NOTE = {"type": "object", "properties": {"name": {"type": "string"}},
             "required": ["name"], "additionalProperties": False}
"""``read_note``'s parameters."""


def note(name: str) -> str:
    """What the client's ``read_note`` answers."""
    return f"note {name}: {name.upper()}-CONTENT"


FINAL = "FINAL " + " | ".join(note(name) for name in NOTES)
"""The model's answer once the three results came back."""


def saying(name: str) -> str:
    """What the model says with its call to read note ``name``."""
    return f"Reading {name}."


def call_id(step: int) -> str:
    return f"call_loop_{step}"


def loop_step(body: dict[str, Any]) -> Step:
    """The model's answer to ``body``: the next ``read_note`` call of the turn (after the
    last user message), or ``FINAL`` built from the turn's tool results (so they must
    have arrived). Call ids count every call of the conversation."""
    if not body.get("tools"):
        return Reply(text="untitled")
    messages = body["messages"]
    asked = max(n for n, m in enumerate(messages) if m.get("role") == "user")
    results = [str(m.get("content")) for m in messages[asked:] if m.get("role") == "tool"]
    done = len(results)
    if done >= len(NOTES):
        return Reply(text="FINAL " + " | ".join(results))
    earlier = sum(1 for m in messages[:asked] if m.get("role") == "tool")
    arguments = json.dumps({"name": NOTES[done]})
    return Reply(text=saying(NOTES[done]), reasoning=f"thinking about note {earlier + done}",
                 tool_calls=(ToolCall(id=call_id(earlier + done), name="read_note",
                                      arguments=arguments),))


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    """The strict upstream answering the loop, four model calls at most."""
    with ScriptedOpenAIServer(loop_step, strict=("reasoning_back",)) as running:
        yield running
    assert not running.failures, running.failures


def expected_messages(upto: int = len(NOTES), turn: int = 0,
                      system: str | None = None) -> list[dict[str, Any]]:
    """What the upstream must be sent at step ``upto`` of the loop's ``turn`` (0, 1...):
    each earlier turn (its question, calls with their reasoning, results and answer),
    then this turn's question and its steps so far; each question after ``system``."""
    messages: list[dict[str, Any]] = []
    for each in range(turn + 1):
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": QUESTION})
        for step in range(upto if each == turn else len(NOTES)):
            n = each * len(NOTES) + step
            messages += [
                {"role": "assistant", "content": saying(NOTES[step]),
                 "reasoning_content": f"thinking about note {n}",
                 "tool_calls": [{"id": call_id(n), "type": "function", "function": {
                     "name": "read_note", "arguments": json.dumps({"name": NOTES[step]})}}]},
                {"role": "tool", "tool_call_id": call_id(n), "content": note(NOTES[step])}]
        if each < turn:
            messages.append({"role": "assistant", "content": FINAL})
    return messages


def assert_upstream_loop(server: ScriptedOpenAIServer, turns: int = 1,
                         system: str | None = None) -> None:
    """The upstream got exactly four chat requests a turn, each the conversation so far,
    none refused."""
    chat = [r for r in server.requests if r.get("tools")]
    assert server.rejections == [], [server.requests[i] for i in server.rejections]
    assert len(chat) == (len(NOTES) + 1) * turns, [r["messages"][-1] for r in chat]
    for n, request in enumerate(chat):
        turn, step = divmod(n, len(NOTES) + 1)
        assert request["messages"] == expected_messages(step, turn, system), (turn, step)
        assert [t["function"]["name"] for t in request["tools"]] == ["read_note"]


def records(project: Path) -> list[SessionRecord]:
    """The project's sessions, as the index lists them."""
    async def read() -> list[SessionRecord]:
        async with open_project_stores(project) as stores:
            return await stores.index.list_sessions(limit=100)
    return asyncio.run(read())


def stored_lines(project: Path) -> list[list[tuple[str, str]]]:
    """Each stored chat session's entries, as (role, what it holds): the text, the
    called tool and its arguments, or the result and the call it answers."""
    async def read() -> list[list[tuple[str, str]]]:
        async with open_project_stores(project) as stores:
            rows = await stores.index.list_sessions(limit=100)
            lines = []
            for row in rows:
                if row.purpose != "chat":
                    continue
                state = await stores.checkpoints.load_session(row.session_id)
                lines.append([_entry(e.role, e.content, e.metadata)
                              for e in (state.memory_entries if state else [])])
            return lines
    return asyncio.run(read())


def _entry(role: str, content: str, metadata: dict[str, Any]) -> tuple[str, str]:
    calls = metadata.get("tool_calls") or []
    if calls:
        called = ";".join(f"{c['id']} {c['name']} {c['arguments']}" for c in calls)
        return role, f"{content} {called}" if content else called
    if metadata.get("tool_call_id"):
        return role, f"{metadata['tool_call_id']} -> {content}"
    return role, content


def expected_line(turns: int = 1, system: str | None = None) -> list[tuple[str, str]]:
    """The one session line finished loops leave: each turn's question (after
    ``system``), each call and its result, the answer."""
    line: list[tuple[str, str]] = []
    for turn in range(turns):
        if system is not None:
            line.append(("system", system))
        line.append(("user", QUESTION))
        for step, name in enumerate(NOTES):
            n = turn * len(NOTES) + step
            line += [("assistant", f"{saying(name)} {call_id(n)} read_note "
                                   f"{json.dumps({'name': name})}"),
                     ("tool", f"{call_id(n)} -> {note(name)}")]
        line.append(("assistant", FINAL))
    return line


def assert_one_line(project: Path, turns: int = 1, system: str | None = None) -> None:
    assert stored_lines(project) == [expected_line(turns, system)]
