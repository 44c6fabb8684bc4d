"""A PostgreSQL schema from the first nonoka that had the engine, upgraded in place.

The first schema is built here from its own SQL (as that release created and recorded
it), not from the code under test, so the upgrade is checked against what is really out
there: the runner must take the old ledger as it is, keep every row, and leave a schema
that is, table for table and index for index, what a fresh install creates.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState, StepResult, StepStatus
from nonoka.store.base import entry_json, snapshot_json
from nonoka.store.leases import new_lease_owner
from nonoka.store.postgres import PostgresCheckpointStore, PostgresRecordStore
from nonoka.store.postgres.migrations import MIGRATIONS
from nonoka.store.records import SessionRecord
from tests import pg

FIRST_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS nonoka_migrations (
        name text PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    """CREATE TABLE checkpoints (
        session_id text COLLATE "C" PRIMARY KEY,
        state_json text NOT NULL,
        revision bigint NOT NULL,
        entry_count integer NOT NULL,
        memory_generation integer NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL
    )""",
    """CREATE TABLE session_entries (
        session_id text COLLATE "C" NOT NULL,
        seq integer NOT NULL,
        entry_json text NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    """CREATE TABLE step_updates (
        session_id text COLLATE "C" NOT NULL,
        step_id text NOT NULL,
        update_type text NOT NULL,
        payload_json text NOT NULL,
        updated_at double precision NOT NULL,
        id bigint GENERATED ALWAYS AS IDENTITY,
        PRIMARY KEY (session_id, step_id, update_type)
    )""",
    "INSERT INTO nonoka_migrations (name) VALUES ('m001_checkpoint_tables')",
]
"""The schema and ledger migration ``m001_checkpoint_tables`` left, the oldest there is."""


@pytest.fixture
def schemas() -> Iterator[tuple[str, str]]:
    """Two fresh schemas: one to upgrade, one for a fresh install to compare with."""
    with pg.temp_schema() as old, pg.temp_schema() as fresh:
        yield old, fresh


def _old_session() -> SessionState:
    return SessionState(session_id="from-the-first-release", turn_count=2, memory_entries=[
        MemoryEntry.make("user", "hello ✓"), MemoryEntry.make("assistant", "hi there")])


def _build_first_schema(schema: str, state: SessionState) -> None:
    """The first schema with one session in it, written as that release wrote rows."""
    with pg.connect(schema) as raw:
        for statement in FIRST_SCHEMA:
            raw.execute(statement)
        raw.execute("INSERT INTO checkpoints VALUES (%s, %s, 1, %s, 0, 1.0, 2.0)",
                    (state.session_id, snapshot_json(state), len(state.memory_entries)))
        for seq, entry in enumerate(state.memory_entries):
            raw.execute("INSERT INTO session_entries VALUES (%s, %s, %s)",
                        (state.session_id, seq, entry_json(entry)))
        raw.execute("INSERT INTO step_updates (session_id, step_id, update_type, "
                    "payload_json, updated_at) VALUES (%s, 'fetch', 'result', %s, 3.0)",
                    (state.session_id, StepResult(output={"ok": True}).model_dump_json()))


def _catalog(schema: str) -> dict[str, list[tuple[object, ...]]]:
    """Everything the server says about the schema's tables, its own name taken out."""
    queries = {
        "columns": """SELECT table_name, column_name, ordinal_position, data_type,
                             is_nullable, column_default, collation_name, is_identity,
                             identity_generation
                      FROM information_schema.columns WHERE table_schema = %(s)s
                      ORDER BY table_name, ordinal_position""",
        "indexes": """SELECT tablename, indexname, replace(indexdef, %(s)s, 'SCHEMA')
                      FROM pg_indexes WHERE schemaname = %(s)s ORDER BY 1, 2""",
        "constraints": """SELECT rel.relname, con.conname, con.contype,
                                 pg_get_constraintdef(con.oid)
                          FROM pg_constraint con
                          JOIN pg_class rel ON rel.oid = con.conrelid
                          JOIN pg_namespace ns ON ns.oid = rel.relnamespace
                          WHERE ns.nspname = %(s)s ORDER BY 1, 2""",
        "sequences": """SELECT sequencename, data_type FROM pg_sequences
                        WHERE schemaname = %(s)s ORDER BY 1""",
    }
    with pg.connect(schema) as raw:
        return {name: raw.execute(sql, {"s": schema}).fetchall()
                for name, sql in queries.items()}


def _ledger(schema: str) -> list[str]:
    with pg.connect(schema) as raw:
        rows = raw.execute("SELECT name FROM nonoka_migrations ORDER BY applied_at, name")
        return [str(name) for (name,) in rows.fetchall()]


async def test_the_first_schema_upgrades_to_a_fresh_install(schemas: tuple[str, str]) -> None:
    old_schema, fresh_schema = schemas
    old = _old_session()
    _build_first_schema(old_schema, old)
    assert "cli_sessions" not in str(_catalog(old_schema)["columns"])

    store = PostgresCheckpointStore(pg.PG_URL, schema=old_schema)
    records = PostgresRecordStore(store.database)
    try:
        loaded = await store.load_session(old.session_id)  # the first call migrates
        assert loaded is not None
        assert loaded.memory_entries == old.memory_entries
        assert loaded.turn_count == 2 and loaded.revision == 1
        assert loaded.completed_steps["fetch"].output == {"ok": True}
        assert loaded.step_statuses["fetch"] == StepStatus.COMPLETED
        # The old session carries on, and the tables the upgrade added work.
        more = loaded.model_copy(update={"memory_entries": [
            *loaded.memory_entries, MemoryEntry.make("user", "and now?")]})
        assert await store.save_session(more) == 2
        await records.upsert_session(SessionRecord(session_id=old.session_id, title="old"))
        await records.append_event(old.session_id, "request", {"n": 1})
        assert [e.seq for e in await records.list_events(old.session_id)] == [1]
        assert await store.acquire_lease(old.session_id, new_lease_owner(), 5)
    finally:
        await records.close()
        await store.close()
    assert _ledger(old_schema) == [m.__name__ for m in MIGRATIONS]

    fresh = PostgresCheckpointStore(pg.PG_URL, schema=fresh_schema)
    try:
        await fresh.database.open()
    finally:
        await fresh.close()
    assert _catalog(old_schema) == _catalog(fresh_schema)
    assert _ledger(fresh_schema) == _ledger(old_schema)


async def test_an_upgraded_schema_is_not_migrated_again(schemas: tuple[str, str]) -> None:
    old_schema, _ = schemas
    _build_first_schema(old_schema, _old_session())
    ledgers = []
    for _opening in range(2):
        store = PostgresCheckpointStore(pg.schema_url(old_schema))
        try:
            await store.database.open()
        finally:
            await store.close()
        with pg.connect(old_schema) as raw:
            ledgers.append(raw.execute("SELECT name, applied_at FROM nonoka_migrations "
                                       "ORDER BY applied_at, name").fetchall())
    assert [row[0] for row in ledgers[0]] == [m.__name__ for m in MIGRATIONS]
    assert ledgers[1] == ledgers[0]
