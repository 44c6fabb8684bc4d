"""The PostgreSQL schema's history: every named migration, oldest first. History only.

Every nonoka table in a schema is created by a migration in ``MIGRATIONS``, applied by
``nonoka.store.postgres.ledger``; the schema as it stands is ``docs/schema.md``, and the
expressions live queries share with its indexes are ``nonoka.store.postgres.schema``'s.
Nothing else imports this module: a migration runs the SQL it shipped with, written out
here, and never changes once shipped (``tests/store/test_migration_history.py`` pins each
one's text).

Column types: the stored JSON is ``text`` (it goes back out byte for byte and a corrupt
row stays readable for the error message); session ids sort with ``COLLATE "C"``, i.e.
by code point as the SQLite and memory engines do, which also lets a prefix ``LIKE`` use
the primary key; event data is ``json`` (kept as written, ``\\u0000`` included, yet
queryable for the usage summary); index metadata is ``jsonb`` for the key lookup.
Adding a migration is one decorated function after the last one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nonoka.store import migrations as runner

if TYPE_CHECKING:
    from psycopg import AsyncConnection

Migration = Callable[["AsyncConnection[Any]"], Awaitable[None]]

MIGRATIONS: list[Migration] = []
"""Every migration, oldest first; each one's ``__name__`` is its recorded name."""

migration = runner.registrar(MIGRATIONS)
"""Register a function as the next migration."""


@migration
async def m001_checkpoint_tables(conn: AsyncConnection[Any]) -> None:
    """Snapshots, append-only conversation entries, and the latest step updates."""
    await conn.execute(
        """CREATE TABLE checkpoints (
            session_id text COLLATE "C" PRIMARY KEY,
            state_json text NOT NULL,
            revision bigint NOT NULL,
            entry_count integer NOT NULL,
            memory_generation integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        )""")
    await conn.execute(
        """CREATE TABLE session_entries (
            session_id text COLLATE "C" NOT NULL,
            seq integer NOT NULL,
            entry_json text NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""")
    await conn.execute(
        """CREATE TABLE step_updates (
            session_id text COLLATE "C" NOT NULL,
            step_id text NOT NULL,
            update_type text NOT NULL,
            payload_json text NOT NULL,
            updated_at double precision NOT NULL,
            id bigint GENERATED ALWAYS AS IDENTITY,
            PRIMARY KEY (session_id, step_id, update_type)
        )""")


@migration
async def m002_session_index_and_events(conn: AsyncConnection[Any]) -> None:
    """The session index and each session's event log (``nonoka.store.records``)."""
    await conn.execute(
        """CREATE TABLE cli_sessions (
            session_id text COLLATE "C" PRIMARY KEY,
            title text NOT NULL DEFAULT '',
            model text NOT NULL DEFAULT '',
            created_at double precision NOT NULL,
            last_active double precision NOT NULL,
            status text NOT NULL DEFAULT 'created',
            turn_count bigint NOT NULL DEFAULT 0,
            message_count bigint NOT NULL DEFAULT 0,
            input_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            cost_usd double precision NOT NULL DEFAULT 0,
            metadata jsonb NOT NULL DEFAULT '{}'
        )""")
    await conn.execute("CREATE INDEX cli_sessions_last_active ON cli_sessions (last_active)")
    # The lookup's expression, exactly, so the planner uses the index.
    await conn.execute(
        """CREATE INDEX cli_sessions_conversation_key
            ON cli_sessions ((metadata ->> 'conversation_key'), last_active)""")
    await conn.execute(
        """CREATE TABLE events (
            session_id text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            at double precision NOT NULL,
            kind text NOT NULL,
            data_json json NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""")


@migration
async def m003_session_leases(conn: AsyncConnection[Any]) -> None:
    """Who runs each session now; the database's clock decides expiry, so workers on
    many machines share it."""
    await conn.execute(
        """CREATE TABLE session_leases (
            session_id text COLLATE "C" PRIMARY KEY,
            owner text NOT NULL,
            expires_at timestamptz NOT NULL,
            acquired_at timestamptz NOT NULL
        )""")


