"""The SQLite schema's history: every named migration, oldest first. History only.

Every nonoka table in a database file is created by a migration in ``MIGRATIONS``,
applied by ``nonoka.store.sqlite.ledger`` (the names a file has applied are recorded in
it); the schema as it stands is ``docs/schema.md``, and the live rules of the entry rows
are ``nonoka.store.sqlite.entries``. Nothing else imports this module: a migration runs
the SQL it shipped with, written out here (a frozen copy where the live module keeps
the same text), and never changes once shipped (``tests/store/test_migration_history.py``
pins each one's text), so the modules older ones name may since have moved (``search``
and ``entry_docs`` are ``entries`` now). Adding a migration is one decorated function
after the last one. Standard library only (the bridge's early dispatch checks a file's
migrations before pydantic is loaded).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from nonoka.store import migrations as runner

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []
"""Every migration, oldest first; each one's ``__name__`` is its recorded name."""

migration = runner.registrar(MIGRATIONS)
"""Register a function as the next migration."""


@migration
def m001_checkpoint_tables(db: sqlite3.Connection) -> None:
    """Snapshots, append-only conversation entries, and the latest step updates."""
    db.execute(
        """CREATE TABLE checkpoints (
            session_id TEXT PRIMARY KEY,
            state_json TEXT NOT NULL,
            revision INTEGER NOT NULL,
            entry_count INTEGER NOT NULL,
            memory_generation INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )"""
    )
    # Clustered on the key: a session's entries sit together, with no separate index.
    db.execute(
        """CREATE TABLE session_entries (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            entry_json TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE step_updates (
            session_id TEXT NOT NULL,
            step_id TEXT NOT NULL,
            update_type TEXT NOT NULL,
            payload_json TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (session_id, step_id, update_type)
        )"""
    )


@migration
def m002_session_index_and_events(db: sqlite3.Connection) -> None:
    """The CLI's session index and each session's event log (see ``nonoka.store.records``).

    ``IF NOT EXISTS`` keeps the step idempotent. The conversation-key index is on the
    same ``json_extract`` expression the lookup uses (SQLite only uses an expression
    index for an identical expression), with ``last_active`` so the newest comes first
    without a sort.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS cli_sessions (
            session_id TEXT PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            last_active REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'created',
            turn_count INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata))
        )"""
    )
    db.execute(
        "CREATE INDEX IF NOT EXISTS cli_sessions_last_active ON cli_sessions (last_active)"
    )
    db.execute(
        """CREATE INDEX IF NOT EXISTS cli_sessions_conversation_key ON cli_sessions (
            json_extract(metadata, '$.conversation_key'), last_active
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            data_json TEXT NOT NULL CHECK (json_valid(data_json)),
            PRIMARY KEY (session_id, seq)
        )"""
    )


@migration
def m003_session_leases(db: sqlite3.Connection) -> None:
    """Who runs each session now (``nonoka.store.base.SessionLeases``).

    One row per leased session; ``expires_at`` is a ``time.time()`` timestamp, so a row
    left by a killed process stops counting once it has passed. Released leases are
    deleted; expired ones are overwritten by the next owner.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS session_leases (
            session_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL,
            acquired_at REAL NOT NULL
        )"""
    )


@migration
def m004_next_calls(db: sqlite3.Connection) -> None:
    """The request each session's next turn is expected to send (``nonoka.store.next_calls``).

    One row per session, replaced after each bridge turn; ``revision`` is the checkpoint
    revision it was computed from, so a row that a later save outdated is ignored.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS next_calls (
            session_id TEXT PRIMARY KEY,
            revision INTEGER NOT NULL,
            template_json TEXT NOT NULL
        )"""
    )


@migration
def m005_session_lineage(db: sqlite3.Connection) -> None:
    """Branches that share their parent's first entries (``nonoka.store.sqlite.lineage``).

    ``base_session_id`` names the session whose first ``base_count`` entries a branch
    shares; its own entry rows start there. Plain sessions keep ``NULL`` and 0.
    """
    db.execute("ALTER TABLE checkpoints ADD COLUMN base_session_id TEXT")
    db.execute("ALTER TABLE checkpoints ADD COLUMN base_count INTEGER NOT NULL DEFAULT 0")
    db.execute("CREATE INDEX checkpoints_base ON checkpoints (base_session_id) "
               "WHERE base_session_id IS NOT NULL")


@migration
def m006_entry_digest_chain(db: sqlite3.Connection) -> None:
    """The digest chain up to each entry (``nonoka.store.sqlite.digests``), by which a process knows
    the entries it decoded are still the stored ones; existing rows get theirs."""
    from nonoka.store.sqlite.digests import (
        Chain,  # not at import: the early path only checks versions
    )

    db.execute("ALTER TABLE session_entries ADD COLUMN key_chain TEXT")
    sessions = [r[0] for r in db.execute("SELECT DISTINCT session_id FROM session_entries")]
    for session_id in sessions:
        chain = Chain()
        rows = db.execute("SELECT seq, entry_json FROM session_entries WHERE session_id = ? "
                          "ORDER BY seq", (session_id,)).fetchall()
        updates = []
        for seq, text in rows:
            if not isinstance(text, str):
                break  # a corrupt row: the rest stays NULL, and loading it reports it
            chain = chain.add(text)
            updates.append((chain.encode(), session_id, seq))
        db.executemany("UPDATE session_entries SET key_chain = ? WHERE session_id = ? AND "
                       "seq = ?", updates)


