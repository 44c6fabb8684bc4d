"""What every store must do with branches: ``Runner.fork_session`` and ``rewind_session``.

``BranchingSuite`` needs the ``engine`` fixture of ``CheckpointStoreSuite``. A store that
implements ``BranchingStore`` shares the parent's entries; one that does not gets a copy
from the runner. Either way a branch must load as the parent's first entries, stay intact
whatever the parent does next (appends, a rewrite after compaction, deletion), and carry
the parent's ledger.
"""

from __future__ import annotations

import pytest

from nonoka import MemoryEntry, Runner, RuntimeUsage, Session, SessionState, SessionStatus, ToolCall
from nonoka.errors import ConfigurationError, SessionConflictError
from nonoka.store.base import BranchingStore, CheckpointStore
from nonoka.testing.conformance.harness import StoreHarness


def _conversation(turns: int) -> list[MemoryEntry]:
    entries = [MemoryEntry.make("system", "be brief")]
    for i in range(turns):
        entries += [MemoryEntry.make("user", f"question {i}"),
                    MemoryEntry.assistant(f"answer {i}")]
    return entries


async def _stored(store: CheckpointStore, entries: list[MemoryEntry], **usage: float) -> str:
    session = Session("parent-" + str(len(entries)) + "-" + str(id(entries)))
    for entry in entries:
        session.memory.append(entry)
    session.status = SessionStatus.COMPLETED
    session.turn_count = sum(1 for e in entries if e.role == "user")
    if usage:
        session.runtime = session.runtime.model_copy(update={"usage": RuntimeUsage(**usage)})
    session.revision = await store.save_session(session.to_state())
    return session.session_id


async def _load(store: CheckpointStore, session_id: str) -> SessionState:
    state = await store.load_session(session_id)
    assert state is not None, session_id
    return state


async def _append(store: CheckpointStore, session_id: str, *entries: MemoryEntry) -> None:
    session = Session.from_state(await _load(store, session_id))
    for entry in entries:
        session.memory.append(entry)
    await store.save_session(session.to_state())


def _texts(state: SessionState) -> list[str]:
    return [e.content for e in state.memory_entries]


