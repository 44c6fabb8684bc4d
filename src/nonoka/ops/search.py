"""``nonoka sessions search``: full-text search over entries, titles and tool calls.

Every word of the query must occur, case-insensitively, in an entry (its content or its
tool calls: whole words) or in a session's title (anywhere in it). The words are
extracted here and handed to the engine, so query syntax characters are just
separators. Matching titles come first (most recently active session first), then
entries: SQLite answers from its FTS5 index, most recently created session first, then
latest position (``nonoka.store.sqlite.entries``); PostgreSQL from a GIN index, most
recently active session first, then latest position; the memory engine like
PostgreSQL, without an index. An entry a branch shares with the session it
was forked from is one hit, naming the branches that hold it (``ops/sharing.py``).

Snippets and titles are redacted (``nonoka.redact``) before they are cut, so a
credential is masked whole even where the window would have cut it: search finds what
is stored, and shows only what may be shown.
"""

from __future__ import annotations

from nonoka.ops.backends import backend_for
from nonoka.ops.model import SearchHit, SearchQuery
from nonoka.ops.text import entry_text, marked_snippet, words
from nonoka.redact import redact_text
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
        cut, marks = marked_snippet(redact_text(text), query_words)
        hits.append(SearchHit(hit.session_id, None if hit.seq < 0 else hit.seq, role,
                              cut, redact_text(hit.title), hit.status, hit.last_active,
                              hit.shared_with, marks))
    return hits


async def prepare(stores: ProjectStores) -> None:
    """Bring the engine's search index up to date (SQLite indexes in batches, before a
    search); call it before using ``session_match``."""
    backend = backend_for(stores)
    catch_up = getattr(backend, "catch_up", None)
    if catch_up is not None:
        catch_up()


def session_match(engine: str, text: str) -> tuple[str, list[object]] | None:
    """A SQL condition on ``cli_sessions`` rows (``?`` placeholders) that holds for the
    sessions with an entry holding every word of ``text``; ``None`` when ``text`` has no
    word. For listings that filter sessions rather than list matches (the web viewer)."""
    query_words = words(text)
    if not query_words:
        return None
    if engine == "sqlite":
        from nonoka.ops.text import fts5_query

        return ("cli_sessions.session_id IN (SELECT d.session_id FROM session_search f "
                "CROSS JOIN session_entries d ON d.doc = f.rowid WHERE session_search MATCH ?)",
                [fts5_query(query_words)])
    from nonoka.store.postgres.schema import ENTRY_VECTOR, SEARCH_CONFIG

    entry = ENTRY_VECTOR.format(e="e.entry_json")
    return (f"EXISTS (SELECT 1 FROM session_entries e WHERE e.session_id = "
            f"cli_sessions.session_id AND {entry} @@ plainto_tsquery('{SEARCH_CONFIG}', ?))",
            [" ".join(query_words)])
