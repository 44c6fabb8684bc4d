"""What every engine must do with the files in entries: store each once, give it back
byte for byte.

An entry's ``metadata["parts"]`` may hold files (``{"type": "file", "media_type",
"data": <base64>, "filename"?}``). Whatever a store does with their bytes, a load must
give back the parts exactly as saved. nonoka's engines store each file once, by digest
(``sha256:`` and the hex SHA-256 of its bytes), however many entries, branches and
sessions hold it, and delete it with the last entry that refers to it; ``MediaSuite``
checks both. It needs an ``engine`` fixture that is a ``MediaHarness``: a ``RowsHarness``
with back doors into the stored files, written by the engine's author. A store with the
``MediaStore`` capability (``nonoka.store.base``) also serves a file by its digest.
"""

from __future__ import annotations

import base64
import hashlib
import random
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nonoka import MemoryEntry, Runner, Session, SessionState, ToolCall
from nonoka.errors import CorruptSessionError
from nonoka.store.base import BranchingStore, CheckpointStore, MediaStore
from nonoka.testing.conformance import states
from nonoka.testing.conformance.harness import MediaHarness


def payload(size: int, seed: int = 0) -> bytes:
    """``size`` reproducible, incompressible bytes."""
    return random.Random(seed).randbytes(size)


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_part(data: bytes, media_type: str = "image/png", **fields: Any) -> dict[str, Any]:
    return {"type": "file", "media_type": media_type,
            "data": base64.b64encode(data).decode(), **fields}


def with_files(role: Literal["system", "user", "tool"], text: str, *files: dict[str, Any],
               **metadata: Any) -> MemoryEntry:
    """An entry of ``role`` whose parts are ``text`` and ``files`` (as a session stores
    them: a user's message, a system prompt, a tool's result)."""
    return MemoryEntry.make(role, text, parts=[{"type": "text", "text": text}, *files],
                            **metadata)


IMAGE = payload(300_000, 1)
SHOT = file_part(IMAGE, filename="shot.png")


async def _saved(store: CheckpointStore, entries: list[MemoryEntry],
                 session_id: str | None = None) -> SessionState:
    state = states.minimal(session_id, memory_entries=entries)
    return states.stored_as(state, await store.save_session(state))


async def _load(store: CheckpointStore, session_id: str) -> SessionState:
    state = await store.load_session(session_id)
    assert state is not None, session_id
    return state


async def _append(store: CheckpointStore, session_id: str,
                  *entries: MemoryEntry) -> SessionState:
    state = await _load(store, session_id)
    grown = state.model_copy(update={"memory_entries": [*state.memory_entries, *entries]})
    return states.stored_as(grown, await store.save_session(grown))


def _conversation() -> list[MemoryEntry]:
    """A system prompt with a PDF, a user's screenshot, a tool that read two files, and
    a user who sends the screenshot again."""
    call = ToolCall(id="call_1", name="read_files", arguments='{"paths": ["a.png", "b.txt"]}')
    return [
        with_files("system", "the spec", file_part(payload(5_000, 2), "application/pdf",
                                                   filename="spec.pdf")),
        with_files("user", "what is wrong here?", SHOT),
        MemoryEntry.assistant("", [call]),
        with_files("tool", "two files", file_part(payload(1_000, 3), filename="a.png"),
                   file_part(b"hello\n", "text/plain", filename="b.txt"),
                   tool_call_id="call_1", tool_name="read_files"),
        MemoryEntry.assistant("the button is cut off"),
        with_files("user", "and now?", SHOT),
    ]


