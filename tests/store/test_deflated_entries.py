"""Entry rows kept deflated (``nonoka.store.sqlite.packing``): a long entry's JSON is a
blob, a short one stays text, both read back as the JSON that was saved; the digest
chain is over that JSON; and another program, which has no ``entry_text`` function,
can still add, change and delete rows, which the next catch-up indexes exactly."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.base import entry_json
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.database import open_database
from nonoka.store.sqlite.digests import Chain
from nonoka.store.sqlite.entries import catch_up, doc, new_block, pending
from nonoka.store.sqlite.packing import DICTIONARY, pack, unpack

LONG = "the quick brown fox jumps over a lazy dog while seven wizards pack boxes " * 8


def _rows(path: Path) -> list[tuple[str, object, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT typeof(entry_json), entry_json, key_chain "
                          "FROM session_entries ORDER BY doc").fetchall()
    db.close()
    return rows


async def test_long_entries_are_stored_deflated_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    entries = [MemoryEntry.make("user", "hi"), MemoryEntry.assistant(LONG + "naïve café"),
               MemoryEntry.make("user", LONG), MemoryEntry.assistant("ok")]
    state = SessionState(session_id="s", memory_entries=entries)
    store = SQLiteCheckpointStore(path)
    try:
        await store.save_session(state)
        rows = _rows(path)
        assert [kind for kind, _, _ in rows] == ["text", "blob", "blob", "text"]
        texts = [unpack(value) for _, value, _ in rows]
        assert texts == [entry_json(e) for e in entries]
        assert sum(len(v) for _, v, _ in rows if isinstance(v, bytes)) < sum(
            len(t.encode()) for t in texts[1:3]) / 3
        chain = Chain()  # over the JSON text, not the stored bytes
        for text, (_, _, stored) in zip(texts, rows, strict=True):
            chain = chain.add(text)
            assert stored == chain.stored()
        fresh = SQLiteCheckpointStore(path)  # no cache: every row decoded from the file
        try:
            loaded = await fresh.load_session("s")
            assert loaded is not None
            assert [e.content for e in loaded.memory_entries] == [e.content for e in entries]
            assert [e.content for e in await fresh.load_entries("s", 1, 3)] == [
                e.content for e in entries[1:3]]
        finally:
            await fresh.close()
    finally:
        await store.close()


def test_pack_keeps_short_or_incompressible_json_as_text() -> None:
    assert pack('{"role":"user","content":"hi"}') == '{"role":"user","content":"hi"}'
    noise = json.dumps({"content": zlib.compress(LONG.encode() * 3).hex()})
    assert isinstance(pack(noise), bytes) == (len(pack(noise)) < len(noise.encode()) - 16)
    packed = pack(json.dumps({"content": LONG}))
    assert isinstance(packed, bytes) and unpack(packed) == json.dumps({"content": LONG})
    # the header names the dictionary: a reader knows which one it needs
    assert int.from_bytes(packed[2:6], "big") == zlib.adler32(DICTIONARY)


def test_a_blob_that_is_not_a_stream_reads_as_damaged_text() -> None:
    """Another program's blob, or a damaged one, is not an exception where it is read:
    it comes back as text that does not decode, reported like any damaged row."""
    assert unpack(b"not zlib") == "not zlib"
    packed = pack(json.dumps({"content": LONG}))
    assert isinstance(packed, bytes)
    assert unpack(packed[:-3]) != json.dumps({"content": LONG})  # a cut stream
    unknown = packed[:2] + b"\x00\x00\x00\x01" + packed[6:]  # a dictionary it lacks
    assert unpack(unknown) == unknown.decode(errors="replace")


def _body_rows(db: sqlite3.Connection, word: str) -> set[int]:
    return {r[0] for r in db.execute("SELECT rowid FROM session_search WHERE "
                                     "session_search MATCH ?", (f'"{word}"',))}


def test_another_program_writes_rows_without_entry_text(tmp_path: Path) -> None:
    """A plain ``sqlite3`` connection deletes a deflated row and adds one in its place,
    changes another, changes and then deletes a third and appends one: no trigger needs
    ``entry_text``, and the next catch-up takes out exactly the words the index held
    and puts in the rows as they are."""
    path = tmp_path / "other.db"
    db = open_database(path)
    try:
        block = new_block(db)
        db.execute("INSERT INTO checkpoints (session_id, state_json, revision, entry_count,"
                   " memory_generation, created_at, updated_at, entry_block) "
                   "VALUES ('s', '{}', 1, 4, 0, 1, 1, ?)", (block,))
        for seq, word in enumerate(["okapi", "zebra", "lemur"]):
            db.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                       "VALUES (?, 's', ?, ?)", (doc(block, seq), seq,
                                                 pack(json.dumps({"content": f"{word} " + LONG}))))
        catch_up(db)
        assert _body_rows(db, "zebra") == {doc(block, 1)}
    finally:
        db.close()
    other = sqlite3.connect(path, isolation_level=None)  # no entry_text here
    try:
        other.execute("DELETE FROM session_entries WHERE doc = ?", (doc(block, 0),))
        other.execute("UPDATE session_entries SET entry_json = ? WHERE doc = ?",
                      ('{"content": "gnu"}', doc(block, 1)))
        other.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                      "VALUES (?, 's', 0, '{\"content\": \"ibis\"}')", (doc(block, 0),))
        other.execute("UPDATE session_entries SET entry_json = ? WHERE doc = ?",
                      ('{"content": "tapir"}', doc(block, 2)))  # changed, then deleted:
        other.execute("DELETE FROM session_entries WHERE doc = ?", (doc(block, 2),))
        other.execute("INSERT INTO session_entries (doc, session_id, seq, entry_json) "
                      "VALUES (?, 's', 3, '{\"content\": \"yak\"}')", (doc(block, 3),))
    finally:
        other.close()
    db = open_database(path)
    try:
        assert pending(db) == 4  # three changed places (two of them twice), one new row
        catch_up(db)
        assert pending(db) == 0
        db.execute("INSERT INTO session_search (session_search, rank) "
                   "VALUES ('integrity-check', 1)")
        assert _body_rows(db, "okapi") == set()
        assert _body_rows(db, "zebra") == set()
        assert _body_rows(db, "gnu") == {doc(block, 1)}
        assert _body_rows(db, "ibis") == {doc(block, 0)}
        assert _body_rows(db, "lemur") == _body_rows(db, "tapir") == set()
        assert _body_rows(db, "yak") == {doc(block, 3)}
    finally:
        db.close()


async def test_timeline_rows_are_stored_deflated_and_read_back(tmp_path: Path) -> None:
    """A turn's events: long ones deflated with the timeline's dictionary, short ones
    text; listed, summed (the usage summary reads them in SQL) and checked as before."""
    from nonoka.store.sqlite.records import SQLiteRecordStore

    path = tmp_path / "events.db"
    records = SQLiteRecordStore(path)
    try:
        request = {"source": "serve /v1/responses", "messages": 1, "model": "openai:m",
                   "stream": False, "store": True, "previous_response_id": None,
                   "tools": []}
        events: list[tuple[str, dict[str, Any]]] = [
            ("request", request), ("session", {"new": True}),
            ("model_call", {"model": "openai:m", "input_tokens": 10, "output_tokens": 133,
                            "cost_usd": 0.25})]
        await records.append_events("s", events)
        listed = await records.list_events("s")
        assert [(e.kind, e.data) for e in listed] == events
        summary = await records.usage_summary("s")
        assert (summary.model_calls, summary.input_tokens, summary.output_tokens,
                summary.cost_usd) == (1, 10, 133, 0.25)
    finally:
        await records.close()
    with sqlite3.connect(path) as db:
        kinds = db.execute("SELECT kind, typeof(data_json) FROM events ORDER BY seq").fetchall()
        assert kinds == [("request", "blob"), ("session", "text"), ("model_call", "blob")]
        with pytest.raises(sqlite3.IntegrityError):  # text must still be JSON
            db.execute("INSERT INTO events VALUES ('s', 9, 1, 'x', 'not json')")
    db.close()
