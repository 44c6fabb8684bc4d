"""What only the PostgreSQL engine has: schemas, its migration ledger, real concurrency."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator

import pytest

from nonoka.errors import (
    ConfigurationError,
    SessionConflictError,
    StoreError,
    UnsupportedVersionError,
)
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState, StepStatus
from nonoka.store.postgres import PostgresCheckpointStore
from nonoka.store.postgres.migrations import MIGRATIONS
from nonoka.store.postgres.records import PostgresRecordStore
from tests import pg

NAMES = [m.__name__ for m in MIGRATIONS]


@pytest.fixture
def schema() -> Iterator[str]:
    with pg.temp_schema() as name:
        yield name


def _ledger(schema: str) -> list[tuple[object, ...]]:
    with pg.connect(schema) as raw:
        return raw.execute("SELECT name, applied_at FROM nonoka_migrations "
                           "ORDER BY applied_at, name").fetchall()


def _state(session_id: str = "s1") -> SessionState:
    return SessionState(session_id=session_id, memory_entries=[MemoryEntry.make("user", "hi")])


async def test_migrations_are_recorded_once(schema: str) -> None:
    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    try:
        await store.save_session(_state())
    finally:
        await store.close()
    first = _ledger(schema)
    assert [row[0] for row in first] == NAMES
    again = PostgresCheckpointStore(pg.schema_url(schema))
    try:
        assert await again.load_session("s1") is not None
    finally:
        await again.close()
    assert _ledger(schema) == first


async def test_database_from_a_newer_nonoka_is_refused_untouched(schema: str) -> None:
    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    await store.save_session(_state())
    await store.close()
    with pg.connect(schema) as raw:
        raw.execute("INSERT INTO nonoka_migrations (name) VALUES ('m999_from_the_future')")
    before = _ledger(schema)
    newer = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    try:
        with pytest.raises(UnsupportedVersionError, match="m999_from_the_future"):
            await newer.load_session("s1")
        with pytest.raises(UnsupportedVersionError):  # and again: nothing was half opened
            await newer.save_session(_state("s2"))
    finally:
        await newer.close()
    assert _ledger(schema) == before
    with pg.connect(schema) as raw:
        assert raw.execute("SELECT session_id FROM checkpoints").fetchall() == [("s1",)]


@pytest.mark.parametrize("how", ["argument", "url"])
async def test_a_missing_schema_is_created(how: str) -> None:
    name = f"{pg.SCHEMA_PREFIX}new_{how}_{time.monotonic_ns()}"
    try:
        store = (PostgresCheckpointStore(pg.PG_URL, schema=name) if how == "argument"
                 else PostgresCheckpointStore(pg.schema_url(name)))
        try:
            await store.save_session(_state())
        finally:
            await store.close()
        assert [row[0] for row in _ledger(name)] == NAMES
    finally:
        pg.drop_schema(name)


@pytest.mark.parametrize("name", ["bad name", "x;drop", "9lives", "a" * 64, ""])
def test_bad_schema_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        PostgresCheckpointStore(pg.PG_URL, schema=name)


async def test_a_closed_store_raises(schema: str) -> None:
    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    await store.save_session(_state())
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.load_session("s1")


async def test_two_creators_of_one_session_race(schema: str) -> None:
    """Both see no row; exactly one creation lands, the other is a conflict."""
    stores = [PostgresCheckpointStore(pg.PG_URL, schema=schema) for _ in range(4)]
    try:
        for store in stores:
            await store.database.open()
        for n in range(10):
            sid = f"race-{n}"
            results = await asyncio.gather(
                *(s.save_session(_state(sid)) for s in stores), return_exceptions=True)
            assert [r for r in results if not isinstance(r, BaseException)] == [1]
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(errors) == 3
            assert all(isinstance(e, SessionConflictError) and "already exists" in str(e)
                       for e in errors), errors
    finally:
        for store in stores:
            await store.close()


async def test_concurrent_writers_keep_event_and_step_order(schema: str) -> None:
    records = [PostgresRecordStore(pg.PG_URL, schema=schema) for _ in range(3)]
    stores = [PostgresCheckpointStore(pg.PG_URL, schema=schema) for _ in range(3)]
    everything: list[PostgresRecordStore | PostgresCheckpointStore] = [*records, *stores]
    try:
        await stores[0].save_session(_state())
        await asyncio.gather(*(r.append_event("s1", "request", {"n": n})
                               for n in range(20) for r in records))
        events = await records[0].list_events("s1", 100)
        assert [e.seq for e in events] == list(range(1, 61))
        await asyncio.gather(*(s.save_step_status("s1", f"step{n}", StepStatus.RUNNING)
                               for n in range(10) for s in stores))
        with pg.connect(schema) as raw:
            times = [r[0] for r in raw.execute(
                "SELECT updated_at FROM step_updates ORDER BY updated_at").fetchall()]
        assert len(times) == 10 and len(set(times)) == 10
    finally:
        for store in everything:
            await store.close()


OPENER = """
import asyncio, sys, time
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store.postgres import PostgresCheckpointStore
url, sid, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
async def main():
    store = PostgresCheckpointStore(url)
    await asyncio.sleep(max(0.0, start_at - time.time()))
    try:
        await store.save_session(SessionState(session_id=sid))
    finally:
        await store.close()
