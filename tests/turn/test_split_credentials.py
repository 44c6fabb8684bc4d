"""A credential the journal's pieces split in two is still masked in the event log.

A streamed answer is logged in pieces (``partial_answer``); they are what ``sessions
show --json`` and the JSONL export print, and all that is left of an answer cut short.
Each piece is the answer so far masked whole (``nonoka.turn.journal``), so the rest of a
credential that streams after its start cannot leave either part in clear. Here the
credential's value straddles the 2 KB at which the first piece is logged (a long line:
pieces used to end at its last space), and the event log is read from the SQLite file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from nonoka.events import TextDelta
from nonoka.redact import redact_text
from nonoka.store.project import open_project_stores
from nonoka.store.sqlite.packing import unpack
from nonoka.turn.journal import PARTIAL_BYTES, Journal
from nonoka.turn.partial import unfinished_answers

AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
NETRC = "Tr5-netrc-Kx9"


def _first_piece(size: int) -> int:
    """Where the first piece ends when the answer streams ``size`` characters at a time
    on one long line: once more than 2 KB came."""
    return (PARTIAL_BYTES // size + 1) * size


def _straddling(name: str, value: str, after: str = " and then the answer goes on",
                ) -> Callable[[int], str]:
    """One long line on which ``value`` (after ``name``) starts just before the first
    piece's end."""
    def build(size: int) -> str:
        start = _first_piece(size) - 10 - len(name)
        head = "word " * (start // 5)
        return head + "x" * (start - len(head)) + name + value + after
    return build


CASES: dict[str, tuple[Callable[[int], str], list[str]]] = {
    "pass phrase": (_straddling("password: ", "correct horse battery staple"),
                    ["correct", "horse", "battery", "staple"]),
    "quoted pass phrase": (_straddling('{"password": "', 'correct horse battery staple"}'),
                           ["correct", "horse", "battery", "staple"]),
    "aws setting": (_straddling("aws_secret_access_key = ", AWS_SECRET), [AWS_SECRET[:12]]),
    "netrc": (lambda _: "x" * (PARTIAL_BYTES - 44) + "\nmachine api.example.com\nlogin bob\n"
              f"password {NETRC}\nthen the answer goes on\n", [NETRC]),
    "aws id and its secret": (lambda _: f"my key is {AWS_ID} and {AWS_SECRET}, keep them "
                              "safe\n", [AWS_ID[4:], AWS_SECRET[:12], AWS_SECRET[-12:]]),
}


@pytest.mark.parametrize("size", [1, 7, 64])
@pytest.mark.parametrize("name", list(CASES))
async def test_a_split_credential_is_stored_masked(tmp_path: Path, name: str,
                                                  size: int) -> None:
    build, secrets = CASES[name]
    answer = build(size)
    stores = open_project_stores(tmp_path)
    try:
        book = Journal(stores, title="split")
        book.start("s")
        for at in range(0, len(answer), size):
            await book.on_event(TextDelta(answer[at:at + size]))
        await book.error("model_error", "the stream broke")  # cut short: the log is all
        events = await stores.events.list_events("s", limit=10_000)
    finally:
        await stores.close()
    with sqlite3.connect(tmp_path / ".nonoka" / "sessions.db") as db:
        stored = [unpack(row[0]) for row in db.execute("SELECT data_json FROM events")]
    assert any(e.kind == "partial_answer" for e in events), "nothing was journaled"
    for secret in secrets:
        leaked = [text for text in stored if secret in text]
        assert not leaked, (name, size, secret, [text[-120:] for text in leaked])
    (_, cut), = unfinished_answers(events)
    assert cut.text == redact_text(answer, open_end=True)  # what masking it whole gives


def test_an_aws_secret_next_to_its_id_is_masked() -> None:
    text = f"my key is {AWS_ID} and {AWS_SECRET}"
    assert redact_text(text) == "my key is [redacted] and [redacted]"
    assert redact_text(f"{AWS_SECRET} goes with {AWS_ID}") == "[redacted] goes with [redacted]"
    config = f"aws_access_key_id={AWS_ID}\nregion = eu-west-1\nkey {AWS_SECRET}\n"
    assert AWS_SECRET not in redact_text(config)
    assert redact_text(config, keep_lines=True).count("\n") == config.count("\n")
    # A hexadecimal digest of the same length next to an id is not a secret.
    digest = "3f786850e387550fdab836ed7e6dc881de23001b"
    assert digest in redact_text(f"{AWS_ID} was added in {digest}")


@pytest.mark.parametrize(("growing", "masked"), [
    (f"my key is {AWS_ID} and {AWS_SECRET[:10]}", "my key is [redacted] and [redacted]"),
    ('password: "correct hor', 'password: "[redacted]'),
    ("use sk-proj-Zq8vT2", "use [redacted]"),
    ("postgres://app:Sup3r-S3", "postgres://app:[redacted]"),
    ("here:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAK",
     "here:\n-----BEGIN RSA PRIVATE KEY-----[redacted]"),
    ("plain words, cut in th", "plain words, cut in th"),
])
def test_what_a_growing_text_ends_in_is_masked_when_it_may_be_a_credential(
        growing: str, masked: str) -> None:
    assert redact_text(growing, open_end=True) == masked


def test_masking_a_masked_text_changes_nothing() -> None:
    """The journal stores what it masked, and the store and every display mask it again:
    a masked key block (its END gone) must not swallow the text after it then."""
    text = ("a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAK\n-----END RSA PRIVATE KEY-----\n"
            f"machine h.example.com\nlogin bob\npassword {NETRC}\nthe end")
    masked = redact_text(text, open_end=True)
    assert "the end" in masked and NETRC not in masked
    assert redact_text(masked) == masked


def test_an_id_after_one_secret_still_pairs_with_the_next() -> None:
    text = (f"aws_secret_access_key = {AWS_SECRET}\nmy key is {AWS_ID} and "
            f"{AWS_SECRET[:30]}")
    assert AWS_SECRET[:12] not in redact_text(text, open_end=True)


PARTS = ["word " * 30, "a line of prose.\n", "x" * 700 + " ", "password: correct horse\n",
         '{"password": "quoted phrase here"} ', f"my key is {AWS_ID} and {AWS_SECRET} ok\n",
         f"aws_secret_access_key = {AWS_SECRET}\n",
         f"machine h.example.com\nlogin bob\npassword {NETRC}\n",
         "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAK\n-----END RSA PRIVATE KEY-----\n",
         "token sk-proj-Zq8vT2mLZq8vT2mLZq8vT2mL then\n", "postgres://app:Sup3rS3cret@db/x "]
SECRETS = ["horse", "quoted phrase", AWS_SECRET[:10], NETRC, "MIIEow", "Zq8vT2m", "Sup3rS3"]


async def test_answers_cut_anywhere_are_stored_as_masking_them_whole_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded answers of credentials and prose, streamed in random pieces, logged at
    random points (small windows, text made final close to the end): no stored piece
    holds a secret, and the pieces make what masking the whole answer gives."""
    import random

    import nonoka.turn.journal as journal

    rng = random.Random(36)
    stores = open_project_stores(tmp_path)
    try:
        for n in range(60):
            monkeypatch.setattr(journal, "PARTIAL_BYTES", rng.choice([40, 300, 2048]))
            monkeypatch.setattr(journal, "FINAL_AFTER", rng.choice([64, 256, 1024]))
            answer = "".join(rng.choice(PARTS) for _ in range(rng.randint(1, 30)))
            book = Journal(stores, title="cut")
            book.start(f"s{n}")
            at = 0
            while at < len(answer):
                size = rng.randint(1, 40)
                await book.on_event(TextDelta(answer[at:at + size]))
                at += size
            await book.error("model_error", "cut")
            events = await stores.events.list_events(f"s{n}", limit=10_000)
            stored = json.dumps([e.data for e in events])
            assert not [s for s in SECRETS if s in stored], answer
            (_, cut), = unfinished_answers(events)
            assert cut.text == redact_text(answer, open_end=True), answer
    finally:
        await stores.close()
