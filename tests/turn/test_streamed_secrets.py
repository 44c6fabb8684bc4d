"""A streamed answer is journaled in pieces, each the answer so far masked whole: no
piece may hold part of a credential, or the stored timeline (and every export of it)
would hold the part the mask did not see (``test_split_credentials`` has the splits
that did). ``nonoka.redact.settled`` says where the masked text becomes final."""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka.events import TextDelta
from nonoka.redact import SETTLE_LINE, redact_text, settled
from nonoka.store.project import open_project_stores
from nonoka.turn.journal import PARTIAL_BYTES, Journal
from nonoka.turn.partial import unfinished_answers

KEY = "sk-proj-" + "Zq8vT2mL" * 6
PEM = ("-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEowIBAAKCAQEA7bq\n" * 200
       + "-----END RSA PRIVATE KEY-----\n")
ANSWERS = {
    "token on a long line": "word " * (PARTIAL_BYTES // 5 - 3) + f"the key {KEY} works",
    "password to the line's end": "x" * (PARTIAL_BYTES - 20) + "\npassword: correct horse "
                                  "battery staple\nmore",
    "key block": "here it is:\n" + PEM + "done",
    "bearer header": "y " * (PARTIAL_BYTES // 2 - 6) + "Authorization: Bearer "
                     "abcdefgh12345678ijkl\n",
}


def _deltas(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 7, 64])
@pytest.mark.parametrize("name", list(ANSWERS))
async def test_no_stored_piece_holds_part_of_a_secret(tmp_path: Path, name: str,
                                                      size: int) -> None:
    answer = ANSWERS[name]
    assert redact_text(answer) != answer  # the whole answer holds a secret
    stores = open_project_stores(tmp_path)
    try:
        book = Journal(stores, title="streamed")
        book.start("s")
        for piece in _deltas(answer, size):
            await book.on_event(TextDelta(piece))
        events = await stores.events.list_events("s", limit=10_000)
    finally:
        await stores.close()
    pieces = [e.data["text"] for e in events if e.kind == "partial_answer"]
    assert pieces, "nothing was journaled"
    for secret in (KEY, "horse", "MIIEowIBAAKCAQEA7bq", "abcdefgh12345678ijkl"):
        assert not any(secret in piece for piece in pieces), (name, size, pieces[-3:])
    (_, streamed), = unfinished_answers(events)
    # what masking the answer whole gives, up to what it ends in (it may go on)
    assert redact_text(answer).startswith(redact_text(streamed.text)), (name, size)


def test_the_cut_is_never_inside_a_line_or_an_open_block() -> None:
    assert settled("first line\nsecond li") == len("first line\n")
    assert settled("no break yet") == 0
    long = "a " * SETTLE_LINE + "tok"
    assert settled(long) == len(long) - 3
    open_block = "ok\n-----BEGIN PRIVATE KEY-----\nMIIE\n"
    assert settled(open_block) == 3
    closed = open_block + "-----END PRIVATE KEY-----\n"
    assert settled(closed) == len(closed)
    putty = "Private-Lines: 2\nAAAA\n"
    assert settled("x\n" + putty) == 2


@pytest.mark.parametrize("end", ["error", "finish"])
async def test_an_answer_a_turn_ends_mid_stream_is_journaled_to_its_last_piece(
        tmp_path: Path, end: str) -> None:
    """A stream that breaks (an error) or a turn cancelled mid-answer: the process is
    alive, so what streamed since the last piece (under 2 KB and 250 ms: not journaled
    yet) is written before the turn's last entry, and the interrupted answer is whole."""
    answer = "first line\nthe second line, cut short at"
    stores = open_project_stores(tmp_path)
    try:
        book = Journal(stores, title="cut")
        book.start("s")
        for piece in _deltas(answer, 5):
            await book.on_event(TextDelta(piece))
        if end == "error":
            await book.error("model_error", "the stream ended early")
        else:
            await book.finish("cancelled", refresh=False)
        events = await stores.events.list_events("s", limit=100)
    finally:
        await stores.close()
    assert [e.kind for e in events][-2:] == ["partial_answer", end]
    (_, cut), = unfinished_answers(events)
    assert cut.text == answer and cut.ended_by == end