asyncio.run(main())
"""


async def test_processes_migrating_a_fresh_schema_at_once(schema: str) -> None:
    start_at = time.time() + 1.5
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", OPENER, pg.schema_url(schema), f"p{n}", str(start_at),
            stderr=asyncio.subprocess.PIPE,
        )
        for n in range(8)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
    assert [row[0] for row in _ledger(schema)] == NAMES
    with pg.connect(schema) as raw:
        sessions = {r[0] for r in raw.execute("SELECT session_id FROM checkpoints")}
    assert sessions == {f"p{n}" for n in range(8)}


async def test_a_session_saved_many_times_stops_growing_its_checkpoints_table(schema: str) -> None:
    """Every save updates the session's one ``checkpoints`` row. With its pages filled to
    half (``m008_compact_tables``) each new version finds room on its own page and the
    next update there prunes the old one, so the table stops growing without ``VACUUM``;
    on full pages each version went to a new page (7 pages every 40 saves, for ever).

    Pruning waits for every older snapshot on the server, in any database, so a busy
    server can hold it back for a while: the table must stop growing in some round of
    40 saves, not in all of them."""
    from nonoka.state.session_state import TraceEvent

    store = PostgresCheckpointStore(pg.PG_URL, schema=schema)
    sizes: list[int] = []
    try:
        state = _state("busy").model_copy(update={"trace": [
            TraceEvent(kind="turn", detail=f"event {n} " + "x" * 40) for n in range(60)]})
        with pg.connect(schema) as raw:
            for n in range(1000):
                entries = [*state.memory_entries, MemoryEntry.make("user", f"message {n}")]
                revision = await store.save_session(state.model_copy(
                    update={"memory_entries": entries, "turn_count": n}))
                state = state.model_copy(
                    update={"memory_entries": entries, "revision": revision})
                if n % 40 == 39:
                    row = raw.execute(
                        "SELECT pg_relation_size('checkpoints') / 8192").fetchone()
                    assert row is not None and isinstance(row[0], int)
                    sizes.append(row[0])
                    if len(sizes) >= 2 and sizes[-1] == sizes[-2]:
                        break
    finally:
        await store.close()
    assert len(sizes) >= 2 and sizes[-1] == sizes[-2], f"pages after each 40 saves: {sizes}"


async def test_the_session_list_lookups_use_their_indexes(schema: str) -> None:
    """The bridge looks a session up by the host's conversation id and by the conversation
    key on every request: each by its own index (``m009_session_list_lookups``), not a
    scan of the whole list."""
    from nonoka.store import index_sql
    from nonoka.store.postgres.records import _HOST, _KEY, _PURPOSE
    from nonoka.store.records import SessionRecord

    records = PostgresRecordStore(pg.PG_URL, schema=schema)
    try:
        for n in range(50):
            await records.upsert_session(SessionRecord(session_id=f"s{n:03}", metadata={
                "conversation_key": f"k{n % 5}", "host_session_id": f"ses_{n % 10}"}))
        assert len(await records.find_by_host_session("ses_3")) == 5
        assert len(await records.find_by_conversation_key("k1")) == 10
    finally:
        await records.close()
    with pg.connect(schema) as raw:
        raw.execute("SET enable_seqscan = off")  # 50 rows: a scan would be cheaper
        for lookup, index in ((_HOST, "cli_sessions_host_session"),
                              (_KEY, "cli_sessions_conversation_key")):
            plan = "\n".join(str(row[0]) for row in raw.execute(
                f"EXPLAIN {index_sql.SELECT} WHERE {lookup} = 'x' AND {_PURPOSE} = 'chat' "
                f"{index_sql.ORDER}").fetchall())
            assert index in plan, plan


async def test_a_turns_row_update_is_heap_only(schema: str) -> None:
    """The row written after each turn of the most recent session changes no indexed
    column (``list_order`` stays, ``m010_list_order``), so PostgreSQL updates it in place
    on its page and adds no index entry (a heap-only update); a row moving to the top is
    an ordinary update."""
    from nonoka.store.records import SessionRecord

    records = PostgresRecordStore(pg.PG_URL, schema=schema)
    try:
        for n in range(20):
            await records.upsert_session(SessionRecord(session_id=f"s{n:03}", last_active=n,
                                                       metadata={"conversation_key": "k"}))
        top = SessionRecord(session_id="s005", last_active=100.0,
                            metadata={"conversation_key": "k"})
        for n in range(10):  # to the top, then nine more turns there
            await records.upsert_session(top.model_copy(update={
                "last_active": 100.0 + n, "turn_count": n}))
    finally:
        await records.close()  # its backend ends, which publishes its counters
    with pg.connect(schema) as raw:
        counts: tuple[object, ...] | None = None
        for _ in range(100):
            raw.execute("SELECT pg_stat_clear_snapshot()")
            counts = raw.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                                 "WHERE relid = 'cli_sessions'::regclass").fetchone()
            if counts is not None and counts[0] == 10:
                break
            await asyncio.sleep(0.1)
        assert counts == (10, 9)
