"""``db check`` and ``db check --repair`` of the SQLite entry rows' digest chain.

The runtime appends a session's next entry after the chain stored with its last row
(``nonoka.store.sqlite.digests``), and a process that decoded the conversation trusts it
while that row's chain is unchanged; a row without its chain, or with one that is not the
digest of the rows' text, makes the session impossible (or unsafe) to continue. The
chain is derived from the rows' text alone, so it can always be rebuilt.

A branch's first entries are its base's rows: its own rows continue the chain from the
base's text, so bases are checked before their branches and only the digests at the
points where a branch starts are kept.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from nonoka.ops.model import Finding, entries_named
from nonoka.store.sqlite import lineage
from nonoka.store.sqlite.digests import Chain, is_stored
from nonoka.store.sqlite.entries import rows_of
from nonoka.store.sqlite.packing import unpack

_MAX_DEPTH = 10_000
Links = dict[str, tuple[str | None, int]]
"""Each checkpoint's base session and the number of entries it shares with it."""


def links(db: sqlite3.Connection, bases: bool) -> Links:
    if not bases:
        return {sid: (None, 0) for (sid,) in db.execute("SELECT session_id FROM checkpoints")}
    return {sid: (base, int(count) if isinstance(count, int) else 0)
            for sid, base, count in db.execute(
                "SELECT session_id, base_session_id, base_count FROM checkpoints")}


def _holder(graph: Links, sid: str, count: int) -> str | None:
    """The session whose own rows hold the chain after the first ``count`` entries of
    ``sid`` (``None`` for a chain of bases that does not end)."""
    for _ in range(_MAX_DEPTH):
        base, shared = graph.get(sid, (None, 0))
        if base is None or count > shared:
            return sid
        sid = base
    return None


def _depths(graph: Links) -> dict[str, int]:
    """How many bases up each session's chain of bases goes; sessions in a loop are left
    out (their entries cannot be read, which ``db check`` reports as unreadable)."""
    depth: dict[str, int] = {}
    for start in graph:
        path: list[str] = []
        seen: set[str] = set()
        sid: str | None = start
        while sid is not None and sid in graph and sid not in depth:
            if sid in seen or len(path) > _MAX_DEPTH:
                break  # a loop: none of these get a depth
            path.append(sid)
            seen.add(sid)
            sid = graph[sid][0]
        else:
            known = depth.get(sid, 0) if sid is not None else 0
            for n, member in enumerate(reversed(path), 1):
                depth[member] = known + n
    return depth


def check(db: sqlite3.Connection, graph: Links) -> list[Finding]:
    """One ``digest_chain`` error per session whose own rows' chain is missing or wrong,
    naming the entries whose text was changed after they were stored (``edited``)."""
    wanted: dict[str, set[int]] = {}
    for base, count in graph.values():
        holder = None if base is None else _holder(graph, base, count)
        if holder is not None and count > 0:
            wanted.setdefault(holder, set()).add(count)
    depth = _depths(graph)
    points: dict[tuple[str, int], Chain] = {}
    found = []
    for sid in sorted(depth, key=lambda s: (depth[s], s)):
        base, count = graph[sid]
        start = 0 if base is None else count
        holder = None if base is None else _holder(graph, base, count)
        chain = Chain() if start == 0 else points.get((holder or "", count))
        if chain is None:
            continue  # the base's rows do not reach the branch's start: unreadable
        missing = wrong = 0
        edits = Edits(chain)
        for seq, (row_seq, text, stored) in enumerate(_rows(db, sid, start), start):
            if row_seq != seq or not isinstance(text, str):
                break  # rows out of sequence or not text: unreadable, reported as such
            chain = chain.add(text)
            if seq + 1 in wanted.get(sid, ()):
                points[(sid, seq + 1)] = chain
            kept = Chain.decode(stored) if is_stored(stored) else None
            if kept is None:
                missing += 1
            elif kept != chain:
                wrong += 1
            edits.row(seq, text, kept, chain)
        if missing or wrong:
            edited = tuple(edits.done())
            found.append(Finding("error", "digest_chain", _problem(missing, wrong, edited),
                                 sid, entries=edited))
    return found


