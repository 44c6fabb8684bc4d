"""The entry rows of a SQLite file: where they live, and every rule about them.

**Layout.** Each checkpoint row has an ``entry_block`` number, chosen by ``new_block``
when the store first writes the row; entry ``seq`` of that session is the
``session_entries`` row whose rowid (``doc``) is ``entry_block << 32 | seq``. A session's
entries are one run of rowids, so the table is its own key: an append writes the page
the session's last rows are on and no index page, and every read of a session's entries
is a range of rowids (``rows_of``). Readers still match ``session_id`` too, so a row
another program put at a wrong place is never read as another session's: ``db check``
reports it (``misplaced``) and ``db check --repair`` moves it back (``put_in_place``).
nonoka itself never writes a row anywhere else, and nothing in the schema moves rows
for other writers.

**Search.** The rowid is also the row's document id in the FTS5 index
``session_search``, whose content is the view ``search_text`` (the text lives once, in
the entry row, deflated or not: ``nonoka.store.sqlite.packing``). A save does not index
its rows: ``catch_up``, which every search runs first, indexes them in batches of
``BATCH``. ``search_pending`` keeps, for each block with rows not indexed yet, the first
of them (its watermark): every row of the block below it is indexed, no row from it on
is. ``search_stale`` keeps the rows below a watermark that changed since the index last
took them: each one's document id and the stored value the index holds for it (``NULL``
when it holds none). The triggers in ``SCHEMA`` keep that true for any write, nonoka's or
another program's, without reading any row's text (so a program without nonoka's
``entry_text`` function can still write): a row added at the end of its block waits for
the catch-up (the usual append runs none of their statements), one added, changed or
deleted below the watermark is noted in ``search_stale``, and ``catch_up`` takes what the
index holds for it out of the index and the row as it is now in, before anything else.
The index is derived data: ``index_findings`` checks it and ``rebuild_index`` makes it
again from the rows.

``SCHEMA`` is the live text of the view and triggers, as a fresh database holds it; the
migration that installed it keeps a frozen copy (``tests/store/test_schema_doc.py``
holds the two equal). Standard library only: the bridge's early dispatch reads entries
before pydantic loads.
"""

from __future__ import annotations

import sqlite3

from nonoka.store.sqlite.packing import register

SEQ_BITS = 32
LAST_SEQ = (1 << SEQ_BITS) - 1
"""The largest ``seq`` a block holds (the table's ``CHECK`` refuses more)."""

BATCH = 2000
"""Rows indexed by one of ``catch_up``'s write transactions."""

INSERT = ("INSERT INTO session_entries (doc, session_id, seq, entry_json, key_chain, media) "
          "VALUES (?, ?, ?, ?, ?, ?)")
"""An entry row at its place (``doc``), with its digest chain and the digests of the
files it refers to (``NULL`` for most rows)."""

_BODY = ("CASE WHEN json_valid(entry_text({e}))\n"
         "    THEN coalesce(json_extract(entry_text({e}), '$.content'), '') || ' ' ||\n"
         "         coalesce(json_extract(entry_text({e}), '$.metadata.tool_calls'), '')\n"
         "    ELSE entry_text({e}) END")
"""The text the full-text index holds for a stored ``entry_json`` (``{e}``)."""

