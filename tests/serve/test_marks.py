"""``serve.marks``: what a stored conversation holds that a request treats apart (custom
tools' calls, ``additional_tools`` items), found by a pass that resumes where the last
stopped, and never a stale answer when the conversation is not the one it went over."""

from __future__ import annotations

from typing import Any

from nonoka.llm.responses import CUSTOM_CALL, OPENAI_RESPONSES
from nonoka.serve.additional import ADDITIONAL
from nonoka.serve.marks import Marks, marks_of
from nonoka.state.entries import MemoryEntry
from nonoka.state.prefix_memo import SHORT, PrefixMemo


def turn(n: int) -> list[MemoryEntry]:
    return [MemoryEntry.make("user", f"question {n}"), MemoryEntry.make("assistant", f"answer {n}")]


def custom_call() -> MemoryEntry:
    call: dict[str, Any] = {"id": "call_1", "name": "apply_patch", "arguments": "*** Begin",
                            "provider_metadata": {OPENAI_RESPONSES: {"type": CUSTOM_CALL}}}
    return MemoryEntry.make("assistant", "", tool_calls=[call])


def function_call() -> MemoryEntry:
    call = {"id": "call_2", "name": "read", "arguments": "{}"}
    return MemoryEntry.make("assistant", "", tool_calls=[call])


def carrier() -> MemoryEntry:
    item = {"type": ADDITIONAL, "role": "developer", "tools": [{"type": "custom", "name": "exec"}]}
    return MemoryEntry.make("system", "[]", provider_metadata={OPENAI_RESPONSES: {"item": item}})


def history(turns: int) -> list[MemoryEntry]:
    return [entry for n in range(turns) for entry in turn(n)]


def test_the_marks_of_a_conversation() -> None:
    plain = history(3)
    assert marks_of(plain) == Marks()
    assert marks_of([*plain, function_call()]) == Marks()
    assert marks_of([*plain, custom_call()]).custom_calls
    held = carrier()
    assert marks_of([held, *plain]) == Marks(carriers=(held,))


def test_a_growing_conversation_is_read_from_where_the_last_pass_stopped() -> None:
    memo: PrefixMemo[Marks] = PrefixMemo()
    entries = history(SHORT)
    assert marks_of(entries, memo) == Marks()
    held = carrier()
    entries = [*entries, held, *turn(99)]
    assert marks_of(entries, memo) == Marks(carriers=(held,))
    # resumed, not reread: an entry changed in place behind the kept point is not seen
    entries[1].metadata["tool_calls"] = custom_call().metadata["tool_calls"]
    entries = [*entries, *turn(100)]
    assert marks_of(entries, memo) == Marks(carriers=(held,))
    entries = [*entries, custom_call()]
    assert marks_of(entries, memo) == Marks(custom_calls=True, carriers=(held,))


def test_another_conversation_is_read_whole() -> None:
    memo: PrefixMemo[Marks] = PrefixMemo()
    with_call = [*history(SHORT), custom_call()]
    assert marks_of(with_call, memo).custom_calls
    other = history(SHORT + 1)  # not a continuation of the kept one
    assert marks_of(other, memo) == Marks()
    branch = [*with_call[:SHORT], *turn(7)]  # a branch from before the call
    assert marks_of(branch, memo) == Marks()
