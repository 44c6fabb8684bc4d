"""The small pure parts of the session operations: words, snippets, ages, prune choice."""

from __future__ import annotations

import sqlite3

import pytest

from nonoka.cli.safe_text import highlighted
from nonoka.ops.model import SessionSummary
from nonoka.ops.prune import parse_age, select_for_prune
from nonoka.ops.text import entry_text, fts5_query, marked_snippet, snippet, words


def test_words_are_letters_and_digits_only() -> None:
    assert words('Flux "capacitor" AND (x* OR y) flux_2 ü') == [
        "flux", "capacitor", "and", "x", "or", "y", "2", "ü"]
    assert words("!!! \"' * ( ) :") == []


@pytest.mark.parametrize("text", ['"', 'a"b', "x*", "NEAR(a b)", "col:val", "^a", "a - b",
                                  "AND OR NOT", "\u0000a"])
def test_fts5_query_never_is_syntax(text: str) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    db.execute("INSERT INTO t VALUES ('a b val near and or not')")
    query = fts5_query(words(text))
    if query:
        db.execute("SELECT rowid FROM t WHERE t MATCH ?", (query,)).fetchall()


def test_snippet_brackets_matches_around_the_first_one() -> None:
    text = "word " * 100 + "the Axolotl swims; an axolotl rests " + "tail " * 100
    cut = snippet(text, ["axolotl"])
    assert cut.startswith("...") and cut.endswith("...")
    assert "[Axolotl]" in cut and "[axolotl]" in cut and len(cut) < 200


def test_only_the_matches_are_highlighted_not_the_brackets_of_the_text() -> None:
    cut, marks = marked_snippet("key [redacted] for the Axolotl [x] \x1bc", ["axolotl"])
    assert cut == "key [redacted] for the [Axolotl] [x] \x1bc"
    assert [cut[start:end] for start, end in marks] == ["Axolotl"]
    assert highlighted(cut, marks, colour=True) == (
        "key [redacted] for the \x1b[1;33mAxolotl\x1b[0m [x] \\x1bc")
    assert highlighted(cut, marks, colour=False) == "key [redacted] for the [Axolotl] [x] \\x1bc"


def test_entry_text_covers_tool_calls_and_damaged_rows() -> None:
    role, text = entry_text('{"role": "assistant", "content": "ok", "metadata": '
                            '{"tool_calls": [{"name": "grep", "arguments": "x"}]}}')
    assert role == "assistant" and "grep" in text and text.startswith("ok")
    assert entry_text("not json") == ("", "not json")


def test_ages() -> None:
    assert parse_age("30d") == 30 * 86400 and parse_age(" 2w ") == 14 * 86400
    assert parse_age("1.5h") == 5400 and parse_age("90m") == 5400 and parse_age("45s") == 45
    for bad in ("", "30", "d", "-1d", "3 days"):
        with pytest.raises(ValueError, match="is not an age"):
            parse_age(bad)


def test_prune_choice_keeps_the_newest_and_live_statuses() -> None:
    now = 1_000_000.0
    rows = [SessionSummary("a", "completed", now - 100), SessionSummary("b", "failed", now - 90),
            SessionSummary("c", "paused", now - 80), SessionSummary("d", "completed", now - 5)]
    assert select_for_prune(rows, older_than=50, now=now) == ["b", "a"]
    assert select_for_prune(rows, older_than=50, now=now, keep_last=3) == ["a"]
    assert select_for_prune(rows, older_than=50, now=now, statuses=("paused",)) == ["c"]