SEARCH_BODY = ("CASE WHEN json_valid({e}) THEN coalesce(json_extract({e},'$.content'),'')"
               "||' '||coalesce(json_extract({e},'$.metadata.tool_calls'),'') ELSE {e} END")
"""The text full-text search indexes for an entry: its content and its tool calls (names
and arguments, as JSON text). A row that is not JSON is indexed as it is, so a damaged
row never makes a write fail."""


_M007_INDEXED_UPTO = "(SELECT seq FROM search_docs WHERE doc = 0)"
"""Where ``m007_search_index`` kept the last ``doc`` the full-text index holds (the
marker row ``doc = 0``); ``m008_search_doc_in_entry_row`` moved it to ``INDEXED_UPTO``."""


@migration
def m007_search_index(db: sqlite3.Connection) -> None:
    """Full-text search over conversation entries (``nonoka.ops.search``).

    ``session_search`` is an FTS5 index whose content is the view ``search_text`` (the
    text already lives in ``session_entries``, so it is not stored twice, and the table
    can still be read whole like any other); ``search_docs`` maps each entry to
    an increasing ``doc`` id (``AUTOINCREMENT``: never reused), the order in which
    entries were written, which gives "newest first" without a sort. Triggers keep
    ``search_docs`` in step with every write, whoever writes; the words themselves are
    indexed in batches, by ``nonoka.store.sqlite.search.catch_up`` before every search,
    up to the doc the marker row (``doc = 0``) records. So a turn's save pays for one
    small row per entry, not for indexing its text (bench/README.md). A deleted or
    changed entry leaves the index at once if it was indexed. Titles are few and short:
    search matches them in ``cli_sessions`` itself.

    The statements are kept short and the triggers are created first: the schema
    outgrows its first page here, and this keeps it to two more pages, right after the
    older tables.
    """
    old = SEARCH_BODY.format(e="old.entry_json")
    add = "INSERT INTO search_docs(session_id,seq)VALUES(new.session_id,new.seq);"
    forget = (f"INSERT INTO session_search(session_search,rowid,body)SELECT'delete',doc,{old} "
              "FROM search_docs WHERE session_id=old.session_id AND seq=old.seq "
              f"AND doc<={_M007_INDEXED_UPTO};"
              "DELETE FROM search_docs WHERE session_id=old.session_id AND seq=old.seq;")
    db.execute(f"CREATE TRIGGER search_insert AFTER INSERT ON session_entries BEGIN {add} END")
    db.execute(f"CREATE TRIGGER search_delete AFTER DELETE ON session_entries BEGIN {forget} "
               "END")
    db.execute(f"CREATE TRIGGER search_update AFTER UPDATE ON session_entries BEGIN {forget}"
               f"{add} END")
    text = SEARCH_BODY.format(e="e.entry_json")
    db.execute(f"CREATE VIEW search_text(doc,body)AS SELECT d.doc,{text}"
               " FROM search_docs d JOIN session_entries e ON e.session_id=d.session_id AND "
               "e.seq=d.seq")
    db.execute("CREATE VIRTUAL TABLE session_search USING fts5(body,content=search_text,"
               "content_rowid=doc,columnsize=0,tokenize='unicode61 remove_diacritics 0')")
    db.execute("CREATE TABLE search_docs(doc INTEGER PRIMARY KEY AUTOINCREMENT,session_id TEXT "
               "NOT NULL,seq INTEGER NOT NULL,UNIQUE(session_id,seq))")
    db.execute("INSERT INTO search_docs (doc, session_id, seq) VALUES (0, '', 0)")
    # The entries stored so far get their docs, oldest session first; the next search
    # indexes them.
    db.execute(
        """INSERT INTO search_docs (session_id, seq)
        SELECT e.session_id, e.seq FROM session_entries e
        LEFT JOIN checkpoints c ON c.session_id = e.session_id
        ORDER BY coalesce(c.updated_at, 0), e.session_id, e.seq"""
    )


INDEXED_UPTO = "(SELECT indexed FROM search_state)"
"""The last ``doc`` the full-text index holds."""

NEXT_DOC = ("max(coalesce((SELECT max(doc) FROM session_entries),0),"
            f"{INDEXED_UPTO})+1")
"""The ``doc`` of an entry written now: after every doc stored and every doc indexed.

Without a counter a doc id can come back once its entry is deleted, but only one that
was never indexed (a doc at or below ``INDEXED_UPTO`` is never given again), so the
index never takes a new entry for one it already holds."""


