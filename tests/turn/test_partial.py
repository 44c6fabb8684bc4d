"""Which streamed answers were left unfinished: the one rule `sessions show`, the Markdown
export and the ui share (``nonoka.turn.partial``)."""

from __future__ import annotations

from nonoka.store.records import EventRecord
from nonoka.turn.partial import unfinished_answers


def log(*kinds: str) -> list[EventRecord]:
    return [EventRecord(session_id="s", kind=kind, seq=n, at=float(n),
                        data={"text": f"<{n}>"} if kind == "partial_answer" else {})
            for n, kind in enumerate(kinds, 1)]


def test_pieces_a_stored_answer_follows_are_not_left_over() -> None:
    events = log("request", "partial_answer", "warning", "partial_answer", "model_call",
                 "finish")
    assert unfinished_answers(events) == []


def test_pieces_cut_short_are_whole_and_placed_where_they_were_cut() -> None:
    events = log("request", "partial_answer", "partial_answer", "error", "finish",
                 "request", "partial_answer", "model_call", "partial_answer", "request",
                 "partial_answer", "tool_call", "partial_answer")
    found = [(at, a.text, a.at, a.ended_by, a.process_ended)
             for at, a in unfinished_answers(events)]
    assert found == [(3, "<2><3>", 2.0, "error", False),
                     (9, "<9>", 9.0, "request", True),
                     (13, "<11><13>", 11.0, "", True)]
    assert unfinished_answers([]) == []


def test_a_piece_with_from_replaces_the_text_from_there() -> None:
    """The journal masks the answer whole as it grows: when the rest of a credential
    changes how its start was masked, a piece replaces the text from ``from`` on."""
    pieces = [{"text": "my key is "}, {"text": "[redacted] and wJal"},
              {"from": 25, "text": "[redacted], keep it"}, {"text": " safe"},
              {"from": "x", "text": "!"}, {"from": True, "text": "?"}]
    events = [EventRecord(session_id="s", kind="partial_answer", seq=n, at=float(n), data=d)
              for n, d in enumerate(pieces, 1)]
    (_, answer), = unfinished_answers(events)
    assert answer.text == "my key is [redacted] and [redacted], keep it safe!?"
    assert answer.at == 1.0
