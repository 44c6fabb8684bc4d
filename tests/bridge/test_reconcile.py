"""The lineage classification of a host's history against a stored conversation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nonoka.bridge.reconcile import EditReason, Lineage, classify, content_digest
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message, ToolCall


def u(text: str) -> Message:
    return Message(role="user", content=text)


def a(text: str, *calls: str) -> Message:
    return Message(role="assistant", content=text,
                   tool_calls=[ToolCall(id=c, name="bash", arguments='{"x": 1}') for c in calls]
                   or None)


def t(call: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call)


SYSTEM = Message(role="system", content="You are OpenCode.")


def stored(*messages: Message) -> list[MemoryEntry]:
    return [MemoryEntry.from_message(m) for m in messages]


FIVE = [u("one"), a("1"), u("two"), a("2", "c1"), t("c1", "out"), a("2b"), u("three"),
        a("3"), u("four"), a("4"), u("five"), a("5")]


def test_continuation_appends_only_what_is_new():
    got = classify(stored(SYSTEM, *FIVE), [SYSTEM, *FIVE, u("six")])
    assert got.lineage is Lineage.CONTINUATION
    assert got.point == len(FIVE) + 1
    assert got.new == [u("six")]
    assert not got.ahead


def test_a_changed_system_prompt_and_reformatted_arguments_still_continue():
    host = [Message(role="system", content="You are OpenCode. Today is Monday."),
            *[m if m.role != "assistant" or not m.tool_calls else
              Message(role="assistant", content=m.content + "  ",
                      tool_calls=[ToolCall(id="c1", name="bash", arguments='{"x":1}')])
              for m in FIVE], u("six")]
    assert classify(stored(SYSTEM, *FIVE), host).lineage is Lineage.CONTINUATION


def test_a_failed_turn_resent_with_a_new_message_stores_only_the_new_one():
    keep = stored(u("one"), a("1"), u("second"))  # "second" failed: no answer stored
    got = classify(keep, [u("one"), a("1"), u("second"), u("third")])
    assert got.lineage is Lineage.CONTINUATION
    assert got.new == [u("third")]


def test_an_unanswered_message_the_host_dropped_is_replaced_in_place():
    keep = stored(u("one"), a("1"), u("second"))
    got = classify(keep, [u("one"), a("1"), u("third")])
    assert got.lineage is Lineage.EDITED
    assert got.reason is EditReason.UNANSWERED_REPLACED
    assert got.host_view == [u("one"), a("1")]
    assert got.new == [u("third")]
    assert got.edited == [2]


def test_a_pruned_tool_output_is_an_edit_in_place():
    host = [m if m.role != "tool" else t("c1", "[Old tool result content cleared]")
            for m in FIVE]
    got = classify(stored(SYSTEM, *FIVE), [SYSTEM, *host, u("six")])
    assert got.lineage is Lineage.EDITED
    assert got.reason is EditReason.TOOL_OUTPUT_PRUNED
    assert got.edited == [5]  # the system entry is index 0
    assert got.host_view == [SYSTEM, *host]
    assert got.new == [u("six")]


def test_a_compaction_summary_the_host_asked_for_is_an_edit_in_place():
    summary = "We talked about one to five."
    host = [SYSTEM, u("What did we do so far?"), a(summary), u("six")]
    got = classify(stored(SYSTEM, *FIVE), host, summaries={content_digest(summary)})
    assert got.lineage is Lineage.EDITED
    assert got.reason is EditReason.HISTORY_COMPACTED
    assert got.host_view == host[:3]
    assert got.new == [u("six")]
    # Without the recorded summary the same history is another conversation.
    assert classify(stored(SYSTEM, *FIVE), host).lineage is Lineage.UNRELATED


def test_a_summary_in_the_users_words_that_ends_the_history_is_new():
    """Codex compacting mid-turn sends its kept messages, then the summary, and nothing
    after it: the model goes on from the summary, which the turn must store."""
    summary = "[Summary of the earlier conversation]\nWe ran echo one."
    host = [SYSTEM, u("one"), u(summary)]
    got = classify(stored(SYSTEM, *FIVE), host, summaries={content_digest(summary)})
    assert got.lineage is Lineage.EDITED
    assert got.reason is EditReason.HISTORY_COMPACTED
    assert got.host_view == [SYSTEM, u("one")]
    assert got.new == [u(summary)]


def test_a_revert_to_turn_two_branches_where_the_histories_part():
    host = [SYSTEM, *FIVE[:5], a("2b"), u("three, differently")]
    got = classify(stored(SYSTEM, *FIVE), host)
    assert got.lineage is Lineage.DIVERGED
    assert got.point == 7  # system + one, 1, two, 2(c1), out, 2b
    assert got.new == [u("three, differently")]


def test_turns_the_host_never_saw_make_a_branch():
    seen_by_host = FIVE[:8]
    got = classify(stored(*FIVE), [*seen_by_host, u("what next?")])
    assert got.lineage is Lineage.DIVERGED
    assert got.point == 8


def test_a_different_first_message_is_unrelated():
    assert classify(stored(*FIVE), [u("hello"), a("hi"), u("x")]).lineage is Lineage.UNRELATED


def test_a_host_ahead_of_the_store_continues_with_its_answers():
    got = classify(stored(*FIVE[:2]), [*FIVE, u("six")])
    assert got.lineage is Lineage.CONTINUATION
    assert got.ahead


def test_nonokas_own_summary_is_skipped_when_aligning():
    summary = MemoryEntry.make("user", "[Summary]", summary=True, replaces=4)
    keep = [summary, *stored(*FIVE[4:])]
    got = classify(keep, [*FIVE, u("six")])
    assert got.lineage is Lineage.CONTINUATION
    assert got.new == [u("six")]


messages = st.lists(st.sampled_from([u("x"), u("y"), a("p"), a("q"), a("r", "c9"),
                                     t("c9", "o")]), max_size=12)


@given(messages, messages)
def test_classification_agrees_with_a_plain_prefix_comparison(keep, host):
    """Whatever the histories, a continuation is exactly "stored is a prefix of the
    host's", and a branch point is where the plain comparison first differs."""
    got = classify(stored(*keep), host)
    prefix = 0
    while prefix < min(len(keep), len(host)) and keep[prefix] == host[prefix]:
        prefix += 1
    if prefix == len(keep) and (keep or host):
        assert got.lineage is Lineage.CONTINUATION
        assert got.new == host[prefix:]
    elif got.lineage is Lineage.DIVERGED:
        assert got.point == prefix
        assert got.new == host[prefix:]
    elif got.lineage is Lineage.UNRELATED:
        assert prefix == 0
    else:
        assert got.lineage is Lineage.EDITED
        assert got.reason in (EditReason.TOOL_OUTPUT_PRUNED, EditReason.UNANSWERED_REPLACED)
