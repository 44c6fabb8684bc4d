"""On generated histories, ``classify``'s shortcut answers as the full comparison does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.bridge.reconcile import classify, compare
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message, ToolCall

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


@settings(max_examples=600, deadline=None)
@given(cases())
def test_the_text_for_text_shortcut_classifies_as_the_full_comparison(
        case: tuple[list[MemoryEntry], list[Message]]) -> None:
    stored, host = case
    assert classify(stored, host) == compare(stored, host)