@pytest.mark.asyncio
class MediaSuite:
    """Files in entries, on the store under test."""

    @pytest.fixture
    def store(self, engine: MediaHarness) -> CheckpointStore:
        return engine.store

    # -- round trips: a load gives back the parts as saved, byte for byte

    async def test_files_round_trip_byte_for_byte(self, engine: MediaHarness) -> None:
        entries = _conversation()
        state = await _saved(engine.store, entries)
        for store in (engine.store, await engine.reopen()):
            loaded = await _load(store, state.session_id)
            assert loaded == state
            assert [e.metadata for e in loaded.memory_entries] == [e.metadata for e in entries]
            assert loaded.memory_entries[1].metadata["parts"][1]["data"] == SHOT["data"]
            assert loaded.memory_entries[1].to_message().parts == entries[1].to_message().parts

    async def test_a_row_holds_a_reference_and_the_file_is_stored_once(
            self, engine: MediaHarness) -> None:
        state = await _saved(engine.store, _conversation())
        rows = engine.dump(state.session_id)
        assert rows is not None
        assert all(SHOT["data"][:64] not in row for row in rows.entries)
        assert digest(IMAGE) in rows.entries[1] and digest(IMAGE) in rows.entries[5]
        stored = engine.stored_media()
        assert stored[digest(IMAGE)] == len(IMAGE)
        assert stored[digest(b"hello\n")] == 6
        assert len(stored) == 4  # the screenshot twice, the PDF, two files of the tool

    async def test_the_same_bytes_are_one_file_across_turns_and_sessions(
            self, engine: MediaHarness) -> None:
        first = await _saved(engine.store, [MemoryEntry.make("system", "be brief")])
        for turn in range(5):
            await _append(engine.store, first.session_id,
                          with_files("user", f"again {turn}", SHOT),
                          MemoryEntry.assistant(f"answer {turn}"))
        other = await _saved(engine.store, [with_files("user", "the same picture",
                                                       {**SHOT, "filename": "copy.png"})])
        assert engine.stored_media() == {digest(IMAGE): len(IMAGE)}
        loaded = await _load(engine.store, first.session_id)
        assert [e.metadata["parts"][1]["data"] for e in loaded.memory_entries[1::2]
                ] == [SHOT["data"]] * 5
        copy = (await _load(engine.store, other.session_id)).memory_entries[0]
        assert copy.metadata["parts"][1] == {**SHOT, "filename": "copy.png"}

    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.lists(st.binary(max_size=300), min_size=1, max_size=3),
           media_type=st.sampled_from(["image/png", "image/jpeg", "application/pdf",
                                       "text/plain", "application/octet-stream"]),
           name=st.none() | st.text(max_size=20))
    async def test_generated_files_round_trip(self, store: CheckpointStore,
                                              data: list[bytes], media_type: str,
                                              name: str | None) -> None:
        extra = {} if name is None else {"filename": name}
        files = [file_part(d, media_type, **extra) for d in data]
        state = await _saved(store, [with_files("user", "files", *files),
                                     with_files("tool", "more", *files[::-1],
                                                tool_call_id="x")])
        assert await _load(store, state.session_id) == state

    async def test_parts_that_are_not_plain_inline_files_stay_as_they_are(
            self, engine: MediaHarness) -> None:
        odd = [
            {"type": "file", "media_type": "image/png", "data": "QR=="},  # not canonical
            {"type": "file", "media_type": "image/png", "data": "aGVsbG8=\n"},
            {"type": "file", "media_type": "image/png", "url": "https://example.com/a.png"},
            {"type": "file", "media_type": "image/png", "data": "aGk=", "size": 7},
            {"type": "file", "media_type": "image/png", "data": "aGk=", "media": "mine"},
            {"type": "file", "data": "aGk="},
            {"type": "text", "text": "plain", "data": "aGk="},
        ]
        entries = [MemoryEntry.make("user", "odd parts", parts=odd),
                   MemoryEntry(role="user", content="parts that are no list",
                               metadata={"parts": {"type": "file", "data": "aGk="}})]
        state = await _saved(engine.store, entries)
        assert await _load(engine.store, state.session_id) == state
        assert engine.stored_media() == {}

    async def test_an_empty_file_round_trips(self, store: CheckpointStore) -> None:
        state = await _saved(store, [with_files("user", "empty", file_part(b""))])
        assert await _load(store, state.session_id) == state

    # -- rows written before files were stored apart still load as they are

    async def test_an_inline_row_written_before_loads_unchanged(
            self, engine: MediaHarness) -> None:
        state = await _saved(engine.store, [MemoryEntry.make("system", "be brief"),
                                            MemoryEntry.make("user", "placeholder")])
        inline = with_files("user", "an older row", SHOT)
        engine.corrupt_entry(state.session_id, 1, inline.model_dump_json())
        loaded = await _load(engine.store, state.session_id)
        assert loaded.memory_entries[1] == inline
        grown = await _append(engine.store, state.session_id, MemoryEntry.assistant("seen"))
        assert await _load(engine.store, state.session_id) == grown

    # -- files go with the last entry that refers to them

    async def test_a_file_goes_with_the_last_session_referring_to_it(
            self, engine: MediaHarness) -> None:
        a = await _saved(engine.store, [with_files("user", "a", SHOT)])
        b = await _saved(engine.store, [with_files("user", "b", SHOT),
                                        with_files("user", "only b", file_part(b"b only"))])
        await engine.store.delete_session(a.session_id)
        assert set(engine.stored_media()) == {digest(IMAGE), digest(b"b only")}
        assert await _load(engine.store, b.session_id) == b
        await engine.store.delete_session(b.session_id)
        assert engine.stored_media() == {}

    async def test_a_compaction_keeps_the_files_it_keeps_and_drops_the_rest(
            self, engine: MediaHarness) -> None:
        old = file_part(payload(2_000, 4), filename="old.png")
        state = await _saved(engine.store, [with_files("user", "old", old),
                                            MemoryEntry.assistant("ok"),
                                            with_files("user", "new", SHOT)])
        compacted = state.model_copy(update={
            "memory_entries": [MemoryEntry.make("system", "summary"), state.memory_entries[2]],
            "memory_generation": state.memory_generation + 1})
        compacted = states.stored_as(compacted, await engine.store.save_session(compacted))
        assert engine.stored_media() == {digest(IMAGE): len(IMAGE)}
        assert await _load(engine.store, state.session_id) == compacted
        emptied = compacted.model_copy(update={"memory_entries": [],
                                               "memory_generation": 7})
        await engine.store.save_session(emptied)
        assert engine.stored_media() == {}

    # -- branches share the files of the entries they share

    async def test_branches_hold_their_parents_files_whatever_the_parent_does(
            self, engine: MediaHarness) -> None:
        store = engine.store
        session = Session(states.new_id())
        for entry in _conversation():
            session.memory.append(entry)
        session.revision = await store.save_session(session.to_state())
        parent = session.session_id
        whole = await Runner(store).fork_session(parent)
        early = await Runner(store).fork_session(parent, at=2)
        before = await _load(store, parent)
        assert (await _load(store, whole)).memory_entries == before.memory_entries
        assert (await _load(store, early)).memory_entries == before.memory_entries[:2]
        await _append(store, early, with_files("user", "mine", file_part(b"branch file")))
        stored = engine.stored_media()
        assert len(stored) == 5
        await store.delete_session(parent)
        assert (await _load(store, whole)).memory_entries == before.memory_entries
        assert (await _load(store, early)).memory_entries[:2] == before.memory_entries[:2]
        assert engine.stored_media() == stored
        await store.delete_session(whole)
        assert set(engine.stored_media()) == {digest(b"branch file"),
                                              digest(payload(5_000, 2)), digest(IMAGE)}
        await store.delete_session(early)
        assert engine.stored_media() == {}

    async def test_a_branch_reads_a_window_of_its_parents_files(
            self, store: CheckpointStore) -> None:
        if not isinstance(store, BranchingStore):
            # An optional capability; every bundled engine has it (tests/conformance).
            pytest.skip("the store has no load_entries of its own")
        state = await _saved(store, _conversation())
        child = await Runner(store).fork_session(state.session_id, at=4)
        assert await store.load_entries(child, 1, 4) == list(state.memory_entries[1:4])

    # -- damage is named, never guessed around

    async def test_a_reference_without_its_file_is_refused_untouched(
            self, engine: MediaHarness) -> None:
        state = await _saved(engine.store, [MemoryEntry.make("system", "be brief"),
                                            with_files("user", "look", SHOT)])
        engine.delete_media(digest(IMAGE))
        before = engine.dump(state.session_id)
        with pytest.raises(CorruptSessionError,
                           match=rf"{state.session_id}.*entry 1.*{digest(IMAGE)}"):
            await engine.store.load_session(state.session_id)
        assert engine.dump(state.session_id) == before

    # -- the optional capability: a file by its digest

    async def test_a_stored_file_is_served_by_its_digest(self, store: CheckpointStore) -> None:
        if not isinstance(store, MediaStore):
            # An optional capability; every bundled engine has it (tests/conformance).
            pytest.skip("the store does not serve files by digest (MediaStore)")
        await _saved(store, [with_files("user", "look", SHOT)])
        found = await store.load_media(digest(IMAGE))
        assert found is not None
        assert (found.digest, found.media_type, found.data) == (digest(IMAGE), "image/png",
                                                                IMAGE)
        assert await store.load_media(digest(b"never stored")) is None
