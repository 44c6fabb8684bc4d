"""``nonoka sessions search``: full-text search over entries, titles and tool calls.

Every word of the query must occur in a document (an entry, or a session's title),
case-insensitively; the words are extracted here and handed to the engine, so query
syntax characters are just separators. SQLite answers from its FTS5 index, newest
written document first; PostgreSQL from GIN indexes, most recently active session first
(then latest position); the memory engine like PostgreSQL, without an index.
"""

from __future__ import annotations

from nonoka.ops.backends import backend_for
from nonoka.ops.model import SearchHit, SearchQuery
from nonoka.ops.text import entry_text, snippet, words
from nonoka.store.project import ProjectStores


async def search(stores: ProjectStores, query: SearchQuery) -> list[SearchHit]:
    """The matching documents, newest first, at most ``query.limit``; none for a query
    without a word."""
    query_words = words(query.text)
    if not query_words or query.limit <= 0:
        return []
    raw = await backend_for(stores).search(query, query_words)
    hits: list[SearchHit] = []
    for hit in raw:
        if hit.seq < 0:
            role, text = "title", hit.text
        else:
            role, text = entry_text(hit.text)
        hits.append(SearchHit(hit.session_id, None if hit.seq < 0 else hit.seq, role,
                              snippet(text, query_words), hit.title, hit.status,
                              hit.last_active))
    return hits


def session_match(engine: str, text: str) -> tuple[str, list[object]] | None:
    """A SQL condition on ``cli_sessions`` rows (``?`` placeholders) that holds for the
    sessions whose entries or title hold every word of ``text``; ``None`` when ``text``
    has no word. For listings that filter sessions rather than list matches (the web
    viewer)."""
    query_words = words(text)
    if not query_words:
        return None
    if engine == "sqlite":
        from nonoka.ops.text import fts5_query

        return ("cli_sessions.session_id IN (SELECT d.session_id FROM session_search f "
                "CROSS JOIN search_docs d ON d.doc = f.rowid WHERE session_search MATCH ?)",
                [fts5_query(query_words)])
    from nonoka.store.postgres.migrations import ENTRY_VECTOR, SEARCH_CONFIG, TITLE_VECTOR

    tsquery = f"plainto_tsquery('{SEARCH_CONFIG}', ?)"
    entry = ENTRY_VECTOR.format(e="e.entry_json")
    title = TITLE_VECTOR.format(t="cli_sessions.title")
    return (f"({title} @@ {tsquery} OR EXISTS (SELECT 1 FROM session_entries e WHERE "
            f"e.session_id = cli_sessions.session_id AND {entry} @@ {tsquery}))",
            [" ".join(query_words)] * 2)
