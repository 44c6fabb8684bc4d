"""Session operations on any engine: search, export and import, delete, prune, copy.

``SessionOpsSuite`` needs an ``ops_engine`` fixture that is an ``OpsHarness``: a
project's stores on the engine under test (``stores``) and a way to open another, empty
database of the same engine or of another one (``fresh``), which the harness closes.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from nonoka import Agent, Runner
from nonoka.errors import ConfigurationError
from nonoka.ops import jsonl
from nonoka.ops.copy import copy_database
from nonoka.ops.export import export_jsonl, export_markdown
from nonoka.ops.importer import import_jsonl
from nonoka.ops.maintenance import check, stats, vacuum
from nonoka.ops.model import SearchHit, SearchQuery
from nonoka.ops.prune import delete_sessions, prune
from nonoka.ops.search import search
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import ToolCall
from nonoka.state.session_state import SessionState, SessionStatus, StepResult, StepStatus
from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord
from nonoka.testing import ScriptedModel, text
from nonoka.testing.conformance import states
from nonoka.testing.conformance.media import IMAGE, SHOT, digest, file_part, payload, with_files
from nonoka.turn.lineage import fork_session
from nonoka.turn.partial import unfinished_answers

HOUR = 3600.0
DAY = 86400.0


ENGINES = ("memory", "postgres", "sqlite")
"""The engines a session moves to (``OpsHarness.fresh``)."""


class OpsHarness(Protocol):
    stores: ProjectStores

    async def fresh(self, engine: str | None = None) -> ProjectStores:
        """Another, empty database of ``engine`` (one of ``ENGINES``; default: the same
        engine), closed by the harness."""
        ...


async def add_session(stores: ProjectStores, *, title: str, words: str = "",
                      status: str = "completed", model: str = "openai:gpt-4o-mini",
                      age: float = 0.0, turns: int = 2, purpose: str = "chat",
                      metadata: dict[str, object] | None = None) -> str:
    """A stored session with entries (one with a tool call), step updates, events and an
    index row last active ``age`` seconds ago; ``words`` go into its last answer."""
    sid = states.new_id()
    call = ToolCall(id="call_1", name="grep_repo", arguments='{"pattern": "flux capacitor"}')
    entries = [e for n in range(turns) for e in states.turn(n)]
    entries += [MemoryEntry.make("user", "search the repo"),
                MemoryEntry.assistant("", [call]),
                MemoryEntry.tool_result(call, "src/flux.py: 3 matches"),
                MemoryEntry.assistant(f"done. {words}".strip())]
    state = SessionState(session_id=sid, status=SessionStatus(status),
                         memory_entries=entries, turn_count=turns + 1,
                         current_plan=states.plan())
    await stores.checkpoints.save_session(state)
    await stores.checkpoints.save_step_status(sid, "fetch", StepStatus.COMPLETED)
    await stores.checkpoints.save_step_result(sid, "fetch", StepResult(data={"ok": "ü"}))
    meta: dict[str, object] = {"purpose": purpose, "conversation_key": "k" + sid[:6],
                               **(metadata or {})}
    now = time.time()
    await stores.index.upsert_session(SessionRecord(
        session_id=sid, title=title, model=model, status=status, created_at=now - age - 10,
        last_active=now - age, turn_count=turns + 1, message_count=len(entries),
        input_tokens=120, output_tokens=45, cost_usd=0.0125, metadata=meta))
    await stores.events.append_event(sid, "request", {"messages": 3, "tools": ["grep_repo"]})
    await stores.events.append_event(sid, "model_call", {"model": model, "input_tokens": 120,
                                                         "output_tokens": 45,
                                                         "cost_usd": 0.0125})
    await stores.events.append_event(sid, "finish", {"finish_reason": "stop", "nul": "a\u0000b"})
    return sid


async def export_text(stores: ProjectStores, ids: list[str] | None = None) -> str:
    out = io.StringIO()
    await export_jsonl(stores, ids, out)
    return out.getvalue()


async def branch(stores: ProjectStores, parent: str, at: int, words: str = "") -> str:
    """A branch of ``parent`` holding its first ``at`` entries, and an answer of its own
    (with ``words``) after them."""
    sid = await fork_session(stores, parent, at, reason="test")
    state = await stores.checkpoints.load_session(sid)
    assert state is not None
    await stores.checkpoints.save_session(state.model_copy(update={"memory_entries": [
        *state.memory_entries, MemoryEntry.assistant(f"branch answer {words}".strip())]}))
    return sid


async def continue_session(stores: ProjectStores, sid: str) -> None:
    """Run a real turn on ``sid`` and check it was appended after the stored entries."""
    before = await stores.checkpoints.load_session(sid)
    assert before is not None
    agent = Agent(model=ScriptedModel([text(f"continued {sid[:8]}")]))
    result = await Runner(store=stores.checkpoints).run_react(agent, "and then?",
                                                               session_id=sid)
    assert result.session_id == sid and result.output == f"continued {sid[:8]}"
    after = await stores.checkpoints.load_session(sid)
    assert after is not None
    kept = len(before.memory_entries)
    assert after.memory_entries[:kept] == before.memory_entries
    assert [(e.role, e.content) for e in after.memory_entries[kept:]] == [
        ("user", "and then?"), ("assistant", f"continued {sid[:8]}")]
PDF = file_part(payload(20_000, 9), "application/pdf", filename="spec.pdf")
PDF_DIGEST = digest(payload(20_000, 9))


async def add_files(stores: ProjectStores, sid: str, *files: dict[str, object]) -> None:
    """Append a user message holding ``files`` and an answer to the session."""
    state = await stores.checkpoints.load_session(sid)
    assert state is not None
    await stores.checkpoints.save_session(state.model_copy(update={"memory_entries": [
        *state.memory_entries, with_files("user", "look at these", *files),
        MemoryEntry.assistant("I see them")]}))


async def drop_file(stores: ProjectStores, name: str) -> None:
    """Remove a stored file behind the engine's back, as a damaged database would."""
    store: Any = stores.checkpoints
    if hasattr(store, "transaction"):
        with store.transaction() as db:
            db.execute("DELETE FROM media WHERE digest = ?", (name,))
    elif hasattr(store.database, "media"):
        del store.database.media[name]
    else:
        async with store.database.connection() as conn:
            await conn.execute("DELETE FROM media WHERE digest = %s", (name,))