class Edits:
    """Finds the rows whose text was changed after they were stored: a row whose stored
    chain is not the previous row's plus its text, while the next row's stored chain is
    its own plus the next text (the chain went on from the text as it was); the last
    row, with nothing after it, when its stored chain is a digest as nonoka writes them
    that is not its text's. A damaged chain value is not an edit: the rows after it
    continue the chain of the text as it is."""

    def __init__(self, start: Chain) -> None:
        self.before: Chain | None = start
        """The stored chain of the row before (at first, the chain the rows continue)."""
        self.suspect: int | None = None
        self.edited: list[int] = []

    def row(self, seq: int, text: str, kept: Chain | None, chain: Chain) -> None:
        """One more row: its text, its stored chain and the chain computed over the text."""
        if self.suspect is not None and self.before is not None and kept is not None \
                and self.before.add(text) == kept:
            self.edited.append(self.suspect)
        self.suspect = None
        if kept is not None and kept != chain and self.before is not None \
                and _is_digest(kept) and self.before.add(text) != kept:
            self.suspect = seq
        self.before = kept

    def done(self) -> list[int]:
        if self.suspect is not None:
            self.edited.append(self.suspect)
        return self.edited


def _is_digest(chain: Chain) -> bool:
    return len(chain.rows) == 32 and all(c in "0123456789abcdef" for c in chain.rows)


def _problem(missing: int, wrong: int, edited: tuple[int, ...]) -> str:
    what = [f"{missing} entry row(s) without their digest chain" if missing else "",
            f"{wrong} entry row(s) whose digest chain is not their text's" if wrong else ""]
    changed = ""
    if edited:
        was = "was changed after it was" if len(edited) == 1 else \
            "were changed after they were"
        changed = (f"{entries_named(edited)} {was} stored (the text is not the one the "
                   "digest chain was made over; a repair keeps the text as it is now: "
                   "restore the session from a backup for the one stored); ")
    return (f"{changed}{' and '.join(w for w in what if w)}: the session cannot be continued "
            "until `nonoka db check --repair` rebuilds the chain")


def _rows(db: sqlite3.Connection, sid: str, start: int) -> Iterable[tuple[object, ...]]:
    """The session's own rows from ``start``: seq, JSON text (a deflated row's text:
    the chain is over the text) and stored chain."""
    return ((seq, unpack(text), stored) for seq, text, stored in db.execute(
        "SELECT seq, entry_json, key_chain FROM session_entries "
        f"WHERE {rows_of('?1', first='?2')} ORDER BY doc", (sid, start)))


def rebuild(db: sqlite3.Connection, sid: str, bases: bool) -> int:
    """Store the chain of the session's own rows again, computed from the text of every
    entry before them (a branch's shared ones read through its bases); the number of
    rows changed. Runs inside the caller's write transaction."""
    start = 0
    if bases:
        row = db.execute("SELECT base_session_id, base_count FROM checkpoints "
                         "WHERE session_id = ?", (sid,)).fetchone()
        if row is not None and row[0] is not None:
            start = int(row[1])
    chain = Chain()
    for text in lineage.resolved_entries(db, sid, 0, start) if start else []:
        chain = chain.add(unpack(text))
    updates = []
    for seq, (row_seq, text, stored) in enumerate(list(_rows(db, sid, start)), start):
        if row_seq != seq or not isinstance(text, str):
            break
        chain = chain.add(text)
        if not is_stored(stored) or Chain.decode(stored) != chain:
            updates.append((chain.stored(), sid, seq))
    db.executemany("UPDATE session_entries SET key_chain = ?1 WHERE "
                   f"{rows_of('?2', first='?3', last='?3')}", updates)
    return len(updates)
