"""A Messages API client's content as it wrote it: a ``nonoka serve`` process in front of
an ``anthropic:`` model passes a message (and a system prompt) sent as a plain string on
as a string, turn after turn, and one sent as blocks as blocks — as the same client
talking to the endpoint directly would. Only a message that carries one of nonoka's own
cache breakpoints is a list (a breakpoint needs a block), and the endpoint's prompt
cache still reads the whole conversation before it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic

from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.anthropic_wire import STRING_ANSWERS
from nonoka.llm.base import CallOptions
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing.anthropic_replies import AnthropicReply
from nonoka.testing.server import ScriptedAnthropicServer
from tests.serve.harness import ServeProcess

UPSTREAM_KEY = "sk-ant-upstream-key-that-never-leaves-0123"
SYSTEM = "Answer in one short sentence."


@pytest.fixture
def upstream() -> Iterator[ScriptedAnthropicServer]:
    def answer(body: dict[str, Any]) -> AnthropicReply:
        return AnthropicReply(text=f"Answer {len(body['messages'])}.")

    with ScriptedAnthropicServer(answer, strict=("anthropic_thinking",),
                                 min_cache_tokens=1) as running:
        yield running


def serve(project: Path, upstream: ScriptedAnthropicServer) -> ServeProcess:
    return ServeProcess(project, "anthropic:claude-scripted", {
        "ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": UPSTREAM_KEY,
        "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})


def converse(client: Anthropic, turns: int
             ) -> tuple[list[list[dict[str, Any]]], list[int]]:
    """``turns`` requests of one conversation, each one exchange longer: the user's
    prompts as strings but every third one as a text block, the answers sent back as
    strings on even turns and as the answer's own blocks on odd ones (the two ways the
    SDK's users keep a history). The messages of each request, as sent, and the
    tokens each answer read from the prompt cache."""
    history: list[Any] = []
    sent: list[list[dict[str, Any]]] = []
    reads: list[int] = []
    for n in range(turns):
        prompt = f"Question {n}?"
        history.append({"role": "user", "content": prompt if n % 3 else [
            {"type": "text", "text": prompt}]})
        sent.append(json.loads(json.dumps(history)))
        answer = client.messages.create(model="claude-scripted", max_tokens=64,
                                        system=SYSTEM, messages=history)
        reads.append(answer.usage.cache_read_input_tokens or 0)
        text = answer.content[0].text  # type: ignore[union-attr]
        history.append({"role": "assistant", "content": text if n % 2 == 0 else [
            {"type": "text", "text": text}]})
    return sent, reads


def uncached(project: Path) -> Path:
    (project / ".nonoka").mkdir(parents=True)
    (project / ".nonoka" / "config.toml").write_text('[anthropic]\nprompt_cache = "off"\n')
    return project


def nonoka(project: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "nonoka", *args], cwd=project,
                          env={**os.environ, "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def conversed(project: Path, upstream: ScriptedAnthropicServer, turns: int = 6
              ) -> tuple[list[list[dict[str, Any]]], list[int]]:
    """``converse`` through the official client with a ``nonoka serve`` of ``project``."""
    process = serve(project, upstream)
    try:
        with Anthropic(base_url=process.url.removesuffix("/v1"), api_key="client-key",
                       max_retries=0) as client:
            return converse(client, turns)
    finally:
        process.stop_clean()


def test_strings_stay_strings_and_blocks_stay_blocks(
        project: Path, upstream: ScriptedAnthropicServer) -> None:
    sent, _ = conversed(uncached(project), upstream)
    assert not upstream.rejections and not upstream.failures
    assert len(upstream.requests) == len(sent)
    for given, got in zip(sent, upstream.requests, strict=True):
        assert got["system"] == SYSTEM  # no breakpoint: as the client sent it
        assert got["messages"] == given  # every message in the form it was sent

    # The form is stored with the session: exported and imported elsewhere, the session
    # encodes as the client's next request starts (the answers' form is the client's).
    backup = project.parent / "backup.jsonl"
    nonoka(project, "sessions", "export", "--all", "-o", str(backup))
    restored = uncached(project.parent / "restored")
    nonoka(restored, "sessions", "import", str(backup))
    [session] = sessions_of(project)
    expected = [*sent[-1], {"role": "assistant", "content": [
        {"type": "text", "text": f"Answer {len(sent[-1])}."}]}]
    answers = "".join("s" if isinstance(m["content"], str) else "b" for m in expected
                      if m["role"] == "assistant")
    model = AnthropicChatModel("claude-scripted", base_url=upstream.base_url,
                               api_key="sk-ant-test", prompt_cache="off")
    body = json.loads(model.request_body(EntryMessages(entries_of(restored, session.session_id)),
                                         options=CallOptions(extra={STRING_ANSWERS: answers})))
    assert body["system"] == SYSTEM
    assert body["messages"] == expected


def entries_of(project: Path, session_id: str) -> list[MemoryEntry]:
    async def read() -> list[MemoryEntry]:
        async with open_project_stores(project) as stores:
            state = await stores.checkpoints.load_session(session_id)
            assert state is not None
            return list(state.memory_entries)
    return asyncio.run(read())


def sessions_of(project: Path) -> list[SessionRecord]:
    async def read() -> list[SessionRecord]:
        async with open_project_stores(project) as stores:
            return await stores.index.list_sessions(limit=10)
    return asyncio.run(read())


def test_only_nonokas_breakpoints_turn_a_string_into_a_block(
        project: Path, upstream: ScriptedAnthropicServer) -> None:
    sent, reads = conversed(project, upstream)
    assert not upstream.rejections and not upstream.failures
    for turn, (given, got) in enumerate(zip(sent, upstream.requests, strict=True)):
        # The system prompt carries a breakpoint: one text block, with the mark.
        assert [{k: v for k, v in b.items() if k != "cache_control"}
                for b in got["system"]] == [{"type": "text", "text": SYSTEM}]
        marked = {len(given) - 1} | ({len(given) - 3} if len(given) > 2 else set())
        for i, (mine, theirs) in enumerate(zip(given, got["messages"], strict=True)):
            if i not in marked:
                assert theirs == mine, (turn, i)
                continue
            blocks = theirs["content"]
            assert "cache_control" in blocks[-1], (turn, i)
            unmarked = [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]
            text = mine["content"]
            assert unmarked == ([{"type": "text", "text": text}] if isinstance(text, str)
                                else text), (turn, i)
    # A message that loses its mark goes back to a string, and the cache reads on: each
    # request reads what the one before wrote (the API takes a string as one text block).
    assert reads[0] == 0 and all(read > 0 for read in reads[1:]), reads
