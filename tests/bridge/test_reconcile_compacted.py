"""After a compaction the summary is one more shared entry: where a host's history and
the compacted conversation part decides, on generated histories."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.bridge.reconcile import Lineage, classify, content_digest
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message

SUMMARY = "Summary of everything so far."


def _turns(n: int, tag: str) -> list[Message]:
    out = []
    for i in range(n):
        out += [Message(role="user", content=f"{tag} q{i}"),
                Message(role="assistant", content=f"{tag} a{i}")]
    return out


@settings(max_examples=80, deadline=None)
@given(before=st.integers(0, 4), after=st.integers(1, 6), cut=st.integers(0, 12),
       other=st.sampled_from(["undo", "edit"]))
def test_a_divergence_after_a_shared_summary_is_a_branch(before: int, after: int, cut: int,
                                                         other: str) -> None:
    """The stored conversation is the host's compacted one (its summary included); a
    host history that agrees past the summary and then differs is a divergence at that
    point — never an in-place compaction — and one that only adds is a continuation."""
    compacted = [Message(role="system", content="rules"),
                 *_turns(before, "old")[:1],
                 Message(role="user", content="What did we do so far?"),
                 Message(role="assistant", content=SUMMARY), *_turns(after, "new")]
    stored = [MemoryEntry.from_message(m) for m in compacted]
    summaries = {content_digest(SUMMARY)}
    summary_at = next(i for i, m in enumerate(compacted) if m.content == SUMMARY)
    keep = summary_at + 1 + cut % (len(compacted) - summary_at)
    if keep == len(compacted):
        host = [*compacted, Message(role="user", content="more")]
        assert classify(stored, host, summaries).lineage is Lineage.CONTINUATION
        return
    changed = Message(role="user", content=f"{other} instead")
    host = [*compacted[:keep], changed]
    result = classify(stored, host, summaries)
    if compacted[keep].role == "user" and keep == len(compacted) - 1:
        # The last stored message was never answered: the host replaced it.
        assert result.lineage is Lineage.EDITED
        return
    assert result.lineage is Lineage.DIVERGED, result
    assert result.point == keep