SCHEMA = (
    """CREATE TABLE search_stale (doc INTEGER PRIMARY KEY, was)""",
    """CREATE VIEW search_text (doc, body) AS
SELECT doc, CASE WHEN json_valid(entry_text(entry_json))
    THEN coalesce(json_extract(entry_text(entry_json), '$.content'), '') || ' ' ||
         coalesce(json_extract(entry_text(entry_json), '$.metadata.tool_calls'), '')
    ELSE entry_text(entry_json) END
FROM session_entries""",
    """CREATE TRIGGER search_insert AFTER INSERT ON session_entries
WHEN coalesce((SELECT from_doc FROM search_pending WHERE block = new.doc >> 32) > new.doc, 1)
BEGIN
    INSERT OR IGNORE INTO search_stale (doc, was)
    SELECT new.doc, NULL
    WHERE new.doc < coalesce(
        (SELECT from_doc FROM search_pending WHERE block = new.doc >> 32),
        CASE WHEN EXISTS (SELECT 1 FROM session_entries
                          WHERE doc > new.doc AND doc < ((new.doc >> 32) + 1) << 32)
        THEN new.doc + 1 ELSE new.doc END);
    INSERT OR IGNORE INTO search_pending (block, from_doc)
    SELECT new.doc >> 32, new.doc
    WHERE NOT EXISTS (SELECT 1 FROM session_entries
                      WHERE doc > new.doc AND doc < ((new.doc >> 32) + 1) << 32);
END""",
    """CREATE TRIGGER search_delete AFTER DELETE ON session_entries
BEGIN
    INSERT OR IGNORE INTO search_stale (doc, was)
    SELECT old.doc, old.entry_json
    WHERE old.doc < coalesce(
        (SELECT from_doc FROM search_pending WHERE block = old.doc >> 32), old.doc + 1);
    DELETE FROM search_pending
    WHERE block = old.doc >> 32 AND NOT EXISTS (
        SELECT 1 FROM session_entries
        WHERE doc >= from_doc AND doc < ((old.doc >> 32) + 1) << 32);
END""",
    """CREATE TRIGGER search_update AFTER UPDATE OF entry_json ON session_entries
BEGIN
    INSERT OR IGNORE INTO search_stale (doc, was)
    SELECT old.doc, old.entry_json
    WHERE old.doc < coalesce(
        (SELECT from_doc FROM search_pending WHERE block = old.doc >> 32), old.doc + 1);
    DELETE FROM search_pending
    WHERE block = old.doc >> 32 AND NOT EXISTS (
        SELECT 1 FROM session_entries
        WHERE doc >= from_doc AND doc < ((old.doc >> 32) + 1) << 32);
    INSERT OR IGNORE INTO search_stale (doc, was)
    SELECT new.doc, NULL
    WHERE new.doc < coalesce(
        (SELECT from_doc FROM search_pending WHERE block = new.doc >> 32),
        CASE WHEN EXISTS (SELECT 1 FROM session_entries
                          WHERE doc > new.doc AND doc < ((new.doc >> 32) + 1) << 32)
        THEN new.doc + 1 ELSE new.doc END);
    INSERT OR IGNORE INTO search_pending (block, from_doc)
    SELECT new.doc >> 32, new.doc
    WHERE NOT EXISTS (SELECT 1 FROM session_entries
                      WHERE doc > new.doc AND doc < ((new.doc >> 32) + 1) << 32);
END""",
)
"""The table of changed rows, the view the full-text index reads (an entry's text: its
content and its tool calls, names and arguments as JSON text; a row that is not JSON as
it is) and the triggers that keep the index's watermarks and changed rows true."""

SEARCH_TABLE = ("CREATE VIRTUAL TABLE session_search USING fts5(body,content=search_text,"
                "content_rowid=doc,columnsize=0,detail=column,"
                "tokenize='unicode61 remove_diacritics 0')")
"""The full-text index: which entries hold a word, not where (``detail=column``: search
asks for words, never phrases)."""


# -- where rows live ---------------------------------------------------------------------

def doc(block: int, seq: int) -> int:
    """The rowid of entry ``seq`` of the session in ``block``."""
    return (block << SEQ_BITS) | seq


def place(block: str, seq: str) -> str:
    """``doc`` in SQL: the rowid of entry ``seq`` in ``block`` (SQL expressions)."""
    return f"(({block}) << {SEQ_BITS}) + ({seq})"


def rows_of(session: str, alias: str = "", first: str = "0", last: str = str(LAST_SEQ)
            ) -> str:
    """A condition on ``session_entries`` rows (``alias``) that holds for the entries
    ``first`` to ``last`` (SQL expressions, inclusive) stored by the session that the SQL
    expression ``session`` names, read as a range of rowids. ``session`` may be a column
    of an outer query; a session without a checkpoint row has none."""
    p = f"{alias}." if alias else ""
    block = f"SELECT entry_block FROM checkpoints WHERE session_id = {session}"
    return (f"{p}doc BETWEEN {place(block, first)} AND {place(block, last)} "
            f"AND {p}session_id = {session}")


_NEW_BLOCK = ("SELECT max(coalesce((SELECT max(entry_block) FROM checkpoints), 0), "
              f"coalesce((SELECT max(doc) FROM session_entries), 0) >> {SEQ_BITS}) + 1")


def new_block(db: sqlite3.Connection) -> int:
    """A block no row uses, for a checkpoint row written now: after every block a
    checkpoint holds and every block a row is stored in (rows whose checkpoint row was
    deleted by another program keep theirs). Two seeks; inside the write transaction
    that inserts the checkpoint row."""
    return int(db.execute(_NEW_BLOCK).fetchone()[0])


