"""On generated histories, ``classify``'s shortcut answers as the full comparison does; and
the SQLite store keeps the digest chain of its rows (by which a process knows the entries
it decoded earlier are still the stored ones) through appends, rewrites and upgrades."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.bridge.reconcile import classify, compare
from nonoka.digests import Chain, entry_chains
from nonoka.messages import MemoryEntry, Message, ToolCall
from nonoka.session import Session
from nonoka.store.base import entry_json
from nonoka.store.sqlite import SQLiteCheckpointStore

TEXTS = st.sampled_from(["hi", "hi ", " hi", "h i", "two", "out", "", "a\nb", "a b", "数据"])
IDS = st.sampled_from(["c1", "c2", "c3"])


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    if role == "assistant":
        calls = draw(st.lists(IDS, max_size=2, unique=True))
        return Message(role="assistant", content=draw(TEXTS),
                       tool_calls=[ToolCall(id=c, name="bash") for c in calls] or None)
    if role == "tool":
        return Message(role="tool", content=draw(TEXTS), tool_call_id=draw(IDS))
    return Message(role=role, content=draw(TEXTS))


@st.composite
def entries(draw: st.DrawFn) -> MemoryEntry:
    entry = MemoryEntry.from_message(draw(messages()))
    marker = draw(st.sampled_from([None, None, None, "summary", "contract_repair"]))
    if marker is not None and entry.role == "user":
        return MemoryEntry.make("user", entry.content, **{marker: True})
    return entry


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[MemoryEntry], list[Message]]:
    """A stored conversation and a host history: mostly the stored one resent (with
    whitespace changed, system messages added or dropped) and something new, often edited."""
    stored = draw(st.lists(entries(), max_size=8))
    host: list[Message] = []
    for entry in stored:
        keep: bool = entry.role != "system" or draw(st.booleans())
        if keep:
            host.append(entry.to_message())
    reformat: bool = draw(st.booleans())
    if reformat:
        host = [Message(role=m.role, content=m.content + " ", tool_calls=m.tool_calls,
                        tool_call_id=m.tool_call_id) for m in host]
    renamed: bool = draw(st.booleans())
    if host and renamed:  # the same text answering, or calling, another id
        at = draw(st.integers(0, len(host) - 1))
        m, other = host[at], draw(IDS)
        host[at] = Message(role=m.role, content=m.content,
                           tool_calls=[ToolCall(id=other, name="bash")] if m.role ==
                           "assistant" and draw(st.booleans()) else None,
                           tool_call_id=other if m.role == "tool" else None)
    edit: bool = draw(st.booleans())
    if host and edit:
        at = draw(st.integers(0, len(host) - 1))
        host[at] = draw(messages())
    cut: bool = draw(st.booleans())
    if host and cut:
        host = host[:draw(st.integers(0, len(host)))]
    host += draw(st.lists(messages(), max_size=3))
    return stored, host


def chain_of(stored: Sequence[MemoryEntry]) -> Chain:
    chains = entry_chains(Chain(), (entry_json(e) for e in stored))
    return chains[-1] if chains else Chain()


def stored_chain(path: Path, session_id: str) -> Chain | None:
    """The chain on the session's last entry row, read as it is stored."""
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT key_chain FROM session_entries WHERE session_id = ? "
                         "ORDER BY seq DESC LIMIT 1", (session_id,)).fetchone()
    finally:
        db.close()
    return None if row is None else Chain.decode(row[0])


@settings(max_examples=600, deadline=None)
@given(cases())
def test_the_text_for_text_shortcut_classifies_as_the_full_comparison(
        case: tuple[list[MemoryEntry], list[Message]]) -> None:
    stored, host = case
    assert classify(stored, host) == compare(stored, host)


async def test_the_sqlite_store_keeps_the_chain_through_appends_and_rewrites(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        session = Session("chained")
        for n in range(5):
            session.memory.append(MemoryEntry.make("user", f"question {n}"))
            session.memory.append(MemoryEntry.assistant(f"answer {n}"))
            session.revision = await store.save_session(session.to_state())
            assert stored_chain(path, "chained") == chain_of(session.memory.entries)
        assert await session.memory.compact(10)  # rewritten: the chain starts again
        session.revision = await store.save_session(session.to_state())
        assert stored_chain(path, "chained") == chain_of(session.memory.entries)
    finally:
        await store.close()


async def test_the_migration_gives_existing_rows_their_chain(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    session = Session("older")
    for n in range(3):
        session.memory.append(MemoryEntry.make("system", "rules") if n == 0 else
                              MemoryEntry.make("user", f"q {n}"))
        session.memory.append(MemoryEntry.assistant(f"a {n}"))
    await store.save_session(session.to_state())
    await store.close()
    db = sqlite3.connect(path, isolation_level=None)
    # As a file from before the chain: no column, no record of the migration.
    db.execute("ALTER TABLE session_entries DROP COLUMN key_chain")
    db.execute("DELETE FROM nonoka_migrations WHERE name = 'm006_entry_digest_chain'")
    db.close()
    store = SQLiteCheckpointStore(path)
    try:
        assert (await store.load_session("older")) is not None
        found = stored_chain(path, "older")
        assert found == chain_of(session.memory.entries)
        assert found is not None and found.rows
    finally:
        await store.close()


async def test_rows_written_in_the_older_chain_form_continue_the_chain(tmp_path: Path) -> None:
    """Rows from before the rows-only form (``hosted:summary:key digest:rows digest``)
    carry the same rows digest last: appending continues the chain, and a process's
    decoded entries are still reused and still right."""
    from nonoka.store.sqlite import entry_cache

    path = tmp_path / "s.db"
    store = SQLiteCheckpointStore(path)
    try:
        session = Session("older-form")
        for n in range(3):
            session.memory.append(MemoryEntry.make("user", f"q {n}"))
            session.memory.append(MemoryEntry.assistant(f"a {n}"))
        session.revision = await store.save_session(session.to_state())
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("UPDATE session_entries SET key_chain = seq || ':0:' || "
                   "printf('%032d', seq) || ':' || key_chain")
        db.close()
        entry_cache.clear()
        loaded = await store.load_session("older-form")
        assert loaded is not None and list(loaded.memory_entries) == list(session.memory.entries)
        session.memory.append(MemoryEntry.make("user", "q 3"))
        session.revision = await store.save_session(session.to_state())
        assert stored_chain(path, "older-form") == chain_of(session.memory.entries)
        again = await store.load_session("older-form")
        assert again is not None and list(again.memory_entries) == list(session.memory.entries)
        assert again.memory_entries[0] is loaded.memory_entries[0]  # reused, not decoded
    finally:
        await store.close()