@pytest.mark.asyncio
class BranchingSuite:
    """Forks and rewinds on the store under test."""

    @pytest.fixture
    def store(self, engine: StoreHarness) -> CheckpointStore:
        return engine.store

    async def test_a_fork_at_the_end_holds_the_whole_conversation(
            self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(3))
        child = await Runner(store).fork_session(parent)
        branch, original = await _load(store, child), await _load(store, parent)
        assert _texts(branch) == _texts(original)
        assert (branch.forked_from, branch.fork_point) == (parent, 7)
        assert branch.revision == 1 and branch.session_id != parent
        assert (original.forked_from, original.fork_point) == (None, None)

    async def test_a_fork_in_the_middle_holds_the_first_entries(
            self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(5))
        child = await Runner(store).fork_session(parent, at=5)
        assert _texts(await _load(store, child)) == _texts(await _load(store, parent))[:5]

    async def test_parent_and_branch_go_on_independently(self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(2))
        child = await Runner(store).fork_session(parent, at=3)
        await _append(store, parent, MemoryEntry.make("user", "parent goes on"))
        await _append(store, child, MemoryEntry.make("user", "branch goes on"),
                      MemoryEntry.assistant("branch answer"))
        assert _texts(await _load(store, parent))[-2:] == ["answer 1", "parent goes on"]
        assert _texts(await _load(store, child)) == [
            "be brief", "question 0", "answer 0", "branch goes on", "branch answer"]

    async def test_a_branch_of_a_branch_reads_through_both(self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(4))
        child = await Runner(store).fork_session(parent, at=7)
        await _append(store, child, MemoryEntry.make("user", "in the branch"))
        grandchild = await Runner(store).fork_session(child, at=8)
        await _append(store, grandchild, MemoryEntry.assistant("in the grandchild"))
        texts = _texts(await _load(store, grandchild))
        assert texts == [*_texts(await _load(store, parent))[:7], "in the branch",
                         "in the grandchild"]
        shallow = await Runner(store).fork_session(child, at=2)
        assert _texts(await _load(store, shallow)) == ["be brief", "question 0"]

    async def test_a_branch_survives_its_parent_rewriting_and_deleting(
            self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(3))
        child = await Runner(store).fork_session(parent, at=5)
        grandchild = await Runner(store).fork_session(child)
        before = _texts(await _load(store, child))
        session = Session.from_state(await _load(store, parent))
        session.memory = type(session.memory)([MemoryEntry.make("user", "compacted")],
                                              generation=session.memory.generation + 1)
        await store.save_session(session.to_state())
        assert _texts(await _load(store, parent)) == ["compacted"]
        assert _texts(await _load(store, child)) == before
        await store.delete_session(parent)
        assert await store.load_session(parent) is None
        assert _texts(await _load(store, child)) == before
        assert _texts(await _load(store, grandchild)) == before
        await store.delete_session(child)
        assert _texts(await _load(store, grandchild)) == before

    async def test_a_branch_may_rewrite_itself(self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(3))
        child = await Runner(store).fork_session(parent, at=5)
        session = Session.from_state(await _load(store, child))
        session.memory = type(session.memory)([MemoryEntry.make("user", "short")],
                                              generation=session.memory.generation + 1)
        await store.save_session(session.to_state())
        await _append(store, child, MemoryEntry.assistant("then more"))
        assert _texts(await _load(store, child)) == ["short", "then more"]
        assert len(_texts(await _load(store, parent))) == 7

    async def test_a_branch_keeps_the_ledger_and_is_settled(self, store: CheckpointStore) -> None:
        entries = [*_conversation(1), MemoryEntry.assistant("", [ToolCall(id="c1", name="x")])]
        parent = await _stored(store, entries, input_tokens=600, output_tokens=300, tool_calls=4)
        at_end = await _load(store, await Runner(store).fork_session(parent))
        assert at_end.runtime_state.usage.total_tokens == 900
        assert at_end.runtime_state.usage.tool_calls == 4
        assert at_end.status == SessionStatus.PAUSED  # the call waits for a result
        earlier = await _load(store, await Runner(store).fork_session(parent, at=3))
        assert earlier.status == SessionStatus.COMPLETED
        assert earlier.runtime_state.usage.total_tokens == 900
        assert earlier.turn_count == 1

    async def test_a_rewind_is_a_branch_at_an_earlier_entry(self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(5))
        child = await Runner(store).rewind_session(parent, 3)
        assert _texts(await _load(store, child)) == ["be brief", "question 0", "answer 0"]
        assert len(_texts(await _load(store, parent))) == 11  # the tail stays stored

    async def test_bad_forks_are_refused_and_change_nothing(self, store: CheckpointStore) -> None:
        parent = await _stored(store, _conversation(1))
        with pytest.raises(ConfigurationError, match="not found"):
            await Runner(store).fork_session("no-such-session")
        for at in (-1, 4):
            with pytest.raises(ConfigurationError, match="outside"):
                await Runner(store).fork_session(parent, at=at)
        with pytest.raises(SessionConflictError):
            await Runner(store).fork_session(parent, new_session_id=parent)
        assert _texts(await _load(store, parent)) == ["be brief", "question 0", "answer 0"]

    async def test_a_fork_of_a_parent_rewritten_meanwhile_conflicts(
            self, store: CheckpointStore) -> None:
        if not isinstance(store, BranchingStore):
            pytest.skip("the store has no fork_session of its own: the runner copies")
        parent = await _stored(store, _conversation(2))
        state = await _load(store, parent)
        child = state.model_copy(update={"session_id": "branch-x", "revision": 0,
                                         "memory_entries": state.memory_entries[:3]})
        with pytest.raises(SessionConflictError):
            await store.fork_session(child, parent, 3, state.memory_generation + 1)
        with pytest.raises(SessionConflictError):
            await store.fork_session(child, "no-such-parent", 3, state.memory_generation)
        longer = child.model_copy(update={"memory_entries": list(state.memory_entries) * 2})
        with pytest.raises(SessionConflictError):  # the parent holds 5 entries, not 9
            await store.fork_session(longer, parent, 9, state.memory_generation)
        assert await store.load_session("branch-x") is None