def entry_block(db: sqlite3.Connection, session_id: str, known: object) -> int:
    """The block of the session's entry rows: ``known`` (the stored column, when the
    caller read it), else the stored one; a checkpoint row whose block another program
    cleared is given a new one. ``sqlite3.DatabaseError`` when the session has no
    checkpoint row."""
    if isinstance(known, int):
        return known
    row = db.execute("SELECT entry_block FROM checkpoints WHERE session_id = ?",
                     (session_id,)).fetchone()
    if row is None:
        raise sqlite3.DatabaseError(f"session {session_id}: no checkpoint row holds its "
                                    "entries")
    if isinstance(row[0], int):
        return row[0]
    block = new_block(db)
    db.execute("UPDATE checkpoints SET entry_block = ? WHERE session_id = ?",
               (block, session_id))
    return block


def delete_rows(db: sqlite3.Connection, session_id: str, block: int | None) -> int:
    """Delete the session's entry rows: its block's, and any that an older nonoka kept
    below zero (rows another program wrote before their checkpoint row); how many."""
    removed = db.execute("DELETE FROM session_entries WHERE doc < 0 AND session_id = ?",
                         (session_id,)).rowcount
    if isinstance(block, int):
        removed += db.execute("DELETE FROM session_entries WHERE doc BETWEEN ? AND ?",
                              (doc(block, 0), doc(block, LAST_SEQ))).rowcount
    return removed


_OUT_OF_PLACE = ("FROM session_entries e JOIN checkpoints c ON c.session_id = e.session_id "
                 f"WHERE e.doc IS NOT {place('c.entry_block', 'e.seq')}")
"""Entry rows not at their place in their session's block: written or moved there by
another program, they are not read as the session's."""


def misplaced(db: sqlite3.Connection) -> list[tuple[str, int]]:
    """Each session with rows out of its place, and how many."""
    return [(str(sid), int(n)) for sid, n in db.execute(
        f"SELECT e.session_id, count(*) {_OUT_OF_PLACE} GROUP BY e.session_id "
        "ORDER BY e.session_id")]


def put_in_place(db: sqlite3.Connection) -> None:
    """Move every misplaced row to its place (a checkpoint row without a block gets
    one), then build the full-text index again: where the moved rows were indexed
    cannot be known. Inside the caller's write transaction; a row whose place is taken
    stays where it is (``misplaced`` still finds it)."""
    for (sid,) in db.execute("SELECT session_id FROM checkpoints WHERE entry_block IS NULL"
                             ).fetchall():
        entry_block(db, sid, None)
    for old, new in db.execute(f"SELECT e.doc, {place('c.entry_block', 'e.seq')} "
                               f"{_OUT_OF_PLACE}").fetchall():
        if db.execute("SELECT 1 FROM session_entries WHERE doc = ?", (new,)).fetchone() is None:
            db.execute("UPDATE session_entries SET doc = ? WHERE doc = ?", (new, old))
    rebuild_index(db)


# -- the full-text index -----------------------------------------------------------------

WAITING = ("search_pending p JOIN session_entries {e} ON {e}.doc >= p.from_doc "
           "AND {e}.doc < (p.block + 1) << 32")
"""The rows not indexed yet (``{e}``: the entry table's alias), with their block's
watermark row ``p``."""

_INDEX = """
INSERT INTO session_search (rowid, body)
SELECT doc, body FROM search_text WHERE doc >= ?1 AND doc <= ?2 ORDER BY doc
"""

_FORGET = ("INSERT INTO session_search (session_search, rowid, body) SELECT 'delete', ?1, "
           + _BODY.format(e="?2"))
"""Take document ``?1`` out of the index, ``?2`` being the stored value it was indexed
from."""

_RETAKE = ("INSERT INTO session_search (rowid, body) SELECT doc, body FROM search_text "
           "WHERE doc = ?1 AND doc < coalesce((SELECT from_doc FROM search_pending "
           "WHERE block = ?1 >> 32), ?1 + 1)")
"""Index row ``?1`` as it is now, when it exists and lies below its block's watermark
(a row at or above it is the watermark's catch-up's)."""


def pending(db: sqlite3.Connection) -> int:
    """How many entries wait to be indexed (a changed row counts once)."""
    return int(db.execute(f"SELECT (SELECT count(*) FROM {WAITING.format(e='e')}) + "
                          "(SELECT count(*) FROM search_stale)").fetchone()[0])


def catch_up(db: sqlite3.Connection, batch: int = BATCH) -> int:
    """Index every entry not indexed yet, one write transaction a batch, so a writer
    working meanwhile waits at most one batch; the number indexed. ``db`` is in
    autocommit mode and not in a transaction; it is given ``entry_text``."""
    register(db)
    done = 0
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            indexed, finished = _some(db, batch)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        done += indexed
        if finished:
            return done