@migration
def m008_search_doc_in_entry_row(db: sqlite3.Connection) -> None:
    """Each entry's search ``doc`` becomes a column of its own row (indexed), instead of
    a row of ``search_docs`` (a table, its ``(session_id, seq)`` index and an
    ``AUTOINCREMENT`` counter: three more B-tree pages written by every save). The
    entries keep their doc ids, so the full-text index stays as it is; ``search_docs``
    remains as a view, and the indexed-up-to marker moves to ``search_state``.

    nonoka's writers give ``doc`` in their inserts (``NEXT_DOC``); a row inserted without
    one (by anything else) is numbered by ``nonoka.store.sqlite.search.catch_up`` before
    it indexes, so no insert trigger runs on a save (it cost ~2.5 µs a row even when it
    had nothing to do). A changed entry gets a new doc from the update trigger. Rewrites
    every entry row once (bench/README.md gives the time for a million entries).
    """
    for trigger in ("search_insert", "search_delete", "search_update"):
        db.execute(f"DROP TRIGGER {trigger}")
    db.execute("DROP VIEW search_text")
    db.execute("ALTER TABLE session_entries ADD COLUMN doc INTEGER")
    db.execute("UPDATE session_entries SET doc = d.doc FROM search_docs d "
               "WHERE d.session_id = session_entries.session_id "
               "AND d.seq = session_entries.seq AND d.doc > 0")
    db.execute("CREATE TABLE search_state(indexed INTEGER NOT NULL)")
    db.execute(f"INSERT INTO search_state SELECT {_M007_INDEXED_UPTO}")
    db.execute("DROP TABLE search_docs")
    db.execute("CREATE UNIQUE INDEX session_entries_doc ON session_entries (doc)")
    missing = db.execute("SELECT session_id, seq FROM session_entries WHERE doc IS NULL "
                         "ORDER BY session_id, seq").fetchall()
    db.executemany(f"UPDATE session_entries SET doc = {NEXT_DOC} "
                   "WHERE session_id = ? AND seq = ?", missing)
    db.execute("CREATE VIEW search_docs(doc,session_id,seq)AS SELECT doc,session_id,seq "
               "FROM session_entries WHERE doc IS NOT NULL")
    text = SEARCH_BODY.format(e="entry_json")
    db.execute(f"CREATE VIEW search_text(doc,body)AS SELECT doc,{text} FROM session_entries "
               "WHERE doc IS NOT NULL")
    here = "WHERE session_id=new.session_id AND seq=new.seq"
    renumber = f"UPDATE session_entries SET doc={NEXT_DOC} {here};"
    old = SEARCH_BODY.format(e="old.entry_json")
    forget = (f"INSERT INTO session_search(session_search,rowid,body)SELECT'delete',old.doc,"
              f"{old} WHERE old.doc<={INDEXED_UPTO};")
    db.execute(f"CREATE TRIGGER search_delete AFTER DELETE ON session_entries BEGIN {forget} "
               "END")
    db.execute("CREATE TRIGGER search_update AFTER UPDATE OF entry_json ON session_entries "
               f"BEGIN {forget}{renumber} END")


@migration
def m009_media(db: sqlite3.Connection) -> None:
    """Files stored once, by digest (``nonoka.store.media``): the ``media`` table (the
    bytes last in the row, so reading a file's type and size never reads its bytes),
    and each entry row's ``media`` column, the JSON array of the digests it refers to
    (``NULL`` for a row without files, which every existing row keeps: they load as
    they always did). The partial index holds only the rows that refer to files: the
    garbage collection of a delete reads it, a save of an entry without files never
    writes it. Nothing is rewritten."""
    db.execute(
        """CREATE TABLE media (
            digest TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            size INTEGER NOT NULL,
            created_at REAL NOT NULL,
            data BLOB NOT NULL
        )"""
    )
    db.execute("ALTER TABLE session_entries ADD COLUMN media TEXT")
    db.execute("CREATE INDEX session_entries_media ON session_entries (media) "
               "WHERE media IS NOT NULL")


_ENTRY_COLUMNS = "doc, session_id, seq, key_chain, media, entry_json"


