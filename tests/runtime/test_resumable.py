"""Passes that resume where the last call stopped give what a pass from the start gives.

``nonoka.state.prefix_memo`` lets the per-turn passes over a conversation (tool-call pairing,
token count, the host-history comparison, the wire text) read only what a longer
conversation adds. Generated sequences of conversations — growing, cut back, changed in
the middle, shared by identity or only equal — are fed to each pass in turn, and every
answer is held to a reference computed from scratch.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.bridge import reconcile
from nonoka.llm import openai
from nonoka.runtime.window import WorkingMemory
from nonoka.state.entries import EntrySnapshot, MemoryEntry, dangling_tool_calls
from nonoka.state.messages import Message, ToolCall
from nonoka.state.prefix_memo import SHORT, ConversationPasses, PrefixMemo


def test_resume_only_from_a_kept_prefix() -> None:
    memo: PrefixMemo[str] = PrefixMemo()
    long = list(range(SHORT + 5))
    assert memo.resume(long) is None
    memo.keep("state", long)
    assert memo.resume([*long, 1, 2]) == ((len(long),), "state")
    assert memo.resume(long) == ((len(long),), "state")
    assert memo.resume(long[:-1]) is None  # shorter
    assert memo.resume([-1, *long[1:], 3]) is None  # changed inside
    memo.keep("short", [1, 2, 3])  # too short to keep: the long one stays
    assert memo.resume([*long, 9]) == ((len(long),), "state")
    memo.keep("copied", long)
    long.append(7)  # the caller's list grows: the kept one does not
    assert memo.resume(long) == ((len(long) - 1,), "copied")
    assert memo.resume(EntrySnapshot(long)) == ((len(long) - 1,), "copied")  # type: ignore[arg-type]


def _call(i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name="run", arguments="{}")


_ENTRY = st.one_of(
    st.builds(lambda t: MemoryEntry.make("user", t), st.sampled_from(["a", "b  c", "d"])),
    st.builds(lambda t: MemoryEntry.assistant(t), st.sampled_from(["ok", "fine"])),
    st.builds(lambda ids: MemoryEntry.assistant("", [_call(i) for i in ids]),
              st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True)),
    st.builds(lambda i: MemoryEntry.tool_result(_call(i), "out"), st.integers(0, 3)),
    st.builds(lambda: MemoryEntry.make("system", "rules")),
)


def _reference_pairing(entries: list[MemoryEntry]) -> tuple[int | None, list[ToolCall]]:
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if entry.role == "assistant" and entry.metadata.get("tool_calls"):
            answered = {e.tool_call_id for e in entries[index + 1:] if e.role == "tool"}
            return index, [c for c in entry.tool_calls if c.id not in answered]
    return None, []


_STEP = st.tuples(st.sampled_from(["grow", "cut", "change", "copy", "same"]),
                  st.lists(_ENTRY, max_size=4), st.integers(0, 200))


@settings(max_examples=150, deadline=None)
@given(st.lists(_ENTRY, min_size=SHORT, max_size=SHORT + 20), st.lists(_STEP, max_size=8))
def test_pairing_and_token_count_resume_exactly(base: list[MemoryEntry],
                                                steps: list[Any]) -> None:
    passes = ConversationPasses()  # as one process keeps them, turn after turn
    entries = list(base)
    for kind, added, at in steps:
        if kind == "grow":
            entries = [*entries, *added]
        elif kind == "cut":
            entries = entries[:max(0, len(entries) - 1 - at % 5)]
        elif kind == "change" and entries:
            entries = list(entries)
            entries[at % len(entries)] = MemoryEntry.make("user", f"changed {at}")
        elif kind == "copy":  # equal entries that are other objects
            entries = [e.model_copy() for e in entries]
        reference = _reference_pairing(entries)
        assert dangling_tool_calls(entries, passes.pairing) == reference
        assert dangling_tool_calls(EntrySnapshot(entries), passes.pairing) == reference
        assert dangling_tool_calls(entries) == reference
        assert WorkingMemory(entries, passes=passes).dangling_tool_calls() == reference
        tokens = sum(e.tokens for e in entries)
        assert WorkingMemory(entries, passes=passes).total_tokens == tokens
        assert WorkingMemory(entries).total_tokens == tokens
        wire = ", ".join(openai.encoded_messages([e.to_message() for e in entries]))
        assert openai.wire_text(EntrySnapshot(entries), passes.wire) == wire
        assert openai.wire_text(EntrySnapshot(entries)) == wire


def _as_message(entry: MemoryEntry) -> Message:
    return entry.to_message()


@settings(max_examples=150, deadline=None)
@given(st.lists(_ENTRY, min_size=SHORT, max_size=SHORT + 10), st.lists(_STEP, max_size=6))
def test_classification_resumes_exactly(base: list[MemoryEntry], steps: list[Any]) -> None:
    """A host resending a growing (or edited) history: ``classify`` with its resumed
    shortcut answers as the full comparison does, turn after turn."""
    memo = reconcile.HostComparison()
    stored = list(base)
    host = [_as_message(e) for e in stored]
    for kind, added, at in steps:
        if kind == "grow":
            stored = [*stored, *added]
            host = [*host, *(_as_message(e) for e in added)]
        elif kind == "cut":
            host = host[:max(0, len(host) - 1 - at % 5)]
        elif kind == "change" and host:
            host = list(host)
            host[at % len(host)] = Message(role="user", content=f"changed {at}")
        elif kind == "copy":
            host = [m.model_copy() for m in host]
        got = reconcile.classify(EntrySnapshot(stored), host, memo=memo)
        assert got == reconcile.compare(EntrySnapshot(stored), host)
        assert reconcile.classify(EntrySnapshot(stored), host) == got


def test_the_early_requests_text_is_shared_only_for_the_conversation_it_was_sent_for(
) -> None:
    """The bridge's early request encoded the stored conversation already; the turn that
    loads that very conversation (same session, length, generation) takes its text."""
    from nonoka.bridge.early import Dispatched
    from nonoka.runtime.session import Session

    session = Session("s1")
    for i in range(SHORT):
        session.memory.append(MemoryEntry.make("user", f"m{i}"))
    sent = '{"role": "user", "content": "as sent"}'

    def dispatched(**changes: Any) -> Dispatched:
        args: dict[str, Any] = {"session_id": "s1", "count": SHORT + 1, "stored": SHORT,
                                "generation": 0, **changes}
        early = Dispatched(args["session_id"], "owner", None,  # type: ignore[arg-type]
                           sent + ', {"role": "user", "content": "new"}', args["count"],
                           args["stored"], {"generation": args["generation"]}, len(sent))
        return early

    fresh = openai.wire_text(session.memory.entries)
    for other in ({"session_id": "s2"}, {"stored": SHORT - 1}, {"generation": 1}):
        wire: PrefixMemo[str] = PrefixMemo()
        dispatched(**other).share_text(session, wire)
        assert openai.wire_text(session.memory.entries, wire) == fresh
    wire = PrefixMemo()
    dispatched().share_text(session, wire)
    session.memory.append(MemoryEntry.make("user", "new"))
    assert openai.wire_text(session.memory.entries, wire) == (
        sent + ', {"role": "user", "content": "new"}')
