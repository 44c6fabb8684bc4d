"""Tools, working memory and the state snapshot, tested directly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nonoka import RunContext, tool
from nonoka.errors import CorruptSessionError, ToolError, UnsupportedVersionError
from nonoka.runtime.window import WorkingMemory
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import ToolCall
from nonoka.state.session_state import SCHEMA_VERSION, SessionState, migrate_state_dict


@tool(idempotent=True)
async def search(query: str, limit: int = 5, tags: list[str] | None = None) -> list[str]:
    """Search the notes.

    Longer explanation that is not part of the summary.

    Args:
        query: what to look for
        limit: how many results
            at most.
        tags: only notes with these tags
    """
    return [query] * limit


def test_schema_comes_from_hints_and_docstring() -> None:
    assert search.name == "search" and search.idempotent and not search.requires_approval
    assert search.description == "Search the notes."
    props = search.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for"}
    assert props["limit"]["default"] == 5 and props["limit"]["description"] == (
        "how many results at most.")
    assert search.parameters["required"] == ["query"]
    assert search.parameters["additionalProperties"] is False


async def test_tools_validate_arguments_and_run_sync_or_async() -> None:
    ctx: RunContext[None] = RunContext(deps=None, session_id="s")
    assert json.loads(await search.run('{"query": "q", "limit": 2}', ctx)) == ["q", "q"]

    @tool(name="shout", description="Upper-case text")
    def loud(ctx: RunContext[Any], text: str) -> str:
        return f"{ctx.session_id}:{text.upper()}"

    assert loud.name == "shout" and loud.takes_context
    assert await loud.run('{"text": "hi"}', ctx) == "s:HI"
    with pytest.raises(ToolError, match="not valid JSON"):
        await search.run("{oops", ctx)
    with pytest.raises(ToolError, match="invalid arguments for 'search'"):
        await search.run('{"query": 3, "extra": 1}', ctx)
    with pytest.raises(ToolError, match="must be a JSON object"):
        await search.run("[1]", ctx)


def _call_unit(call_id: str, size: int) -> list[MemoryEntry]:
    call = ToolCall(id=call_id, name="t")
    return [MemoryEntry.assistant("", [call]), MemoryEntry.tool_result(call, "r" * size)]


async def test_compaction_keeps_system_and_whole_units() -> None:
    entries = [MemoryEntry.make("system", "rules")]
    for i in range(5):
        entries.append(MemoryEntry.make("user", f"question {i} " + "q" * 200))
        entries.extend(_call_unit(f"c{i}", 200))
    memory = WorkingMemory(entries)
    assert await memory.compact(300)
    kept = memory.entries
    assert kept[0].role == "system" and memory.generation == 1
    assert kept[-1].tool_call_id == "c4" and kept[-2].role == "assistant"
    assert memory.total_tokens <= 300
    assert not await memory.compact(10_000)


async def test_compaction_never_drops_the_newest_unit_even_over_budget() -> None:
    memory = WorkingMemory([MemoryEntry.make("user", "a" * 400), *_call_unit("big", 4000)])
    assert await memory.compact(50)
    assert [e.role for e in memory.entries] == ["assistant", "tool"]


async def test_summarising_compaction_replaces_dropped_entries() -> None:
    seen: list[int] = []

    async def summarize(dropped: Any) -> str:
        seen.append(len(dropped))
        return "they talked"

    memory = WorkingMemory([MemoryEntry.make("user", "x" * 800), MemoryEntry.make("user", "hi")])
    assert await memory.compact(100, summarize)
    assert seen == [1]
    assert memory.entries[0].metadata["summary"] is True
    assert memory.entries[0].content.endswith("they talked")


def _v1_snapshot() -> dict[str, Any]:
    return {
        "schema_version": 1, "session_id": "old-1", "status": "completed",
        "completed_steps": {"a": {"data": {"n": 1}}},
        "memory_entries": [{"role": "user", "content": "hi", "metadata": {}, "tokens": 1}],
        "start_time": "2025-01-02T03:04:05+00:00", "end_time": None,
        "trace": {"note": "imported"}, "runtime_state": None, "extension_state": {"x": {"k": 1}},
    }


def test_v1_snapshots_migrate() -> None:
    state = SessionState.model_validate(migrate_state_dict(_v1_snapshot()))
    assert state.schema_version == SCHEMA_VERSION
    assert state.completed_steps["a"].output == {"n": 1}
    assert state.start_time == 1735787045.0
    assert state.trace[0].kind == "note"
    assert state.runtime_state.usage.model_turns == 0
    assert state.memory_entries[0].content == "hi"


def test_newer_snapshots_are_refused_with_advice() -> None:
    with pytest.raises(UnsupportedVersionError, match="Upgrade nonoka"):
        migrate_state_dict({"schema_version": SCHEMA_VERSION + 1, "session_id": "x"})
    with pytest.raises(CorruptSessionError, match="invalid schema_version"):
        migrate_state_dict({"schema_version": "two"})
