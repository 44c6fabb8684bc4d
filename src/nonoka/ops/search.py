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