def _retake(db: sqlite3.Connection, batch: int | None) -> int:
    """Bring up to ``batch`` (``None``: every) changed rows up to date in the index:
    what it holds for each out, the row as it is now in; how many."""
    done = 0
    for stale, was in db.execute("SELECT doc, was FROM search_stale ORDER BY doc LIMIT ?",
                                 (-1 if batch is None else batch,)).fetchall():
        if was is not None:
            db.execute(_FORGET, (stale, was))
        db.execute(_RETAKE, (stale,))
        db.execute("DELETE FROM search_stale WHERE doc = ?", (stale,))
        done += 1
    return done


def _some(db: sqlite3.Connection, batch: int) -> tuple[int, bool]:
    """Bring up to ``batch`` changed rows up to date, then index up to ``batch`` rows,
    block after block, moving each block's watermark; how many, and whether none is
    left."""
    done = _retake(db, batch)
    if done >= batch:
        return done, False
    while done < batch:
        row = db.execute("SELECT block, from_doc FROM search_pending ORDER BY block "
                         "LIMIT 1").fetchone()
        if row is None:
            return done, True
        block, first = int(row[0]), int(row[1])
        end = ((block + 1) << SEQ_BITS) - 1
        (last,) = db.execute("SELECT max(doc) FROM (SELECT doc FROM session_entries "
                             "WHERE doc >= ? AND doc <= ? ORDER BY doc LIMIT ?)",
                             (first, end, batch - done)).fetchone()
        if last is not None:
            db.execute(_INDEX, (first, last))
            done += db.execute("SELECT changes()").fetchone()[0]
        if last is None or db.execute("SELECT 1 FROM session_entries WHERE doc > ? AND "
                                      "doc <= ?", (last, end)).fetchone() is None:
            db.execute("DELETE FROM search_pending WHERE block = ?", (block,))
        else:
            db.execute("UPDATE search_pending SET from_doc = ? WHERE block = ?",
                       (last + 1, block))
    return done, False


def index_findings(db: sqlite3.Connection) -> list[str]:
    """What is wrong with the full-text index, in SQLite's words (empty: nothing).

    FTS5's own ``integrity-check``: of the index's structure always, and against the
    entry rows when no row waits for the catch-up (a waiting row is missing from the
    index by design). Changed rows (``search_stale``) are brought up to date first, as
    the catch-up would, and that is undone after the check (a savepoint): a damaged
    index may show only there. Changes nothing, but SQLite runs it as a write: a file
    opened read-only is not checked."""
    register(db)
    outer = db.in_transaction
    db.execute("SAVEPOINT index_findings")
    try:
        return _findings(db)
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK TO index_findings")
            db.execute("RELEASE index_findings")
        elif outer:  # a damaged index's error rolled the caller's transaction back
            db.execute("BEGIN")


def _findings(db: sqlite3.Connection) -> list[str]:
    checks: list[int | None] = [None, 0]
    if not int(db.execute(f"SELECT count(*) FROM {WAITING.format(e='e')}").fetchone()[0]):
        checks.append(1)
    for rank in checks:
        try:
            if rank is None:
                _retake(db, None)
            else:
                db.execute("INSERT INTO session_search (session_search, rank) "
                           "VALUES ('integrity-check', ?)", (rank,))
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY:
                return []  # the check is a write to SQLite: a read-only file cannot run it
            if rank is None:
                return [f"the full-text search index cannot take its changed rows ({exc})"]
            against = "its entries" if rank else "itself"
            return [f"the full-text search index does not match {against} ({exc})"]
    return []


def rebuild_index(db: sqlite3.Connection) -> None:
    """Make the full-text index again from the entry rows, every row indexed; inside
    the caller's write transaction. The rows are not touched. An index too damaged to
    be rebuilt in place is dropped and created again."""
    register(db)
    try:
        db.execute("INSERT INTO session_search (session_search) VALUES ('rebuild')")
    except sqlite3.DatabaseError:
        db.execute("DROP TABLE session_search")
        db.execute(SEARCH_TABLE)
        db.execute("INSERT INTO session_search (session_search) VALUES ('rebuild')")
    db.execute("DELETE FROM search_pending")
    db.execute("DELETE FROM search_stale")


INDEX_DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT_VTAB, sqlite3.SQLITE_CONSTRAINT)
"""What SQLite answers a write whose trigger meets a damaged full-text index: its
virtual table's corruption code, or a bare constraint failure (a ``delete`` of a
document the damaged index lacks). Every constraint of nonoka's own tables fails with an
extended code (``SQLITE_CONSTRAINT_PRIMARYKEY``, ``_CHECK``, …), never the bare one."""