@migration
async def m005_session_lineage(conn: AsyncConnection[Any]) -> None:
    """Branches that share their parent's first entries: ``base_session_id`` names the
    session whose first ``base_count`` entries a branch shares."""
    await conn.execute("ALTER TABLE checkpoints ADD COLUMN base_session_id text COLLATE \"C\"")
    await conn.execute(
        "ALTER TABLE checkpoints ADD COLUMN base_count integer NOT NULL DEFAULT 0")
    await conn.execute("CREATE INDEX checkpoints_base ON checkpoints (base_session_id) "
                       "WHERE base_session_id IS NOT NULL")


SEARCH_CONFIG = "simple"
"""The text search configuration: lower-cased words, no stemming and no stop words, the
closest match to SQLite FTS5's ``unicode61`` tokenizer (``nonoka.ops.search``)."""
ENTRY_VECTOR = "to_tsvector('simple', nonoka_search_text({e}))"
"""The expression the entry search index is built on; queries must use it verbatim."""


@migration
async def m006_search_index(conn: AsyncConnection[Any]) -> None:
    """Full-text search over conversation entries (``nonoka.ops.search``).

    A GIN expression index: nothing is stored twice and no table is rewritten. Titles
    are few and short: search matches them in ``cli_sessions`` itself.
    ``nonoka_search_text`` is an entry's content and its tool calls (as JSON text); a
    row that is not JSON (or holds what ``json`` cannot turn into text) is indexed as it
    is, and the text is cut at 100,000 characters (a ``tsvector`` holds at most 1 MB), so
    indexing never makes a write fail.
    """
    await conn.execute(
        """CREATE FUNCTION nonoka_search_text(entry text) RETURNS text
        LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
        BEGIN
            RETURN left(coalesce(entry::json ->> 'content', '') || ' ' ||
                        coalesce(entry::json -> 'metadata' ->> 'tool_calls', ''), 100000);
        EXCEPTION WHEN others THEN
            RETURN left(entry, 100000);
        END $$""")
    await conn.execute(
        f"CREATE INDEX session_entries_search ON session_entries "
        f"USING gin (({ENTRY_VECTOR.format(e='entry_json')}))")


MEDIA_REFS = "nonoka_media({m})"
"""The digests an entry row's ``media`` column names, as a ``text[]`` (a damaged value
names none); the expression the references index is built on."""


@migration
async def m007_media(conn: AsyncConnection[Any]) -> None:
    """Files stored once, by digest (``nonoka.store.media``): the ``media`` table (its
    bytes kept out of line and not compressed: images and PDFs are compressed already),
    and each entry row's ``media`` column, the JSON array of the digests it refers to
    (``NULL`` for a row without files, which every existing row keeps: they load as they
    always did). Two partial indexes hold only the rows that refer to files, so a save of
    an entry without files never writes them: one finds a session's such rows (a load
    asks for them in its own statement), the other, a GIN index on the digests, whether
    any row still refers to a file (a delete's garbage collection). Nothing is
    rewritten."""
    await conn.execute(
        """CREATE TABLE media (
            digest text COLLATE "C" PRIMARY KEY,
            media_type text NOT NULL,
            size bigint NOT NULL,
            created_at double precision NOT NULL,
            data bytea NOT NULL
        )""")
    await conn.execute("ALTER TABLE media ALTER COLUMN data SET STORAGE EXTERNAL")
    await conn.execute("ALTER TABLE session_entries ADD COLUMN media text")
    await conn.execute(
        """CREATE FUNCTION nonoka_media(media text) RETURNS text[]
        LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
        BEGIN
            RETURN ARRAY(SELECT jsonb_array_elements_text(media::jsonb));
        EXCEPTION WHEN others THEN
            RETURN '{}'::text[];
        END $$""")
    await conn.execute("CREATE INDEX session_entries_media ON session_entries "
                       "(session_id, seq) WHERE media IS NOT NULL")
    await conn.execute(f"CREATE INDEX session_entries_media_refs ON session_entries "
                       f"USING gin (({MEDIA_REFS.format(m='media')})) WHERE media IS NOT NULL")