async def add_streamed(stores: ProjectStores, sid: str, pieces: list[str], *,
                       stored: bool = False, then: str = "") -> None:
    """A turn's log of an answer streamed in ``pieces``: stored whole (a ``model_call``
    and ``finish`` follow), else cut short (``then`` follows, if anything)."""
    await stores.events.append_event(sid, "request", {"messages": 1})
    for piece in pieces:
        await stores.events.append_event(sid, "partial_answer", {"text": piece})
    if stored:
        await stores.events.append_event(sid, "model_call", {"model": "m"})
        await stores.events.append_event(sid, "finish", {"finish_reason": "stop"})
    elif then:
        await stores.events.append_event(sid, then, {"code": "x", "messages": 1})


async def markdown_text(stores: ProjectStores, sid: str) -> str:
    out = io.StringIO()
    await export_markdown(stores, [sid], out)
    return out.getvalue()


def found(hits: list[SearchHit]) -> list[tuple[str, int | None, set[str]]]:
    return [(h.session_id, h.position, set(h.shared_with)) for h in hits]


def body(export: str) -> str:
    """The export without its header line (which carries the time of export)."""
    return export.split("\n", 1)[1]


async def snapshot_of(stores: ProjectStores, sid: str) -> tuple[object, ...]:
    return (await stores.checkpoints.load_session(sid), await stores.index.get_session(sid),
            await stores.events.list_events(sid, limit=1000),
            await stores.events.usage_summary(sid))