@migration
def m010_compact_tables(db: sqlite3.Connection) -> None:
    """Smaller tables and fewer pages written a save (bench/README.md, ``store_size.py``).

    ``session_entries`` becomes a rowid table whose rowid is the search ``doc``, with a
    unique ``(session_id, seq)`` index: a ``WITHOUT ROWID`` table's interior pages carry
    copies of whole rows and its long rows spill onto mostly empty overflow pages, and
    the separate doc index goes. ``checkpoints`` keeps the snapshot in its last column,
    so the counters a save changes sit on the row's first page and a snapshot that did
    not change is not written again. The full-text index keeps which entries hold a word
    but no longer where (``detail=column``). Rewrites both tables once, keeping every
    doc number; the next search indexes every entry again, in batches. A row inserted
    without a doc by another writer gets one after every doc indexed (the
    ``search_renumber`` trigger; nonoka's writers give ``NEXT_DOC`` themselves, so it
    never fires for them).
    """
    for trigger in ("search_delete", "search_update"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for view in ("search_docs", "search_text"):
        db.execute(f"DROP VIEW IF EXISTS {view}")
    db.execute("ALTER TABLE session_entries RENAME TO session_entries_m009")
    db.execute("ALTER TABLE checkpoints RENAME TO checkpoints_m009")
    db.execute(
        """CREATE TABLE checkpoints (
            session_id TEXT PRIMARY KEY,
            revision INTEGER NOT NULL,
            entry_count INTEGER NOT NULL,
            memory_generation INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            base_session_id TEXT,
            base_count INTEGER NOT NULL DEFAULT 0,
            state_json TEXT NOT NULL
        )"""
    )
    db.execute("INSERT INTO checkpoints SELECT session_id, revision, entry_count, "
               "memory_generation, created_at, updated_at, base_session_id, base_count, "
               "state_json FROM checkpoints_m009 ORDER BY rowid")
    db.execute(
        """CREATE TABLE session_entries (
            doc INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            key_chain TEXT,
            media TEXT,
            entry_json TEXT NOT NULL
        )"""
    )
    db.execute(f"INSERT INTO session_entries ({_ENTRY_COLUMNS}) SELECT {_ENTRY_COLUMNS} "
               "FROM session_entries_m009 WHERE doc IS NOT NULL ORDER BY doc")
    missing = db.execute("SELECT session_id, seq, key_chain, media, entry_json "
                         "FROM session_entries_m009 WHERE doc IS NULL "
                         "ORDER BY session_id, seq").fetchall()
    for row in missing:  # one at a time: each takes the doc after the last
        db.execute(f"INSERT INTO session_entries ({_ENTRY_COLUMNS}) "
                   f"VALUES ({NEXT_DOC}, ?, ?, ?, ?, ?)", row)
    db.execute("DROP TABLE session_entries_m009")
    db.execute("DROP TABLE checkpoints_m009")
    # Word positions go (``detail=column``: less than half the index; search asks for
    # words, never phrases); everything is indexed again by the next search's catch-up.
    db.execute("DROP TABLE session_search")
    db.execute("CREATE VIRTUAL TABLE session_search USING fts5(body,content=search_text,"
               "content_rowid=doc,columnsize=0,detail=column,"
               "tokenize='unicode61 remove_diacritics 0')")
    db.execute("UPDATE search_state SET indexed = 0")
    db.execute("CREATE INDEX checkpoints_base ON checkpoints (base_session_id) "
               "WHERE base_session_id IS NOT NULL")
    db.execute("CREATE UNIQUE INDEX session_entries_key ON session_entries (session_id, seq)")
    db.execute("CREATE INDEX session_entries_media ON session_entries (media) "
               "WHERE media IS NOT NULL")
    # The views and triggers again, over the new table: m008's statements but for the
    # row a trigger addresses (by doc). Not shared with m008: a shipped migration is
    # never edited, so what it ran stays written out there.
    db.execute("CREATE VIEW search_docs(doc,session_id,seq)AS SELECT doc,session_id,seq "
               "FROM session_entries")
    text = SEARCH_BODY.format(e="entry_json")
    db.execute(f"CREATE VIEW search_text(doc,body)AS SELECT doc,{text} FROM session_entries")
    here = "WHERE doc=new.doc"
    renumber = f"UPDATE session_entries SET doc={NEXT_DOC} {here};"
    old = SEARCH_BODY.format(e="old.entry_json")
    forget = (f"INSERT INTO session_search(session_search,rowid,body)SELECT'delete',old.doc,"
              f"{old} WHERE old.doc<={INDEXED_UPTO};")
    db.execute(f"CREATE TRIGGER search_delete AFTER DELETE ON session_entries BEGIN {forget} "
               "END")
    db.execute("CREATE TRIGGER search_update AFTER UPDATE OF entry_json ON session_entries "
               f"BEGIN {forget}{renumber} END")
    db.execute(f"CREATE TRIGGER search_renumber AFTER INSERT ON session_entries "
               f"WHEN new.doc<={INDEXED_UPTO} BEGIN {renumber} END")


@migration
def m011_events_clustered(db: sqlite3.Connection) -> None:
    """The event log clustered on its key (``WITHOUT ROWID``): an append writes the
    table's page, not the table's and its key index's (9.2 → 6.1 KiB written an event,
    bench/README.md, ``store_size.py``); its rows are small, so its interior pages stay
    small too. Rewrites the log once. A row whose JSON was damaged behind the check's
    back is copied as it is: the readers report it, the upgrade does not refuse the file."""
    db.execute("ALTER TABLE events RENAME TO events_m010")
    db.execute(
        """CREATE TABLE events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            data_json TEXT NOT NULL CHECK (json_valid(data_json)),
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID"""
    )
    db.execute("PRAGMA ignore_check_constraints = ON")
    try:
        db.execute("INSERT INTO events (session_id, seq, at, kind, data_json) "
                   "SELECT session_id, seq, at, kind, data_json FROM events_m010")
    finally:
        db.execute("PRAGMA ignore_check_constraints = OFF")
    db.execute("DROP TABLE events_m010")


@migration
def m012_session_list_lookups(db: sqlite3.Connection) -> None:
    """The session list's lookups indexed by what they look up. The conversation key's
    index loses ``last_active`` (a key has a few rows, sorted after the lookup), so the
    row written after every turn, whose metadata seldom changes, moves no entry of it;
    the host's own conversation id, which the bridge looks up on every request, gets an
    index (a scan of the whole list before: 6 ms at 10,000 sessions, 30 ms at 50,000)."""
    db.execute("DROP INDEX IF EXISTS cli_sessions_conversation_key")
    db.execute("CREATE INDEX cli_sessions_conversation_key ON cli_sessions ("
               "json_extract(metadata, '$.conversation_key'))")
    db.execute("CREATE INDEX cli_sessions_host_session ON cli_sessions ("
               "json_extract(metadata, '$.host_session_id'))")


@migration
def m013_list_order(db: sqlite3.Connection) -> None:
    """The session list ordered by ``list_order`` (``nonoka.store.index_sql``) instead of
    ``last_active``: the most recent session's row keeps its place, so the write after
    each of its turns writes the row's page and no index page. Every row starts with
    ``list_order = last_active``; a row inserted without one (by another writer) gets
    its ``last_active``."""
    db.execute("ALTER TABLE cli_sessions ADD COLUMN list_order REAL")
    db.execute("UPDATE cli_sessions SET list_order = last_active")
    db.execute("DROP INDEX IF EXISTS cli_sessions_last_active")
    db.execute("CREATE INDEX cli_sessions_list_order ON cli_sessions (list_order)")
    db.execute("CREATE TRIGGER cli_sessions_list_order AFTER INSERT ON cli_sessions "
               "WHEN new.list_order IS NULL BEGIN UPDATE cli_sessions SET "
               "list_order = new.last_active WHERE session_id = new.session_id; END")


_M014_OWNED = ("(SELECT entry_block*4294967296+new.seq FROM checkpoints "
               "WHERE session_id=new.session_id)")
_M014_PLACED = (f"coalesce({_M014_OWNED},min(0,coalesce((SELECT min(doc) FROM "
                "session_entries),0))-1)")
"""Where an entry row belongs (``nonoka.store.sqlite.entry_docs``): in its session's
block, or, for a row no checkpoint owns, below every row, where no block reaches."""
_M014_MOVED = f"coalesce({_M014_OWNED},(SELECT min(doc) FROM session_entries))"
"""Where ``entries_place`` put the row: ``_M014_PLACED`` as it was before the move."""


def _m014_index(doc: str, text: str) -> str:
    """The statements that keep the full-text index's promise for a row that now holds
    ``text`` at ``doc``: index it at once when it lies below its block's watermark (or
    the block has none and rows above it), else leave it to the catch-up, marking the
    block as waiting from this row if it was not waiting yet."""
    block = f"({doc})>>32"
    end = f"(({doc})>>32)+1<<32"
    above = f"EXISTS(SELECT 1 FROM session_entries WHERE doc>{doc} AND doc<{end})"
    waiting = f"(SELECT from_doc FROM search_pending WHERE block={block})"
    body = SEARCH_BODY.format(e=text)
    return (f"INSERT INTO session_search(rowid,body)SELECT {doc},{body} WHERE {doc}<"
            f"coalesce({waiting},CASE WHEN {above} THEN {doc}+1 ELSE {doc} END);"
            f"INSERT OR IGNORE INTO search_pending(block,from_doc)SELECT {block},{doc} "
            f"WHERE NOT {above};")


def _m014_forget(doc: str, text: str) -> str:
    """The statements that take a row at ``doc`` out of the full-text index if it is
    there (below its block's watermark, or its block has none), and end the block's
    wait once no row at or above the watermark is left."""
    block = f"({doc})>>32"
    end = f"(({doc})>>32)+1<<32"
    body = SEARCH_BODY.format(e=text)
    return (f"INSERT INTO session_search(session_search,rowid,body)SELECT'delete',{doc},{body}"
            f" WHERE {doc}<coalesce((SELECT from_doc FROM search_pending WHERE block={block}),"
            f"{doc}+1);"
            f"DELETE FROM search_pending WHERE block={block} AND NOT EXISTS(SELECT 1 FROM "
            f"session_entries WHERE doc>=from_doc AND doc<{end});")


@migration
def m014_entries_by_session(db: sqlite3.Connection) -> None:
    """Each session's entry rows one run of rowids (``nonoka.store.sqlite.entry_docs``):
    its checkpoint row gets an ``entry_block`` number, and entry ``seq`` of the session
    is row ``entry_block << 32 | seq``. The table is its own key: the ``(session_id,
    seq)`` index goes, and an append writes the table's page and nothing else (2.01 →
    1.4 times a raw append's bytes, bench/README.md, ``store_size.py``).

    The row's number is still the full-text index's document id. Documents are no
    longer numbered in the order they were written, so the index's catch-up keeps a
    watermark per block instead of one for the file: ``search_pending`` holds, for each
    block with rows not indexed yet, the first of them (every row of the block below it
    is indexed, every row from it on is not). The triggers keep that true whoever
    writes: a row added at the end of its block waits for the catch-up (the block's
    watermark is written once, when it starts waiting); one added or changed below the
    watermark is indexed at once; a deleted or changed row leaves the index if it was
    in it. A row written by another program at another place is moved to its block
    (``entries_place``); one no checkpoint owns goes below every row, and into the
    session's block when its checkpoint row comes (``checkpoints_insert``).

    Rewrites the checkpoint and entry tables once (``entry_block`` before the snapshot:
    reading it never reads the snapshot's overflow pages) and the full-text index, which
    the next search builds again in batches.
    """
    for trigger in ("search_delete", "search_update", "search_renumber"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for view in ("search_docs", "search_text"):
        db.execute(f"DROP VIEW IF EXISTS {view}")
    db.execute("DROP TABLE session_search")
    db.execute("DROP TABLE search_state")
    db.execute("ALTER TABLE checkpoints RENAME TO checkpoints_m013")
    db.execute(
        """CREATE TABLE checkpoints (
            session_id TEXT PRIMARY KEY,
            entry_block INTEGER,
            revision INTEGER NOT NULL,
            entry_count INTEGER NOT NULL,
            memory_generation INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            base_session_id TEXT,
            base_count INTEGER NOT NULL DEFAULT 0,
            state_json TEXT NOT NULL
        )"""
    )
    db.execute("INSERT INTO checkpoints SELECT session_id, row_number() OVER (ORDER BY "
               "created_at, rowid), revision, entry_count, memory_generation, created_at, "
               "updated_at, base_session_id, base_count, state_json FROM checkpoints_m013 "
               "ORDER BY rowid")
    db.execute("DROP TABLE checkpoints_m013")
    db.execute("CREATE INDEX checkpoints_base ON checkpoints (base_session_id) "
               "WHERE base_session_id IS NOT NULL")
    db.execute("CREATE UNIQUE INDEX checkpoints_entry_block ON checkpoints (entry_block)")
    db.execute("ALTER TABLE session_entries RENAME TO session_entries_m013")
    db.execute(
        """CREATE TABLE session_entries (
            doc INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL CHECK (seq BETWEEN 0 AND 4294967295),
            key_chain TEXT,
            media TEXT,
            entry_json TEXT NOT NULL
        )"""
    )
    columns = "session_id, seq, key_chain, media, entry_json"
    db.execute(f"INSERT INTO session_entries (doc, {columns}) SELECT c.entry_block*4294967296"
               f"+e.seq, e.{columns.replace(', ', ', e.')} FROM session_entries_m013 e "
               "JOIN checkpoints c ON c.session_id = e.session_id "
               "WHERE e.seq BETWEEN 0 AND 4294967295 ORDER BY 1")
    # Rows no checkpoint owns (or out of range) are kept, below zero.
    db.execute(f"INSERT INTO session_entries (doc, {columns}) SELECT -row_number() OVER "
               f"(ORDER BY e.session_id, e.seq), e.session_id, max(0, min(e.seq, 4294967295)),"
               " e.key_chain, e.media, e.entry_json FROM session_entries_m013 e "
               "WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.session_id = "
               "e.session_id) OR e.seq NOT BETWEEN 0 AND 4294967295")
    db.execute("DROP TABLE session_entries_m013")
    db.execute("CREATE INDEX session_entries_media ON session_entries (media) "
               "WHERE media IS NOT NULL")
    db.execute("CREATE INDEX session_entries_unowned ON session_entries (session_id) "
               "WHERE doc < 0")
    db.execute("CREATE TABLE search_pending(block INTEGER PRIMARY KEY,from_doc INTEGER NOT NULL)")
    db.execute("INSERT INTO search_pending SELECT doc>>32, min(doc) FROM session_entries "
               "GROUP BY doc>>32")
    text = SEARCH_BODY.format(e="entry_json")
    db.execute(f"CREATE VIEW search_text(doc,body)AS SELECT doc,{text} FROM session_entries")
    db.execute("CREATE VIRTUAL TABLE session_search USING fts5(body,content=search_text,"
               "content_rowid=doc,columnsize=0,detail=column,"
               "tokenize='unicode61 remove_diacritics 0')")
    placed = _M014_PLACED
    # The usual append (its block already waiting, from a row before it) does nothing:
    # the condition says so before the statements are run.
    waits = ("coalesce((SELECT from_doc FROM search_pending WHERE block=new.doc>>32)>new.doc,"
             "1)")
    db.execute(f"CREATE TRIGGER search_insert AFTER INSERT ON session_entries "
               f"WHEN new.doc={placed} AND {waits} BEGIN "
               f"{_m014_index('new.doc', 'new.entry_json')} END")
    db.execute(f"CREATE TRIGGER entries_place AFTER INSERT ON session_entries "
               f"WHEN new.doc<>{placed} BEGIN UPDATE session_entries SET doc={placed} "
               f"WHERE doc=new.doc;{_m014_index(_M014_MOVED, 'new.entry_json')} END")
    db.execute("CREATE TRIGGER search_delete AFTER DELETE ON session_entries BEGIN "
               f"{_m014_forget('old.doc', 'old.entry_json')} END")
    db.execute("CREATE TRIGGER search_update AFTER UPDATE OF entry_json ON session_entries "
               f"BEGIN {_m014_forget('old.doc', 'old.entry_json')}"
               f"{_m014_index('new.doc', 'new.entry_json')} END")
    # A checkpoint row written without a block gets one; rows its session already has
    # below zero (written before it, by another program) move into the block when it
    # holds none yet: out of the index if they were in it, then waiting for the
    # catch-up there (each statement checks the block is empty before any row moves).
    block = "(SELECT entry_block FROM checkpoints WHERE session_id=new.session_id)"
    unowned = "FROM session_entries WHERE doc<0 AND session_id=new.session_id"
    empty = (f"NOT EXISTS(SELECT 1 FROM session_entries WHERE doc BETWEEN {block}*4294967296"
             f" AND {block}*4294967296+4294967295)")
    db.execute(
        "CREATE TRIGGER checkpoints_insert AFTER INSERT ON checkpoints BEGIN "
        "UPDATE checkpoints SET entry_block=max(coalesce((SELECT max(entry_block) FROM "
        "checkpoints),0),coalesce((SELECT max(doc) FROM session_entries),0)>>32)+1 "
        "WHERE session_id=new.session_id AND entry_block IS NULL;"
        "INSERT INTO session_search(session_search,rowid,body)SELECT'delete',doc,"
        f"{SEARCH_BODY.format(e='entry_json')} {unowned} AND doc<coalesce((SELECT from_doc "
        f"FROM search_pending WHERE block=-1),0) AND {empty};"
        f"INSERT OR IGNORE INTO search_pending(block,from_doc)SELECT {block},"
        f"{block}*4294967296+min(seq) {unowned} AND {empty} HAVING count(*)>0;"
        f"UPDATE session_entries SET doc={block}*4294967296+seq WHERE doc<0 AND "
        f"session_id=new.session_id AND {empty}; END")


_M015_SCHEMA = (
    """CREATE VIEW search_text (doc, body) AS
SELECT doc, CASE WHEN json_valid(entry_json)
    THEN coalesce(json_extract(entry_json, '$.content'), '') || ' ' ||
         coalesce(json_extract(entry_json, '$.metadata.tool_calls'), '')
    ELSE entry_json END
FROM session_entries""",
    """CREATE TRIGGER search_insert AFTER INSERT ON session_entries
WHEN coalesce((SELECT from_doc FROM search_pending WHERE block = new.doc >> 32) > new.doc, 1)
BEGIN
    INSERT INTO session_search (rowid, body)
    SELECT new.doc, CASE WHEN json_valid(new.entry_json)
        THEN coalesce(json_extract(new.entry_json, '$.content'), '') || ' ' ||
             coalesce(json_extract(new.entry_json, '$.metadata.tool_calls'), '')
        ELSE new.entry_json END
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
    INSERT INTO session_search (session_search, rowid, body)
    SELECT 'delete', old.doc, CASE WHEN json_valid(old.entry_json)
        THEN coalesce(json_extract(old.entry_json, '$.content'), '') || ' ' ||
             coalesce(json_extract(old.entry_json, '$.metadata.tool_calls'), '')
        ELSE old.entry_json END
    WHERE old.doc < coalesce(
        (SELECT from_doc FROM search_pending WHERE block = old.doc >> 32), old.doc + 1);
    DELETE FROM search_pending
    WHERE block = old.doc >> 32 AND NOT EXISTS (
        SELECT 1 FROM session_entries
        WHERE doc >= from_doc AND doc < ((old.doc >> 32) + 1) << 32);
END""",
    """CREATE TRIGGER search_update AFTER UPDATE OF entry_json ON session_entries
BEGIN
    INSERT INTO session_search (session_search, rowid, body)
    SELECT 'delete', old.doc, CASE WHEN json_valid(old.entry_json)
        THEN coalesce(json_extract(old.entry_json, '$.content'), '') || ' ' ||
             coalesce(json_extract(old.entry_json, '$.metadata.tool_calls'), '')
        ELSE old.entry_json END
    WHERE old.doc < coalesce(
        (SELECT from_doc FROM search_pending WHERE block = old.doc >> 32), old.doc + 1);
    DELETE FROM search_pending
    WHERE block = old.doc >> 32 AND NOT EXISTS (
        SELECT 1 FROM session_entries
        WHERE doc >= from_doc AND doc < ((old.doc >> 32) + 1) << 32);
    INSERT INTO session_search (rowid, body)
    SELECT new.doc, CASE WHEN json_valid(new.entry_json)
        THEN coalesce(json_extract(new.entry_json, '$.content'), '') || ' ' ||
             coalesce(json_extract(new.entry_json, '$.metadata.tool_calls'), '')
        ELSE new.entry_json END
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
"""The view and triggers of ``m015_entry_rules_in_one_place``, as it installs them."""


@migration
def m015_entry_rules_in_one_place(db: sqlite3.Connection) -> None:
    """The entry rows' view and triggers as ``nonoka.store.sqlite.entries`` writes them
    out (the frozen copy ``_M015_SCHEMA``), without the machinery for rows other programs
    write: a new checkpoint row's block is chosen by the store that inserts it, not by
    ``checkpoints_insert``; a row written at a wrong place stays there (``entries_place``
    is gone) until ``nonoka db check --repair`` moves it; rows an older file keeps below
    zero stay (``db check`` reports them) but lose their index. The full-text index and
    its watermarks are kept as they are: the search triggers do what m014's did."""
    for trigger in ("search_insert", "entries_place", "search_delete", "search_update",
                    "checkpoints_insert"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    db.execute("DROP INDEX IF EXISTS session_entries_unowned")
    db.execute("DROP VIEW IF EXISTS search_text")
    for statement in _M015_SCHEMA:
        db.execute(statement)


@migration
def m016_serve_keys(db: sqlite3.Connection) -> None:
    """The API keys of ``nonoka serve`` (``nonoka serve keys``): a key is kept as its
    SHA-256 digest only, with the owner whose stored responses it reaches, its name and
    the first characters clients show; a revoked key keeps its row (``revoked_at``)."""
    db.execute("""CREATE TABLE serve_keys (
        key_id TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        shown TEXT NOT NULL,
        created_at REAL NOT NULL,
        revoked_at REAL
    )""")


_M017_SCHEMA = (
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
"""The table, view and triggers of ``m017_entries_deflated``, as it installs them."""


@migration
def m017_entries_deflated(db: sqlite3.Connection) -> None:
    """Entry rows may hold their JSON deflated (``nonoka.store.sqlite.packing``: a blob
    where the JSON was text; 1,480 → 590 bytes a turn of a ``nonoka serve`` chain,
    bench/README.md), so what the full-text index reads goes through the SQL function
    ``entry_text``, which nonoka's connections have and other programs' do not. The
    triggers therefore no longer read a row's text: a row added, changed or deleted
    below its block's watermark is noted in ``search_stale`` (its document id, and the
    stored value the index holds for it), and the next catch-up takes the old text out
    of the index and the new row in (``nonoka.store.sqlite.entries``). Existing rows
    are kept as they are (text), and so is the index: every row it holds is one the
    new view reads the same. Nothing is rewritten."""
    for trigger in ("search_insert", "search_delete", "search_update"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    db.execute("DROP VIEW IF EXISTS search_text")
    for statement in _M017_SCHEMA:
        db.execute(statement)


@migration
def m018_events_deflated(db: sqlite3.Connection) -> None:
    """Timeline rows may hold their JSON deflated too (``nonoka.store.sqlite.packing``,
    with a dictionary of their own: a ``nonoka serve`` turn's five rows 737 → 331 bytes
    of JSON), so the check on ``data_json`` takes a blob as well as valid JSON text, and
    readers go through ``entry_text``. SQLite cannot change a check in place: the log is
    rewritten once, as ``m011_events_clustered`` did (a damaged row copied as it is)."""
    db.execute("ALTER TABLE events RENAME TO events_m017")
    db.execute(
        """CREATE TABLE events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            data_json TEXT NOT NULL CHECK (typeof(data_json) = 'blob' OR json_valid(data_json)),
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID"""
    )
    db.execute("PRAGMA ignore_check_constraints = ON")
    try:
        db.execute("INSERT INTO events (session_id, seq, at, kind, data_json) "
                   "SELECT session_id, seq, at, kind, data_json FROM events_m017")
    finally:
        db.execute("PRAGMA ignore_check_constraints = OFF")
    db.execute("DROP TABLE events_m017")



_M019_SCHEMA = (
    """CREATE TABLE session_numbers (
    number INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE
)""",
    """CREATE TABLE timeline_kinds (
    code INTEGER PRIMARY KEY,
    kind TEXT NOT NULL UNIQUE
)""",
    """CREATE TABLE timeline (
    number INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind_code INTEGER NOT NULL,
    data_json TEXT NOT NULL CHECK (typeof(data_json) = 'blob' OR json_valid(data_json)),
    PRIMARY KEY (number, seq)
) WITHOUT ROWID""",
    """CREATE VIEW events (session_id, seq, at, kind, data_json) AS
SELECT n.session_id, t.seq, t.at, k.kind, t.data_json
FROM timeline t
JOIN session_numbers n ON n.number = t.number
JOIN timeline_kinds k ON k.code = t.kind_code""",
    """CREATE TRIGGER events_insert INSTEAD OF INSERT ON events
BEGIN
    INSERT INTO session_numbers (session_id)
    SELECT new.session_id
    WHERE NOT EXISTS (SELECT 1 FROM session_numbers WHERE session_id = new.session_id);
    INSERT INTO timeline_kinds (kind)
    SELECT new.kind
    WHERE NOT EXISTS (SELECT 1 FROM timeline_kinds WHERE kind = new.kind);
    INSERT INTO timeline (number, seq, at, kind_code, data_json)
    SELECT (SELECT number FROM session_numbers WHERE session_id = new.session_id),
        new.seq, new.at, (SELECT code FROM timeline_kinds WHERE kind = new.kind),
        new.data_json;
END""",
    """CREATE TRIGGER events_update INSTEAD OF UPDATE ON events
BEGIN
    INSERT INTO session_numbers (session_id)
    SELECT new.session_id
    WHERE NOT EXISTS (SELECT 1 FROM session_numbers WHERE session_id = new.session_id);
    INSERT INTO timeline_kinds (kind)
    SELECT new.kind
    WHERE NOT EXISTS (SELECT 1 FROM timeline_kinds WHERE kind = new.kind);
    UPDATE timeline SET
        number = (SELECT number FROM session_numbers WHERE session_id = new.session_id),
        seq = new.seq, at = new.at,
        kind_code = (SELECT code FROM timeline_kinds WHERE kind = new.kind),
        data_json = new.data_json
    WHERE number = (SELECT number FROM session_numbers WHERE session_id = old.session_id)
      AND seq = old.seq;
END""",
    """CREATE TRIGGER events_delete INSTEAD OF DELETE ON events
BEGIN
    DELETE FROM timeline
    WHERE number = (SELECT number FROM session_numbers WHERE session_id = old.session_id)
      AND seq = old.seq;
END""",
)
"""The tables, view and triggers of ``m019_timeline_numbered``, as it installs them."""


@migration
def m019_timeline_numbered(db: sqlite3.Connection) -> None:
    """The timeline keyed by a number per session and its kinds numbered too
    (``nonoka.store.sqlite.timeline``): ``session_numbers`` gives each session with a
    timeline its number and ``timeline_kinds`` each kind its code, and the rows move to
    ``timeline``, keyed ``(number, seq)``, instead of repeating the 36-character session
    id and the kind's name in every row (a ``nonoka serve`` turn logs five rows).
    ``events`` becomes a view with the columns it had, so every reader reads as before,
    and its triggers write the tables for a writer that inserts, changes or deletes
    through it. Rewrites the log once, keeping every row (a damaged one copied as it is,
    as ``m018_events_deflated`` did)."""
    db.execute("ALTER TABLE events RENAME TO events_m018")
    for statement in _M019_SCHEMA[:3]:
        db.execute(statement)
    db.execute("INSERT INTO session_numbers (session_id) "
               "SELECT DISTINCT session_id FROM events_m018 ORDER BY session_id")
    db.execute("INSERT INTO timeline_kinds (kind) "
               "SELECT DISTINCT kind FROM events_m018 ORDER BY kind")
    db.execute("PRAGMA ignore_check_constraints = ON")
    try:
        db.execute("INSERT INTO timeline (number, seq, at, kind_code, data_json) "
                   "SELECT n.number, e.seq, e.at, k.code, e.data_json FROM events_m018 e "
                   "JOIN session_numbers n ON n.session_id = e.session_id "
                   "JOIN timeline_kinds k ON k.kind = e.kind ORDER BY 1, 2")
    finally:
        db.execute("PRAGMA ignore_check_constraints = OFF")
    db.execute("DROP TABLE events_m018")
    for statement in _M019_SCHEMA[3:]:
        db.execute(statement)


@migration
def m020_serve_files(db: sqlite3.Connection) -> None:
    """The files of ``nonoka serve``'s Files API (``nonoka.store.files``): one row
    per uploaded file with its owner, name, purpose, media type and size; the bytes are
    the ``media`` table's, under ``digest``, stored once whatever the number of files and
    entries holding them. A deleted file keeps its row (``deleted_at``) and stops
    keeping its bytes: the media collection keeps a file that an entry row or a live
    file refers to."""
    db.execute("""CREATE TABLE serve_files (
        file_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        media_type TEXT NOT NULL,
        digest TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at REAL NOT NULL,
        deleted_at REAL
    )""")
    db.execute("CREATE INDEX serve_files_owner ON serve_files (owner, created_at, file_id) "
               "WHERE deleted_at IS NULL")
    db.execute("CREATE INDEX serve_files_digest ON serve_files (digest) "
               "WHERE deleted_at IS NULL")