@migration
async def m008_compact_tables(conn: AsyncConnection[Any]) -> None:
    """Tables that keep their size (bench/README.md, ``store_size.py``).

    Every save updates its session's ``checkpoints`` row and every turn its
    ``cli_sessions`` row. With pages filled to half, the new version finds room on its
    own page, and the next update there prunes the dead one without waiting for
    ``VACUUM``; full pages sent each version to a new page, leaving the old ones dead
    until autovacuum came (a 5,000-message session built in seconds: 8 MB of dead
    snapshots for one live row). The search index's pending list (new entries not yet
    merged into the index proper) is held to 128 kB instead of 4 MB: its pages, once
    merged, stay allocated, and a search reads the whole list. Nothing is rewritten:
    pages already full stay so until the table is rewritten (``VACUUM FULL``)."""
    await conn.execute("ALTER TABLE checkpoints SET (fillfactor = 50)")
    await conn.execute("ALTER TABLE cli_sessions SET (fillfactor = 50)")
    await conn.execute("ALTER INDEX session_entries_search SET (gin_pending_list_limit = 128)")


@migration
async def m009_session_list_lookups(conn: AsyncConnection[Any]) -> None:
    """The session list's lookups indexed by what they look up, as on SQLite: the
    conversation key's index without ``last_active`` (a key has a few rows, sorted after
    the lookup), and the host's own conversation id, which the bridge looks up on every
    request, indexed (a scan of the whole list before)."""
    await conn.execute("DROP INDEX IF EXISTS cli_sessions_conversation_key")
    await conn.execute("CREATE INDEX cli_sessions_conversation_key "
                       "ON cli_sessions ((metadata ->> 'conversation_key'))")
    await conn.execute("CREATE INDEX cli_sessions_host_session "
                       "ON cli_sessions ((metadata ->> 'host_session_id'))")


@migration
async def m010_list_order(conn: AsyncConnection[Any]) -> None:
    """The session list ordered by ``list_order`` (``nonoka.store.index_sql``), as on
    SQLite: the most recent session's row keeps its place, so the update after each of
    its turns changes no indexed column and stays on its page without new index entries
    (a heap-only update). A row inserted without one gets its ``last_active``."""
    await conn.execute("ALTER TABLE cli_sessions ADD COLUMN list_order double precision")
    await conn.execute("UPDATE cli_sessions SET list_order = last_active")
    await conn.execute("DROP INDEX IF EXISTS cli_sessions_last_active")
    await conn.execute("CREATE INDEX cli_sessions_list_order ON cli_sessions (list_order)")
    await conn.execute(
        """CREATE FUNCTION cli_sessions_list_order() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.list_order := coalesce(NEW.list_order, NEW.last_active); RETURN NEW; END
        $$""")
    await conn.execute("CREATE TRIGGER cli_sessions_list_order BEFORE INSERT ON cli_sessions "
                       "FOR EACH ROW EXECUTE FUNCTION cli_sessions_list_order()")


@migration
async def m011_serve_keys(conn: AsyncConnection[Any]) -> None:
    """The API keys of ``nonoka serve`` (``nonoka serve keys``), as on SQLite: a key is
    kept as its SHA-256 digest only, with its owner, name and the first characters
    clients show; a revoked key keeps its row (``revoked_at``)."""
    await conn.execute("""CREATE TABLE serve_keys (
        key_id text PRIMARY KEY,
        digest text NOT NULL UNIQUE,
        owner text NOT NULL,
        name text NOT NULL,
        shown text NOT NULL,
        created_at double precision NOT NULL,
        revoked_at double precision
    )""")


@migration
async def m012_serve_files(conn: AsyncConnection[Any]) -> None:
    """The files of ``nonoka serve``'s Files API, as on SQLite: one row per uploaded file
    with its owner, name, purpose, media type and size, its bytes in ``media`` under
    ``digest``; a deleted file keeps its row (``deleted_at``) and stops keeping its
    bytes (the media collection keeps a file an entry row or a live file refers to)."""
    await conn.execute("""CREATE TABLE serve_files (
        file_id text COLLATE "C" PRIMARY KEY,
        owner text NOT NULL,
        filename text NOT NULL,
        purpose text NOT NULL,
        media_type text NOT NULL,
        digest text COLLATE "C" NOT NULL,
        bytes bigint NOT NULL,
        created_at double precision NOT NULL,
        deleted_at double precision
    )""")
    await conn.execute("CREATE INDEX serve_files_owner ON serve_files "
                       "(owner, created_at, file_id) WHERE deleted_at IS NULL")
    await conn.execute("CREATE INDEX serve_files_digest ON serve_files (digest) "
                       "WHERE deleted_at IS NULL")
