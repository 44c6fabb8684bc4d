"""Where a handed-off agent's first request lands: on its own hand-off's branch, by the
session id it sends, however many branches hold the same history. ``nonoka serve`` in
this process, a scripted Anthropic endpoint behind it, and Claude Code's requests as it
sends them after ``--resume`` (the transcript's messages, then the new prompt)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.handoff import claude
from nonoka.handoff.move import HandOff, hand_off
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import ToolCall
from nonoka.store.project import open_project_stores
from nonoka.testing.anthropic_replies import AnthropicReply, Thinking
from nonoka.testing.server import ScriptedAnthropicServer
from tests.serve.harness import Served, served_with
from tests.serve.test_keys import make_key
from tests.support.stores import load_stored

MODEL = "claude-opus-5-5"
TOOLS = [{"name": "Read", "description": "Read a file.", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"}},
    "required": ["file_path"]}}]
"""The client's own tool: it runs it, nonoka hands its calls back."""


def answer(body: dict[str, Any]) -> AnthropicReply:
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and last[-1].get("type") == "tool_result":
        return AnthropicReply(text="The notes say papaya.")
    said = last if isinstance(last, str) else last[-1].get("text", "")
    if "notes" in said:
        return AnthropicReply(thinking=(Thinking("Read the notes first."),), tool_calls=(
            ToolCall(id="toolu_read_1", name="Read", arguments='{"file_path": "notes.txt"}'),))
    return AnthropicReply(text=f"ANSWER to {said}")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedAnthropicServer(answer) as upstream, served_with(
            project, f"anthropic:{MODEL}", {"ANTHROPIC_BASE_URL": upstream.base_url,
                                            "ANTHROPIC_API_KEY": "sk-ant-up",
                                            "NONOKA_DATABASE_URL": ""},
            monkeypatch) as running:
        yield running


def post(served: Served, session: str, messages: list[dict[str, Any]],
         key: str = "client-key") -> dict[str, Any]:
    status, _, body = served.request("POST", "/v1/messages", {
        "model": MODEL, "max_tokens": 1024, "messages": messages, "tools": TOOLS},
        {"x-claude-code-session-id": session, "x-api-key": key,
         "anthropic-version": "2023-06-01"})
    assert status == 200, body
    answered: dict[str, Any] = json.loads(body)
    return answered


def handed(project: Path, source: str, target: str, home: Path, count: int
           ) -> list[HandOff]:
    async def go() -> list[HandOff]:
        async with open_project_stores(project) as stores:
            return [await hand_off(stores, source, target, home=home, cwd=project)
                    for _ in range(count)]
    return asyncio.run(go())


def entries_of(project: Path, session_id: str) -> list[MemoryEntry]:
    state = load_stored(project / ".nonoka" / "sessions.db", session_id)
    assert state is not None, session_id
    return list(state.memory_entries)


def rows(project: Path) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with open_project_stores(project) as stores:
            return {r.session_id: r for r in await stores.index.list_sessions(
                limit=100, purpose=None)}
    return asyncio.run(go())


def test_each_agent_lands_on_its_own_branch(served: Served, tmp_path: Path) -> None:
    project = tmp_path / "project"
    # A Claude Code conversation through nonoka: a tool loop with signed thinking.
    asked = [{"role": "user", "content": "What do the notes say?"}]
    first = post(served, "first-agent", asked)
    history = [*asked, {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": [{"type": "tool_result",
                                             "tool_use_id": "toolu_read_1",
                                             "content": "papaya"}]}]
    post(served, "first-agent", history)
    [source] = [r.session_id for r in rows(project).values()
                if r.host_session_id == "claude-code:first-agent"]
    entries = entries_of(project, source)

    # The same session handed to two Claude Code sessions: two branches, one history.
    one, two = handed(project, source, "claude", tmp_path / "claude-home", 2)
    assert one.branch != two.branch and one.at == two.at == len(entries)
    resent = claude.messages(entries)
    thinking = [b for m in resent for b in m["content"] if b["type"] == "thinking"]
    assert thinking and all(b["signature"] for b in thinking)  # Anthropic's own, kept

    # The first one's agent speaks first: it lands on its own branch, not the newest one.
    post(served, one.agent_session, [*resent, {"role": "user", "content": "Go on, one."}])
    post(served, two.agent_session, [*resent, {"role": "user", "content": "Go on, two."}])
    for made, prompt in ((one, "Go on, one."), (two, "Go on, two.")):
        now = [(e.role, e.content) for e in entries_of(project, made.branch)]
        assert now[-2:] == [("user", prompt), ("assistant", f"ANSWER to {prompt}")]
    source_now = entries_of(project, source)
    assert len(source_now) == len(entries)  # the source goes on as it was
    lines = [r for r in rows(project).values() if r.host_session_id and
             r.host_session_id.startswith("claude-code:")]
    assert len(lines) == 3  # the source's and the two hand-offs': no other branch


def test_a_key_owners_session_is_handed_to_that_owner(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    keys = {"alice": make_key(project, "alice"), "bob": make_key(project, "bob")}
    monkeypatch.delenv("NONOKA_MODEL", raising=False)
    with ScriptedAnthropicServer(answer) as upstream:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-up")
        monkeypatch.setenv("NONOKA_DATABASE_URL", "")
        served = Served(project, f"anthropic:{MODEL}", keys=True)
        try:
            post(served, "alice-agent", [{"role": "user", "content": "Hello there."}],
                 keys["alice"])
            [source] = [r.session_id for r in rows(project).values()
                        if r.host_session_id and r.host_session_id.endswith(
                            "claude-code:alice-agent")]
            [made] = handed(project, source, "claude", tmp_path / "claude-home", 1)
            resent = [*claude.messages(entries_of(project, source)),
                      {"role": "user", "content": "Go on, alice."}]
            # another owner sending the same id never reaches alice's branch
            post(served, made.agent_session, resent, keys["bob"])
            post(served, made.agent_session, resent, keys["alice"])
        finally:
            served.stop()
    now = [(e.role, e.content) for e in entries_of(project, made.branch)]
    assert now[-2:] == [("user", "Go on, alice."), ("assistant", "ANSWER to Go on, alice.")]
    assert now.count(("user", "Go on, alice.")) == 1
    bobs = [r for r in rows(project).values() if r.session_id not in (source, made.branch)]
    assert len(bobs) == 1 and bobs[0].metadata.get("forked_from") is None