class SessionOpsSuite:
    """What ``nonoka.ops`` must do on an engine."""

    # -- search ---------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_search_finds_entries_titles_and_tool_calls(self, ops_engine: OpsHarness
                                                              ) -> None:
        stores = ops_engine.stores
        a = await add_session(stores, title="Fix the login page", words="zebra crossing")
        b = await add_session(stores, title="Deploy notes", words="Zebra stripes")
        hits = await search(stores, SearchQuery("zebra"))
        assert {(h.session_id, h.position) for h in hits} == {(a, 7), (b, 7)}
        assert all("[" in h.snippet and h.role == "assistant" for h in hits)
        title = await search(stores, SearchQuery("login"))
        assert [(h.session_id, h.position, h.role) for h in title] == [(a, None, "title")]
        tools = await search(stores, SearchQuery("capacitor"))
        assert {h.session_id for h in tools} == {a, b}
        assert {h.position for h in tools} == {5}
        both = await search(stores, SearchQuery("ZEBRA crossing"))
        assert [h.session_id for h in both] == [a]
        assert await search(stores, SearchQuery("zeb")) == []

    @pytest.mark.asyncio
    async def test_search_filters_and_limits(self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        old = await add_session(stores, title="old", words="quokka", status="failed",
                                age=10 * DAY)
        new = await add_session(stores, title="new", words="quokka", model="deepseek:chat")
        title_session = await add_session(stores, title="t", words="quokka", purpose="title")
        found = [h.session_id for h in await search(stores, SearchQuery("quokka"))]
        assert found == [new, old]
        every = await search(stores, SearchQuery("quokka", everything=True))
        assert title_session in {h.session_id for h in every}
        failed = await search(stores, SearchQuery("quokka", status=("failed",)))
        assert [h.session_id for h in failed] == [old]
        recent = await search(stores, SearchQuery("quokka", since=time.time() - DAY))
        assert [h.session_id for h in recent] == [new]
        model = await search(stores, SearchQuery("quokka", model="deepseek:chat"))
        assert [h.session_id for h in model] == [new]
        assert len(await search(stores, SearchQuery("quokka", limit=1))) == 1

    @pytest.mark.asyncio
    @pytest.mark.parametrize("text", [
        '"', "'", "*", "quokka*", '"quokka', "quokka OR", "AND", "NOT quokka", "(", ")",
        "col:quokka", "^quokka", "quokka NEAR/3 x", "a - b", "\\", "%_", "';DROP TABLE x;--",
        "\u0000", "!!!", "quokka & | ! <->", "😀 quokka",
    ])
    async def test_hostile_query_syntax_is_only_words(self, ops_engine: OpsHarness,
                                                      text: str) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="t", words="quokka")
        hits = await search(stores, SearchQuery(text))
        assert all(h.session_id == sid for h in hits)

    @pytest.mark.asyncio
    async def test_an_entry_branches_share_is_one_hit_naming_them(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        parent = await add_session(stores, title="p", words="okapi")  # entry 7
        whole = await branch(stores, parent, 8)  # shares entry 7
        deeper = await branch(stores, whole, 9, "okapi")  # shares 7 (through whole); own 9
        early = await branch(stores, parent, 3, "okapi")  # shares 0-2; its own answer at 3
        hits = found(await search(stores, SearchQuery("okapi")))
        assert sorted(hits) == sorted([(parent, 7, {whole, deeper}), (deeper, 9, set()),
                                       (early, 3, set())])
        # A filter naming a branch finds what it shares, reported in that branch.
        only = await search(stores, SearchQuery("okapi", session=deeper))
        assert sorted(found(only)) == [(deeper, 7, set()), (deeper, 9, set())]
        assert found(await search(stores, SearchQuery("okapi", session=parent))) == [
            (parent, 7, set())]
        record = await stores.index.get_session(whole)
        assert record is not None
        await stores.index.upsert_session(record.model_copy(update={"status": "paused"}))
        paused = await search(stores, SearchQuery("okapi", status=("paused",)))
        assert found(paused) == [(whole, 7, set())] and paused[0].status == "paused"
        assert len(await search(stores, SearchQuery("okapi", limit=1))) == 1

    # -- export and import ----------------------------------------------------------

    @pytest.mark.asyncio
    async def test_a_branch_exports_its_whole_conversation(self, ops_engine: OpsHarness
                                                           ) -> None:
        stores = ops_engine.stores
        parent = await add_session(stores, title="p", words="okapi")
        child = await branch(stores, parent, 5, "own")
        grandchild = await branch(stores, child, 6, "deeper")
        target = await ops_engine.fresh()
        report = await import_jsonl(target, _write(await export_text(stores, [grandchild])))
        assert report.imported == [grandchild]
        original = await stores.checkpoints.load_session(grandchild)
        copy = await target.checkpoints.load_session(grandchild)
        assert original is not None and copy is not None
        assert len(copy.memory_entries) == 7
        assert copy.memory_entries == original.memory_entries
        assert copy.forked_from == child and copy.fork_point == 6
        assert await check(target) == []


    @pytest.mark.asyncio
    @pytest.mark.parametrize("engine", ENGINES)
    async def test_an_imported_session_continues(self, ops_engine: OpsHarness,
                                                 engine: str) -> None:
        stores = ops_engine.stores
        parent = await add_session(stores, title="p", words="okapi")
        child = await branch(stores, parent, 5, "own")
        target = await ops_engine.fresh(engine)
        report = await import_jsonl(target, _write(await export_text(stores)))
        assert sorted(report.imported) == sorted([parent, child])
        assert await check(target) == []
        for sid in (child, parent):
            await continue_session(target, sid)
        assert await check(target) == []

    @pytest.mark.asyncio
    @pytest.mark.parametrize("engine", ENGINES)
    async def test_a_copied_session_continues(self, ops_engine: OpsHarness,
                                              engine: str) -> None:
        stores = ops_engine.stores
        parent = await add_session(stores, title="p", words="okapi")
        child = await branch(stores, parent, 5, "own")
        target = await ops_engine.fresh(engine)
        report = await copy_database(stores, target)
        assert report.ok and sorted(report.copied) == sorted([parent, child])
        for sid in (parent, child):
            await continue_session(target, sid)
        assert await check(target) == []

    @pytest.mark.asyncio
    async def test_export_import_round_trip_is_exact(self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        ids = sorted([await add_session(stores, title=f"s{n}", words="ü ✓ \"q\"")
                      for n in range(3)])
        text = await export_text(stores)
        first = json.loads(text.splitlines()[0])
        assert first["format"] == "nonoka-sessions" and first["version"] == jsonl.VERSION
        target = await ops_engine.fresh()
        path = _write(text)
        report = await import_jsonl(target, path)
        assert report.imported == ids
        for sid in ids:
            assert await snapshot_of(target, sid) == await snapshot_of(stores, sid)
        assert body(await export_text(target)) == body(text)
        again = await import_jsonl(target, path)
        assert again.skipped == ids and not again.imported

    @pytest.mark.asyncio
    async def test_import_renames_on_request_never_overwrites(self, ops_engine: OpsHarness
                                                              ) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="mine", words="original")
        before = await snapshot_of(stores, sid)
        text = await export_text(stores)
        report = await import_jsonl(stores, _write(text), "rename")
        (new,) = report.renamed.values()
        assert report.renamed == {sid: new} and new != sid
        assert await snapshot_of(stores, sid) == before
        copy = await stores.checkpoints.load_session(new)
        assert copy is not None and copy.memory_entries == before[0].memory_entries  # type: ignore[attr-defined]

    @pytest.mark.asyncio
    async def test_a_broken_file_imports_nothing(self, ops_engine: OpsHarness) -> None:
        from nonoka.errors import ConfigurationError

        stores = ops_engine.stores
        for n in range(2):
            await add_session(stores, title=f"s{n}")
        text = await export_text(stores)
        lines = text.splitlines(keepends=True)
        newer = json.dumps({**json.loads(lines[0]), "version": 99}) + "\n"
        damaged = dict(enumerate(lines))
        damaged[2] = damaged[2].replace("question", "questiom")
        assert damaged[2] != lines[2]
        cases = {
            "truncated": "".join(lines[:-1]),
            "cut mid-line": text[: len(text) // 2],
            "newer": newer + "".join(lines[1:]),
            "changed": "".join(damaged.values()),
            "not json": lines[0] + "{nope\n" + "".join(lines[1:]),
            "empty": "",
        }
        target = await ops_engine.fresh()
        for name, content in cases.items():
            with pytest.raises(ConfigurationError) as error:
                await import_jsonl(target, _write(content))
            assert "nothing was imported" in str(error.value) or "Nothing" in str(
                error.value), name
            assert (await target.index.list_sessions(10, purpose=None)) == [], name

    @pytest.mark.asyncio
    async def test_import_refuses_what_the_readers_cannot_read(self, ops_engine: OpsHarness
                                                               ) -> None:
        from nonoka.errors import ConfigurationError

        stores = ops_engine.stores
        await add_session(stores, title="s")
        lines = parsed(await export_text(stores))
        assert [v.get("type") for v in lines][10:13] == ["step", "step", "event"]
        target = await ops_engine.fresh()
        for name, (change, number, says) in REFUSED.items():
            changed = copy.deepcopy(lines)
            change(changed)
            with pytest.raises(ConfigurationError) as error:
                await import_jsonl(target, _write(reseal(changed)))
            message = str(error.value)
            assert message.startswith(f"line {number}: the {says}"), (name, message)
            assert message.endswith("nothing was imported") and "\n" not in message, name
            assert await target.index.list_sessions(10, purpose=None) == [], name
        report = await import_jsonl(target, _write(reseal(lines)))  # the file as exported
        assert len(report.imported) == 1

    @pytest.mark.asyncio
    async def test_import_refuses_a_loop_of_parents(self, ops_engine: OpsHarness) -> None:
        from nonoka.errors import ConfigurationError

        stores = ops_engine.stores
        a, b = sorted([await add_session(stores, title="a"), await add_session(stores,
                                                                                title="b")])
        lines = parsed(await export_text(stores))
        target = await ops_engine.fresh()

        def parents(first: str | None, second: str | None) -> Path:
            changed = copy.deepcopy(lines)
            for n, parent in enumerate((first, second)):
                if parent is not None:
                    _of(changed, "session", n)["index"]["metadata"]["forked_from"] = parent
            return _write(reseal(changed))

        for file, says in ((parents(b, a), f"({a} → {b} → {a})"),
                           (parents(a, None), f"({a} → {a})")):
            with pytest.raises(ConfigurationError) as error:
                await import_jsonl(target, file)
            assert str(error.value) == (
                "line 2: the session line's 'index.metadata.forked_from' makes a loop of "
                f"parents {says}; nothing was imported")
            assert await target.index.list_sessions(10, purpose=None) == []
        assert (await import_jsonl(target, parents(None, a))).imported == [a, b]
        # A loop closed through a session already stored (b, whose parent is a).
        await delete_sessions(target, [a])
        with pytest.raises(ConfigurationError, match=f"loop of parents \\({a} → {b} → {a}\\)"):
            await import_jsonl(target, parents(b, None))
        assert [s.session_id for s in await target.index.list_sessions(10)] == [b]

    # -- delete and prune -----------------------------------------------------------

    @pytest.mark.asyncio
    async def test_delete_removes_everything_but_never_a_leased_session(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        gone = await add_session(stores, title="gone", words="walrus")
        busy = await add_session(stores, title="busy", words="walrus")
        assert await stores.leases.acquire_lease(busy, "host:1:x", 30)
        result = await delete_sessions(stores, [gone, busy, "no-such-session"])
        assert result.removed == [gone] and result.busy == [busy]
        assert result.missing == ["no-such-session"] and result.bytes_freed > 0
        assert await stores.checkpoints.load_session(gone) is None
        assert await stores.index.get_session(gone) is None
        assert await stores.events.list_events(gone) == []
        assert [h.session_id for h in await search(stores, SearchQuery("walrus"))] == [busy]
        assert await stores.checkpoints.load_session(busy) is not None

    @pytest.mark.asyncio
    async def test_prune_by_age_status_and_keep_last(self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        old_done = await add_session(stores, title="a", age=40 * DAY)
        old_failed = await add_session(stores, title="b", status="failed", age=50 * DAY)
        old_paused = await add_session(stores, title="c", status="paused", age=60 * DAY)
        oldest_done = await add_session(stores, title="d", age=70 * DAY)
        recent = await add_session(stores, title="e", age=HOUR)
        dry = await prune(stores, older_than=30 * DAY, dry_run=True)
        assert set(dry.removed) == {old_done, old_failed, oldest_done}
        assert await stores.checkpoints.load_session(old_done) is not None
        kept = await prune(stores, older_than=30 * DAY, statuses=("completed",), keep_last=2)
        assert kept.removed == [oldest_done]
        rest = await prune(stores, older_than=30 * DAY)
        assert set(rest.removed) == {old_done, old_failed}
        left = {r.session_id for r in await stores.index.list_sessions(10, purpose=None)}
        assert left == {old_paused, recent}

    @pytest.mark.asyncio
    @pytest.mark.parametrize("how", ["delete", "prune"])
    async def test_removing_a_parent_leaves_its_branches_whole(
            self, ops_engine: OpsHarness, how: str) -> None:
        stores = ops_engine.stores
        parent = await add_session(stores, title="p", words="okapi", age=40 * DAY)
        child = await branch(stores, parent, 8, "own")
        grandchild = await branch(stores, child, 9)
        before = {sid: await stores.checkpoints.load_session(sid) for sid in (child, grandchild)}
        exported = body(await export_text(stores, [child, grandchild]))
        if how == "delete":
            removed = await delete_sessions(stores, [parent])
        else:
            removed = await prune(stores, older_than=30 * DAY)
        assert removed.removed == [parent]
        assert await stores.checkpoints.load_session(parent) is None
        for sid, state in before.items():
            assert await stores.checkpoints.load_session(sid) == state
        assert body(await export_text(stores, [child, grandchild])) == exported
        # The entry the parent stored now lives in the branch, still shared onwards.
        assert found(await search(stores, SearchQuery("okapi"))) == [
            (child, 7, {grandchild})]
        assert [f for f in await check(stores) if f.level == "error"] == []

    # -- check ----------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_check_reports_rows_of_sessions_that_are_not_stored(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        kept = await add_session(stores, title="fine")
        await branch(stores, kept, 5)  # a branch's shared entries are not missing rows
        assert await check(stores) == []
        ghost, lost = sorted([states.new_id(), states.new_id()])
        await stores.index.upsert_session(SessionRecord(session_id=ghost, title="ghost"))
        await stores.events.append_event(lost, "finish", {"finish_reason": "stop"})
        found = [(f.level, f.kind, f.session_id) for f in await check(stores)]
        assert found == [("warning", "index_without_checkpoint", ghost),
                         ("warning", "orphan_events", lost)]

    @pytest.mark.asyncio
    async def test_check_reports_references_without_their_file_and_stray_files(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="files")
        await add_files(stores, sid, SHOT, PDF)
        assert await check(stores) == []
        await drop_file(stores, digest(IMAGE))
        found = [(f.level, f.kind, f.session_id) for f in await check(stores)]
        assert found == [("error", "missing_media", sid)]
        message = (await check(stores))[0].message
        assert digest(IMAGE) in message and "entry 8 " in message
        other = await add_session(stores, title="stray")
        await add_files(stores, other, file_part(b"stray bytes"))
        state = await stores.checkpoints.load_session(other)
        assert state is not None  # a compaction that drops it collects it at once
        await stores.checkpoints.save_session(state.model_copy(update={
            "memory_entries": state.memory_entries[:2], "memory_generation": 5}))
        assert (await stats(stores)).media == 1

    # -- files ----------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_export_carries_each_file_once_and_imports_it_anywhere(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        a = await add_session(stores, title="a")
        b = await add_session(stores, title="b")
        await add_files(stores, a, SHOT)
        await add_files(stores, a, SHOT)  # sent again: still one file
        await add_files(stores, b, {**SHOT, "filename": "copy.png"}, PDF)
        text = await export_text(stores)
        lines = [json.loads(line) for line in text.splitlines()]
        kinds = [line.get("type") for line in lines[1:]]
        media = [line for line in lines if line.get("type") == "media"]
        assert sorted(m["digest"] for m in media) == sorted([digest(IMAGE), PDF_DIGEST])
        first_session = kinds.index("session")
        for m in media:  # before the first session that refers to it
            user = next(n for n, line in enumerate(lines) if line.get("type") == "entry"
                        and m["digest"] in line["entry"])
            assert lines.index(m) < user
        assert kinds[0] == "media" and first_session > 0
        assert SHOT["data"][:200] not in "".join(
            line["entry"] for line in lines if line.get("type") == "entry")
        target = await ops_engine.fresh()
        report = await import_jsonl(target, _write(text))
        assert sorted(report.imported) == sorted([a, b])
        for sid in (a, b):
            assert await snapshot_of(target, sid) == await snapshot_of(stores, sid)
        assert body(await export_text(target)) == body(text)
        copied = await stats(target)
        assert (copied.media, copied.media_bytes) == (2, len(IMAGE) + 20_000)
        assert await check(target) == []

    @pytest.mark.asyncio
    async def test_an_export_that_lost_or_changed_a_file_imports_nothing(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="a")
        await add_files(stores, sid, SHOT)
        lines = (await export_text(stores)).splitlines(keepends=True)
        at = next(n for n, line in enumerate(lines) if '"type":"media"' in line)
        changed = json.loads(lines[at])
        changed["data"] = changed["data"][:-8] + "AAAAAAA="
        cases = {
            "without the file": "".join(lines[:at] + lines[at + 1:]),
            "bytes changed": "".join([*lines[:at], json.dumps(changed) + "\n",
                                      *lines[at + 1:]]),
            "file after the session": "".join([*lines[:at], *lines[at + 1:-1], lines[at],
                                               lines[-1]]),
        }
        target = await ops_engine.fresh()
        for name, content in cases.items():
            with pytest.raises(ConfigurationError, match="othing was imported"):
                await import_jsonl(target, _write(content))
            assert await target.checkpoints.load_session(sid) is None, name
            assert (await stats(target)).media == 0, name

    @pytest.mark.asyncio
    async def test_markdown_names_files_and_never_holds_their_bytes(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="a")
        await add_files(stores, sid, SHOT, PDF)
        out = io.StringIO()
        await export_markdown(stores, [sid], out)
        text = out.getvalue()
        assert "[image shot.png, image/png, 293.0 KiB]" in text
        assert "[file spec.pdf, application/pdf, 19.5 KiB]" in text
        assert SHOT["data"][:40] not in text and PDF["data"][:40] not in text

    @pytest.mark.asyncio
    async def test_markdown_shows_an_answer_cut_short_after_the_conversation(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="a", words="last stored answer")
        await add_streamed(stores, sid, ["a copy of ", "an answer stored whole"],
                           stored=True)
        await add_streamed(stores, sid, ["half an \x1b[31manswer ", "Bearer abcdefgh12345678 ",
                                         "and then"])
        text = await markdown_text(stores, sid)
        heading = "## Assistant (interrupted: the process ended mid-answer)"
        assert text.count(heading) == 1 and "an answer stored whole" not in text
        cut = text.index(heading)
        assert text.index("last stored answer") < cut < text.index("## Usage")
        assert "half an \\x1b[31manswer Bearer [redacted] and then" in text[cut:]
        assert "\x1b" not in text and "abcdefgh12345678" not in text

        target = await ops_engine.fresh()  # the JSONL carries the pieces, so does an import
        await import_jsonl(target, _write(await export_text(stores, [sid])))
        events = await target.events.list_events(sid, limit=1000)
        assert [a.text for _, a in unfinished_answers(events)] == [
            "half an \x1b[31manswer Bearer [redacted] and then"]
        assert await markdown_text(target, sid) == text

    @pytest.mark.asyncio
    async def test_markdown_names_why_an_answer_was_cut_short(self, ops_engine: OpsHarness
                                                              ) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="a")
        await add_streamed(stores, sid, ["the call failed here"], then="error")
        await add_streamed(stores, sid, ["killed here"], then="request")
        await stores.events.append_event(sid, "finish", {"finish_reason": "stop"})
        text = await markdown_text(stores, sid)
        failed = text.index("## Assistant (interrupted: the turn ended mid-answer)")
        killed = text.index("## Assistant (interrupted: the process ended mid-answer)")
        assert failed < text.index("the call failed here") < killed < text.index("killed here")

    @pytest.mark.asyncio
    @pytest.mark.parametrize("how", ["delete", "prune"])
    async def test_removing_sessions_collects_the_files_nothing_refers_to(
            self, ops_engine: OpsHarness, how: str) -> None:
        stores = ops_engine.stores
        a = await add_session(stores, title="a", age=40 * DAY)
        b = await add_session(stores, title="b", age=HOUR)
        await add_files(stores, a, SHOT, PDF)
        await add_files(stores, b, SHOT)
        child = await branch(stores, a, 10)  # holds a's files through the shared entries
        await stores.index.upsert_session(SessionRecord(
            session_id=child, title="child", status="completed",
            last_active=time.time() - 40 * DAY, metadata={"forked_from": a, "fork_point": 10}))
        assert (await stats(stores)).media == 2
        if how == "delete":
            removed = await delete_sessions(stores, [a])
        else:
            removed = await prune(stores, older_than=30 * DAY, keep_last=2)
        assert removed.removed == [a]
        assert (await stats(stores)).media == 2  # the branch still holds both
        loaded = await stores.checkpoints.load_session(child)
        assert loaded is not None and loaded.memory_entries[8].metadata["parts"][1] == SHOT
        dry = await delete_sessions(stores, [child], dry_run=True)
        assert dry.bytes_freed > 20_000  # the PDF only the branch holds now
        await delete_sessions(stores, [child])
        after = await stats(stores)
        assert (after.media, after.media_bytes) == (1, len(IMAGE))
        await delete_sessions(stores, [b])
        assert (await stats(stores)).media == 0
        assert await check(stores) == []

    @pytest.mark.asyncio
    async def test_search_never_reads_a_files_bytes(self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        sid = await add_session(stores, title="a")
        inline = with_files("user", "an inline heron picture", file_part(payload(3_000, 5)))
        state = await stores.checkpoints.load_session(sid)
        assert state is not None
        await stores.checkpoints.save_session(state.model_copy(update={
            "memory_entries": [*state.memory_entries, inline]}))
        await add_files(stores, sid, file_part(payload(3_000, 5)))
        tokens = [w for w in re.split(r"[^A-Za-z0-9]", inline.metadata["parts"][1]["data"])
                  if len(w) > 12][:3]
        assert tokens
        for token in tokens:
            assert await search(stores, SearchQuery(token)) == []
        assert [h.session_id for h in await search(stores, SearchQuery("heron"))] == [sid]

    @pytest.mark.asyncio
    async def test_stats_count_files_once_and_vacuum_drops_stray_ones(
            self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        for title in ("a", "b"):
            await add_files(stores, await add_session(stores, title=title), SHOT)
        numbers = await stats(stores)
        assert (numbers.media, numbers.media_bytes) == (1, len(IMAGE))
        assert numbers.as_json()["media_bytes"] == len(IMAGE)
        await vacuum(stores)
        assert (await stats(stores)).media == 1

    # -- copy -----------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_copy_is_verified_and_resumable(self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        ids = sorted([await add_session(stores, title=f"s{n}", words="narwhal")
                      for n in range(3)])
        target = await ops_engine.fresh()
        busy = ids[1]
        assert await stores.leases.acquire_lease(busy, "host:1:x", 30)
        first = await copy_database(stores, target)
        assert first.copied == [ids[0], ids[2]] and first.busy == [busy] and not first.ok
        await stores.leases.release_lease(busy, "host:1:x")
        second = await copy_database(stores, target)
        assert second.copied == [busy] and second.already == [ids[0], ids[2]] and second.ok
        assert body(await export_text(target)) == body(await export_text(stores))
        assert {h.session_id for h in await search(target, SearchQuery("narwhal"))} == set(ids)

    @pytest.mark.asyncio
    async def test_copy_carries_the_files(self, ops_engine: OpsHarness) -> None:
        stores = ops_engine.stores
        ids = sorted([await add_session(stores, title=f"s{n}") for n in range(2)])
        for sid in ids:
            await add_files(stores, sid, SHOT)
        await add_files(stores, ids[1], PDF)
        target = await ops_engine.fresh()
        report = await copy_database(stores, target)
        assert report.ok and report.copied == ids
        for sid in ids:
            assert await target.checkpoints.load_session(sid) == \
                await stores.checkpoints.load_session(sid)
        assert (await stats(target)).media == 2
        assert await check(target) == []


Lines = list[dict[str, Any]]


def reseal(lines: Lines) -> str:
    """An export's lines as a file again, each session's digest computed anew: what a
    file changed on purpose looks like (every check but the digest still applies)."""
    out, digest = [], None
    for value in lines:
        line = json.dumps(value) + "\n"  # NaN and infinities as Python writes them
        if value.get("type") == "session":
            digest = hashlib.sha256()
        if value.get("type") == "end_session" and digest is not None:
            line = json.dumps({**value, "digest": digest.hexdigest()}) + "\n"
            digest = None
        elif digest is not None:
            digest.update(line.encode())
        out.append(line)
    return "".join(out)


def parsed(export: str) -> Lines:
    return [json.loads(line) for line in export.splitlines()]


def _of(lines: Lines, kind: str, n: int = 0) -> dict[str, Any]:
    """The ``n``-th line of ``kind``."""
    return [v for v in lines if v.get("type") == kind][n]


def _set(line_type: str, **values: object) -> Callable[[Lines], None]:
    def change(lines: Lines) -> None:
        _of(lines, line_type).update(values)
    return change


def _index(**values: object) -> Callable[[Lines], None]:
    def change(lines: Lines) -> None:
        _of(lines, "session")["index"].update(values)
    return change


def _renamed_to(sid: str) -> Callable[[Lines], None]:
    def change(lines: Lines) -> None:
        for kind in ("session", "end_session"):
            _of(lines, kind)["session_id"] = sid
        _of(lines, "session")["index"]["session_id"] = sid
    return change


def _metadata(**values: object) -> Callable[[Lines], None]:
    def change(lines: Lines) -> None:
        _of(lines, "session")["index"]["metadata"].update(values)
    return change


REFUSED: dict[str, tuple[Callable[[Lines], None], int, str]] = {
    # name: (change, line number, what the error says after "line N: the ")
    "updated_at Infinity": (_set("session", updated_at=math.inf), 2,
                            "session line's 'updated_at' is inf, not a finite number"),
    "created_at NaN": (_set("session", created_at=math.nan), 2,
                       "session line's 'created_at' is nan, not a finite number"),
    "revision 2**70": (_set("session", revision=2**70), 2,
                       "session line's 'revision' is 1180591620717411303424, outside 0.."),
    "negative revision": (_set("session", revision=-1), 2,
                          "session line's 'revision' is -1, outside 0.."),
    "memory_generation 2**64": (_set("session", memory_generation=2**64), 2,
                                "session line's 'memory_generation' is 18446744073709551616"),
    "entry_count": (_set("session", entry_count=99), 2,
                    "session line's 'entry_count' is 99 but the session holds 8 entries"),
    "empty id": (_renamed_to(""), 2, "session line's 'session_id' is '', not a session id"),
    "path id": (_renamed_to("../../etc/passwd"), 2,
                "session line's 'session_id' is '../../etc/passwd', not a session id"),
    "escape id": (_renamed_to("a\x1b[31mred"), 2,
                  "session line's 'session_id' is 'a\\x1b[31mred', not a session id"),
    "100 KB id": (_renamed_to("a" * 100_000), 2, "session line's 'session_id' is 'aaaa"),
    "snapshot of another session": (
        lambda lines: _of(lines, "session").update(snapshot=_of(
            lines, "session")["snapshot"].replace('"session_id":"', '"session_id":"x')),
        2, "session line's 'snapshot' is the state of session 'x"),
    "snapshot NaN": (lambda lines: _of(lines, "session").update(snapshot='{"a": NaN}'), 2,
                     "session line's 'snapshot' is not valid JSON (NaN is not a JSON number"),
    "input_tokens lots": (_index(input_tokens="lots"), 2,
                          "session line's 'index.input_tokens' is 'lots': input should be a "
                          "valid integer"),
    "index of another session": (_index(session_id="other"), 2,
                                 "session line's 'index.session_id' is 'other', not the "
                                 "session's id"),
    "index NUL": (_index(title="a\x00b"), 2, "session line's 'index.title' holds a NUL"),
    "metadata NaN": (_metadata(x=math.nan), 2,
                     "session line's 'index.metadata' holds NaN or an infinity"),
    "forked_from a path": (_metadata(forked_from="../x"), 2,
                           "session line's 'index.metadata.forked_from' is '../x', not a "
                           "session id"),
    "entry not an entry": (_set("entry", entry='{"role": 5}'), 3,
                           "entry line's 'entry' is not a conversation entry"),
    "entry lone surrogate": (_set("entry", entry='{"role": "user", "content": "\ud800"}'),
                             3, "entry line's 'entry' holds a lone surrogate"),
    "step payload": (_set("step", payload='{"x": 1}'), 11,
                     "step line's 'payload' does not decode"),
    "step updated_at NaN": (_set("step", updated_at=math.nan), 11,
                            "step line's 'updated_at' is nan"),
    "event data list": (_set("event", data="[1]"), 13,
                        "event line's 'data' is not a JSON object"),
    "event data NaN": (_set("event", data='{"x": NaN}'), 13,
                       "event line's 'data' is not valid JSON"),
    "event at Infinity": (_set("event", at=-math.inf), 13, "event line's 'at' is -inf"),
    "event seq twice": (lambda lines: _of(lines, "event", 1).update(seq=1), 14,
                        "event line's 'seq' is 1, not after the previous event's 1"),
    "event kind empty": (_set("event", kind=""), 13, "event line's 'kind' is empty"),
}


def _write(text: str) -> Path:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False,
                                     encoding="utf-8") as handle:
        handle.write(text)
    return Path(handle.name)
