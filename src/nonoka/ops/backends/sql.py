"""What the two SQL engines' backends share: ``db check``'s queries (and its findings
about stored files) and where a branch's entries live, written in SQL both SQLite and
PostgreSQL speak."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nonoka.errors import CorruptSessionError
from nonoka.ops.model import Finding, SearchQuery
from nonoka.ops.sharing import Lineage
from nonoka.store import index_sql
from nonoka.store.media import digest_of, size_label

Check = tuple[str, Callable[[tuple[Any, ...]], Finding]]

CHAIN = """
WITH RECURSIVE chain (session_id, base, count, depth) AS (
    SELECT session_id, base_session_id, base_count, 0 FROM checkpoints
    WHERE session_id = {p}
    UNION ALL
    SELECT c.session_id, c.base_session_id, c.base_count, chain.depth + 1
    FROM checkpoints c JOIN chain ON c.session_id = chain.base WHERE chain.depth < 10000)
SELECT session_id, base, count FROM chain WHERE base IS NOT NULL"""
"""A session's links to its bases, up its chain (``{p}``: the engine's placeholder)."""


def kept_sessions(query: SearchQuery, purpose: str, mark: Callable[[str], str]
                  ) -> tuple[str, dict[str, object]]:
    """The condition the query's filters put on a session's index row ``s`` (true for
    the rows they keep) and its named parameters; ``mark`` writes a placeholder."""
    where = [] if query.everything else [f"{purpose} = 'chat'"]
    params: dict[str, object] = {f"status{n}": s for n, s in enumerate(query.status)}
    if query.status:
        where.append(f"s.status IN ({', '.join(mark(name) for name in params)})")
    if query.since is not None:
        params["since"] = query.since
        where.append(f"s.last_active >= {mark('since')}")
    if query.model:
        params["model"] = query.model
        where.append(f"s.model = {mark('model')}")
    return " AND ".join(where) or "1 = 1", params


def title_match(words: list[str], like: str, mark: Callable[[str], str]
                ) -> tuple[str, dict[str, object]]:
    """The condition that the title ``s.title`` holds every word (``like``: the
    engine's case-insensitive ``LIKE``), and its named parameters."""
    params: dict[str, object] = {f"t{n}": f"%{w}%" for n, w in enumerate(words)}
    return " AND ".join(f"s.title {like} {mark(name)}" for name in params), params


def segments(session_id: str, links: Iterable[tuple[str, str, int]]
             ) -> list[tuple[str, int, int | None]]:
    """Where the session's entries live, in order: ``(session, from seq, to seq)`` (to the
    end for ``None``); ``links`` are ``CHAIN``'s rows. A branch's first ``base_count``
    entries are its base's, which may be a branch too."""
    base = Lineage(links).base
    chain: list[tuple[str, int, int | None]] = []
    sid, stop = session_id, None
    for _ in range(10_000):
        if sid not in base:
            chain.append((sid, 0, stop))
            return chain[::-1]
        parent, count = base[sid]
        if stop is None or stop > count:
            chain.append((sid, count, stop))
        sid, stop = parent, count if stop is None else min(stop, count)
    raise CorruptSessionError(f"session {session_id}: its chain of bases does not end; "
                              "the rows were left as they are")


def checks(own_entries: str) -> list[Check]:
    """``db check``'s queries and the finding each row makes. ``own_entries``: the
    entry rows a checkpoint stores itself (a branch's shared ones live in its base)."""
    def orphans(table: str) -> Check:
        return (f"SELECT session_id, count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 "
                "FROM checkpoints c WHERE c.session_id = t.session_id) GROUP BY session_id "
                "ORDER BY session_id",
                lambda r: Finding("error", "orphan_rows",
                                  f"{r[1]} {table} row(s) without a checkpoint", r[0]))

    return [
        orphans("session_entries"),
        orphans("step_updates"),
        (f"SELECT c.session_id, {own_entries}, coalesce(k.n, 0) FROM checkpoints c LEFT JOIN "
         "(SELECT session_id, count(*) AS n FROM session_entries GROUP BY session_id) k "
         f"ON k.session_id = c.session_id WHERE coalesce(k.n, 0) <> {own_entries} "
         "ORDER BY c.session_id",
         lambda r: Finding("error", "entry_count", f"the checkpoint expects {r[1]} entry "
                           f"rows, {r[2]} are stored", r[0])),
        ("SELECT session_id FROM cli_sessions s WHERE NOT EXISTS (SELECT 1 FROM "
         "checkpoints c WHERE c.session_id = s.session_id) ORDER BY session_id",
         lambda r: Finding("warning", "index_without_checkpoint",
                           "an index row without a checkpoint", r[0])),
        (f"{index_sql.OUT_OF_PLACE} ORDER BY session_id",
         lambda r: list_order_finding(r[0])),
        ("SELECT session_id, count(*) FROM events v WHERE NOT EXISTS (SELECT 1 FROM "
         "cli_sessions s WHERE s.session_id = v.session_id) AND NOT EXISTS (SELECT 1 "
         "FROM checkpoints c WHERE c.session_id = v.session_id) GROUP BY session_id "
         "ORDER BY session_id",
         lambda r: Finding("warning", "orphan_events",
                           f"{r[1]} event(s) of a session that is not stored", r[0])),
    ]


def list_order_finding(session_id: str) -> Finding:
    return Finding("warning", "list_order", "out of its place in the session list "
                   "(db check --repair puts it back)", session_id)


def media_findings(missing: Iterable[tuple[Any, ...]], unreferenced: Iterable[tuple[Any, ...]],
                   stored: Iterable[tuple[Any, ...]]) -> list[Finding]:
    """``db check``'s findings about files: references without their file (an error: the
    session does not load), files whose bytes do not give their digest (an error), and
    files no entry refers to (a warning: ``nonoka db vacuum`` deletes them)."""
    found = [Finding("error", "missing_media", f"entry {seq} refers to the file {digest}, "
                     "which is not stored", sid) for sid, seq, digest in missing]
    found += [Finding("error", "media_digest", f"the bytes stored as {digest} do not give "
                      "that digest (damaged)") for digest, data in stored
              if digest_of(bytes(data)) != digest]
    found += [Finding("warning", "unreferenced_media", f"the file {digest} "
                      f"({size_label(int(size))}) is stored but no entry refers to it "
                      "(`nonoka db vacuum` deletes it)") for digest, size in unreferenced]
    return found
