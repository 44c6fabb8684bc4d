"""Words, queries and snippets: how search text is read the same way on every engine.

The query is split into words here (letters and digits; everything else separates) and
each engine is handed the words, never the raw text: FTS5 gets each one as a quoted
phrase, PostgreSQL a ``plainto_tsquery`` of them, so no query syntax a person types can
reach either parser.
"""

from __future__ import annotations

import json
import re

_WORD = re.compile(r"[^\W_]+")
SNIPPET_WIDTH = 160
MAX_WORDS = 32


def words(text: str) -> list[str]:
    """The query's words, lower-cased, in order, without repeats (at most 32)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        seen.setdefault(word.casefold(), None)
    return list(seen)[:MAX_WORDS]


def fts5_query(query_words: list[str]) -> str:
    """An FTS5 query matching documents holding every word: ``"a" "b"``.

    The index keeps no word positions (``detail=column``), so each quoted string must be
    one token: a word SQLite's tokenizer splits where Python's does not (letters newer
    than SQLite's Unicode tables) is split by that tokenizer itself."""
    tokens: dict[str, None] = {}
    for word in query_words:
        for token in (word,) if word.isascii() else fts5_tokens(word):
            tokens.setdefault(token, None)
    return " ".join('"' + t.replace('"', '""') + '"' for t in tokens)


def fts5_tokens(text: str) -> list[str]:
    """``text`` as the index's tokenizer (``unicode61 remove_diacritics 0``) splits it."""
    import sqlite3

    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE t USING fts5(b, tokenize='unicode61 "
                   "remove_diacritics 0')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        db.execute("INSERT INTO t (b) VALUES (?)", (text,))
        return [str(r[0]) for r in db.execute("SELECT term FROM v ORDER BY offset")]
    finally:
        db.close()


def entry_text(entry_json: str) -> tuple[str, str]:
    """``(role, text)`` of a stored entry: its content, then its tool calls' JSON."""
    try:
        entry = json.loads(entry_json)
    except ValueError:
        return "", entry_json
    if not isinstance(entry, dict):
        return "", entry_json
    text = str(entry.get("content") or "")
    calls = (entry.get("metadata") or {}).get("tool_calls")
    if calls:
        text += " " + json.dumps(calls, ensure_ascii=False)
    return str(entry.get("role", "")), text


def document_words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def snippet(text: str, query_words: list[str], width: int = SNIPPET_WIDTH) -> str:
    """A window of ``text`` around the first matching word, matches in ``[...]``."""
    return marked_snippet(text, query_words, width)[0]


def marked_snippet(text: str, query_words: list[str], width: int = SNIPPET_WIDTH
                   ) -> tuple[str, tuple[tuple[int, int], ...]]:
    """``snippet`` and where each match is in it (``[start, end)``, inside its brackets):
    a bracket of the text itself (a ``[redacted]``) is not taken for a match."""
    flat = " ".join(text.split())
    wanted = set(query_words)
    spans = [(m.start(), m.end()) for m in _WORD.finditer(flat)
             if m.group().casefold() in wanted]
    first = spans[0][0] if spans else 0
    start = max(0, first - width // 3)
    end = min(len(flat), start + width)
    out = "..." if start else ""
    marks: list[tuple[int, int]] = []
    at = start
    for s, e in spans:
        if s < start or e > end:
            continue
        out += flat[at:s] + "["
        marks.append((len(out), len(out) + e - s))
        out += flat[s:e] + "]"
        at = e
    out += flat[at:end] + ("..." if end < len(flat) else "")
    return out, tuple(marks)
