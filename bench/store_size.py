"""What a 5,000-message session costs the store in space and in bytes written.

Run: ``.venv/bin/python bench/store_size.py [--messages N] [--url URL] [--no-postgres]
[--what-if]``.

One session is built turn by turn as the runtime builds it: a user entry is appended to
the ``Session`` and saved through ``Runner.save_session``, then the answer, saved again
(two saves an exchange, as ``Runner.run_react`` makes them), then the session's index row
is written (``upsert_session``, as ``nonoka.turn.journal`` does after a turn). The
entries are ``bench/save_load.py``'s (200-800 characters, some non-ASCII text and JSON
escapes, a tool call every fourth answer; the snapshot carries a plan, a ledger and 50
trace events). On SQLite the full-text index is then brought up to date
(``nonoka.store.sqlite.entries.catch_up``, what the first search does) and the store is
closed, which folds the WAL into the file.

It reports:

- payload: the bytes of every entry's JSON plus the final snapshot's JSON (unpadded);
- SQLite: the database file after closing (WAL folded in), per table (``dbstat``);
- bytes written: ``wchar`` from ``/proc/self/io`` (bytes passed to ``write()`` and
  ``pwrite()`` by the whole process, page cache included, whether or not they reach the
  disk) from just after the store is opened to just after it is closed, beside the raw
  floor: plain ``sqlite3`` in the same process, same pragmas (WAL,
  ``synchronous=NORMAL``), one ``WITHOUT ROWID`` table ``(session_id, seq, entry_json)``
  holding the same entry JSON, one exchange (two rows) per transaction, measured the same
  way (opened, filled, closed);
- PostgreSQL: ``pg_total_relation_size`` summed over every table of the store's schema
  (indexes and TOAST included), after a ``VACUUM`` as autovacuum would leave them.

It checks ``GOALS``, printing PASS/FAIL for each (exit status 1 on a FAIL). ``--what-if``
also builds the session in the other ways of ``WHAT_IF`` (one commit an exchange, the
list row joined or left out, with the key index entries had before) and prints their bytes written.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.save_load import _raw_connect, make_state, make_turn
from nonoka.runtime.runner import Runner
from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.store.base import CheckpointStore, entry_json, snapshot_json
from nonoka.store.records import SessionIndex, SessionRecord
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite import entries as search_index
from nonoka.store.sqlite.records import SQLiteRecordStore

SESSION = "00000000-size-bench"


def wchar() -> int:
    """Bytes this process has passed to ``write()`` and its kin so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def conversation(messages: int, seed: int) -> list[list[MemoryEntry]]:
    rng = random.Random(seed)
    return [make_turn(rng, n) for n in range(messages // 2)]


async def build(store: CheckpointStore, index: SessionIndex,
                turns: list[list[MemoryEntry]], written: dict[str, int]) -> Session:
    """The session, saved as the runtime saves it; returns the live session. Adds the
    bytes written by the saves and by the index rows to ``written``."""
    runner = Runner(store)
    session = Session.from_state(make_state(SESSION, []))
    saves = rows = 0
    for n, (user, answer) in enumerate(turns):
        start = wchar()
        session.memory.append(user)
        await runner.save_session(session)
        session.memory.append(answer)
        await runner.save_session(session)
        middle = wchar()
        await index.upsert_session(SessionRecord(
            session_id=SESSION, title="store size", model="scripted", status="completed",
            turn_count=n + 1, message_count=len(session.memory),
            input_tokens=1000 * (n + 1), output_tokens=200 * (n + 1),
            metadata={"conversation_key": "bench", "purpose": "chat"}))
        saves += middle - start
        rows += wchar() - middle
    written["saves (two an exchange)"] = saves
    written["index row (one an exchange)"] = rows
    return session


def payload_bytes(session: Session) -> int:
    state = session.to_state()
    return len(snapshot_json(state).encode()) + sum(
        len(entry_json(e).encode()) for e in state.memory_entries)


@dataclass
class Result:
    messages: int
    payload: int = 0
    sqlite_db: int = 0
    sqlite_written: int = 0
    raw_db: int = 0
    raw_written: int = 0
    raw_per_message_written: int = 0
    """The raw append committing each message alone, as the runtime's two saves do."""
    tables: dict[str, int] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    """The store's bytes written, by phase."""
    postgres_db: int | None = None
    postgres_live: int = 0
    """The same tables after ``VACUUM FULL``: without the dead row versions."""
    postgres_tables: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Per table: heap, TOAST, indexes (bytes, after ``VACUUM``)."""


def table_sizes(path: Path) -> dict[str, int]:
    """Bytes per table and index of a closed SQLite file (``dbstat``), largest first."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name "
                          "ORDER BY 2 DESC").fetchall()
    finally:
        db.close()
    return {str(name): int(size) for name, size in rows}


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


async def measure_sqlite(tmp: Path, turns: list[list[MemoryEntry]], result: Result) -> None:
    """The store's payload, database bytes, bytes written (and where) and per-table
    bytes, into ``result``."""
    path = tmp / "store.db"
    store = SQLiteCheckpointStore(path)
    index = SQLiteRecordStore.from_checkpoints(store)
    await store.load_session("warm-up")  # the schema exists before the count starts
    before = wchar()
    session = await build(store, index, turns, result.written)
    start = wchar()
    search_index.catch_up(store.connection)
    middle = wchar()
    await store.close()
    end = wchar()
    result.written["search index catch-up"] = middle - start
    result.written["close (WAL folded in)"] = end - middle
    result.sqlite_written = end - before
    result.payload = payload_bytes(session)
    result.sqlite_db = file_bytes(path)
    result.tables = table_sizes(path)


def measure_raw(tmp: Path, turns: list[list[MemoryEntry]], *, per_message: bool = False
                ) -> tuple[int, int]:
    """(database bytes, bytes written) of the raw floor: one exchange a transaction, or
    (``per_message``) one message a transaction, as the runtime commits them."""
    path = tmp / ("raw-per-message.db" if per_message else "raw.db")
    db = _raw_connect(path)
    db.execute("CREATE TABLE session_entries (session_id TEXT NOT NULL, "
               "seq INTEGER NOT NULL, entry_json TEXT NOT NULL, "
               "PRIMARY KEY (session_id, seq)) WITHOUT ROWID")
    before = wchar()
    seq = 0
    for turn in turns:
        rows = [(SESSION, seq + i, entry_json(e)) for i, e in enumerate(turn)]
        seq += len(turn)
        for group in ([[row] for row in rows] if per_message else [rows]):
            db.execute("BEGIN")
            db.executemany("INSERT INTO session_entries VALUES (?, ?, ?)", group)
            db.execute("COMMIT")
    db.close()
    return file_bytes(path), wchar() - before


async def measure_postgres(url: str, turns: list[list[MemoryEntry]], result: Result) -> None:
    """The store's tables after ``VACUUM`` (total and per table) and after
    ``VACUUM FULL``, in a schema of its own, dropped afterwards; into ``result``."""
    import psycopg
    from psycopg import sql

    from nonoka.store.postgres import PostgresCheckpointStore
    from nonoka.store.postgres.records import PostgresRecordStore

    schema = f"nonoka_bench_{secrets.token_hex(4)}"
    raw: Any = await psycopg.AsyncConnection.connect(url, autocommit=True)
    store = PostgresCheckpointStore(url, schema=schema)
    try:
        index = PostgresRecordStore(store.database)
        await build(store, index, turns, {})
        await index.close()
        await store.close()
        cur = await raw.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                                (schema,))
        tables = [sql.Identifier(schema, str(r[0])) for r in await cur.fetchall()]
        names = [f'"{schema}"."{t.as_string(raw).split(".")[1].strip(chr(34))}"'
                 for t in tables]

        async def total() -> int:
            cur = await raw.execute(
                "SELECT sum(pg_total_relation_size(t::regclass))::bigint "
                "FROM unnest(%s::text[]) t", (names,))
            return int((await cur.fetchone())[0])

        await raw.execute(sql.SQL("VACUUM {}").format(sql.SQL(", ").join(tables)))
        result.postgres_db = await total()
        cur = await raw.execute(
            "SELECT c.relname, pg_relation_size(c.oid), "
            "coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), "
            "pg_indexes_size(c.oid) FROM pg_class c "
            "WHERE c.oid = ANY(%s::text[]::regclass[]) ORDER BY pg_total_relation_size(c.oid) "
            "DESC", (names,))
        result.postgres_tables = {str(r[0]): (int(r[1]), int(r[2]), int(r[3]))
                                  for r in await cur.fetchall()}
        await raw.execute(sql.SQL("VACUUM FULL {}").format(sql.SQL(", ").join(tables)))
        result.postgres_live = await total()
    finally:
        await raw.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            sql.Identifier(schema)))
        await raw.close()


# -- what if -----------------------------------------------------------------------------

WHAT_IF = {
    "as the runtime stores it (two commits, then the list row's own)": ("two", "own", False),
    "the list row in the answer's commit": ("two", "joined", False),
    "no list row at all": ("two", "none", False),
    "one commit an exchange, with the list row": ("one", "joined", False),
    "one commit an exchange, no list row": ("one", "none", False),
    "entries with a (session_id, seq) key index, the list row as stored": ("two", "own", True),
    "entries with a (session_id, seq) key index, no list row": ("two", "none", True),
}
"""Other ways to store the same exchanges, through the store's own statements
(``write_session`` and the index row's write) grouped into other transactions, some
without an index: what each lever of the bytes written is worth. Not what nonoka does,
except the first. The key index is the one entries had before they were clustered by
session (``m014_entries_by_session``): what that layout saves."""


async def what_if(tmp: Path, turns: list[list[MemoryEntry]], commits: str, row: str,
                  key: bool) -> int:
    """Bytes written building the session with the exchange committed ``commits``
    (``two``: question, then answer; ``one``: both) and the list row ``own`` (its own
    transaction), ``joined`` (in the answer's) or ``none``; with a ``(session_id, seq)``
    index on the entries if ``key``."""
    from nonoka.store.sqlite.records import _write_row

    path = tmp / f"what-if-{commits}-{row}-{key}.db"
    store = SQLiteCheckpointStore(path)
    await store.load_session("warm-up")
    db = store.connection
    if key:
        db.execute("CREATE UNIQUE INDEX session_entries_key ON session_entries "
                   "(session_id, seq)")
    before = wchar()
    session = Session.from_state(make_state(SESSION, []))
    for n, turn in enumerate(turns):
        record = SessionRecord(
            session_id=SESSION, title="store size", model="scripted", status="completed",
            turn_count=n + 1, message_count=len(session.memory) + len(turn),
            input_tokens=1000 * (n + 1), output_tokens=200 * (n + 1),
            metadata={"conversation_key": "bench", "purpose": "chat"})
        groups = [turn] if commits == "one" else [[entry] for entry in turn]
        for i, group in enumerate(groups):
            for entry in group:
                session.memory.append(entry)
            with store.transaction() as tx:
                session.revision = store.write_session(tx, session.to_state())
                if i == len(groups) - 1 and row == "joined":
                    _write_row(tx, record)
        if row == "own":
            with store.transaction() as tx:
                _write_row(tx, record)
    search_index.catch_up(db)
    await store.close()
    return wchar() - before


# -- report -------------------------------------------------------------------------------

GOALS: list[tuple[str, Callable[[Result], tuple[float, float] | None]]] = [
    ("SQLite database <= 1.5x the payload",
     lambda r: (r.sqlite_db / r.payload, 1.5)),
    ("bytes written building it <= 1.5x a raw SQLite append (search index included)",
     lambda r: (r.sqlite_written / r.raw_written, 1.5)),
    ("PostgreSQL tables <= 2x the payload",
     lambda r: None if r.postgres_db is None else (r.postgres_db / r.payload, 2.0)),
]


def kib(n: int) -> str:
    return f"{n / 1024:,.0f} KiB"


def report(r: Result, description: str) -> bool:
    print(f"python {sys.version.split()[0]}, {description}, one session of "
          f"{r.messages:,} messages\n")
    rows = [
        ("payload (entry JSON + snapshot JSON)", r.payload, None),
        ("SQLite database (WAL folded in)", r.sqlite_db, r.sqlite_db / r.payload),
        ("raw SQLite database", r.raw_db, r.raw_db / r.payload),
        ("bytes written, store", r.sqlite_written, r.sqlite_written / r.raw_written),
        ("bytes written, raw append", r.raw_written, 1.0),
        ("bytes written, raw append a message a commit", r.raw_per_message_written,
         r.raw_per_message_written / r.raw_written),
    ]
    if r.postgres_db is not None:
        rows.append(("PostgreSQL tables (after VACUUM)", r.postgres_db,
                     r.postgres_db / r.payload))
        rows.append(("PostgreSQL tables (after VACUUM FULL)", r.postgres_live,
                     r.postgres_live / r.payload))
    width = max(len(name) for name, _, _ in rows)
    print(f"{'':<{width}} | {'bytes':>12} | {'x':>5}")
    print("-" * (width + 23))
    for name, size_, ratio in rows:
        print(f"{name:<{width}} | {kib(size_):>12} | "
              f"{'' if ratio is None else f'{ratio:.2f}':>5}")
    print("\n(x: against the payload; for bytes written, against the raw append)\n")
    saves = r.sqlite_written - r.written.get("index row (one an exchange)", 0)
    print("bytes written against the raw append a message a commit (the runtime's "
          "commits):\n"
          f"  the store, all of it             {r.sqlite_written / r.raw_per_message_written:.2f}\n"
          f"  without the session list's row   {saves / r.raw_per_message_written:.2f}\n")
    print("SQLite, bytes written by the store, by phase:")
    for name, size in r.written.items():
        print(f"  {name:<32} {kib(size):>12}")
    print("SQLite, per table and index (dbstat; those over one page):")
    for name, size in r.tables.items():
        if size > 4096:
            print(f"  {name:<32} {kib(size):>12}")
    if r.postgres_tables:
        print("PostgreSQL, per table after VACUUM (heap + TOAST + indexes; over 16 KiB):")
        for name, (heap, toast, indexes) in r.postgres_tables.items():
            if heap + toast + indexes > 16384:
                print(f"  {name:<32} {kib(heap):>12} + {kib(toast):>10} + "
                      f"{kib(indexes):>10}")
    print()
    ok = True
    for name, check in GOALS:
        got = check(r)
        if got is None:
            print(f"SKIP  {name}")
            continue
        value, limit = got
        passed = value <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {value:.2f} (limit {limit})")
    return ok


async def run(args: argparse.Namespace) -> int:
    turns = conversation(args.messages, args.seed)
    with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as name:
        tmp = Path(name)
        result = Result(args.messages)
        result.raw_db, result.raw_written = measure_raw(tmp, turns)
        _, result.raw_per_message_written = measure_raw(tmp, turns, per_message=True)
        await measure_sqlite(tmp, turns, result)
        if args.what_if:
            print("bytes written against the raw append (one commit an exchange):")
            for name, (commits, row, key) in WHAT_IF.items():
                written = await what_if(tmp, turns, commits, row, key)
                print(f"  {name:<70} {kib(written):>12} {written / result.raw_written:6.2f}")
            print()
    description = f"SQLite {sqlite3.sqlite_version}"
    if not args.no_postgres:
        await measure_postgres(args.url, turns, result)
        import psycopg
        async with await psycopg.AsyncConnection.connect(args.url) as conn:
            description += f", PostgreSQL {conn.info.parameter_status('server_version')}"
    return 0 if report(result, description) else 1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--url", default=None,
                        help="the PostgreSQL server (default: the tests' one)")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--what-if", action="store_true",
                        help="also build it in other ways (WHAT_IF) and compare their writes")
    args = parser.parse_args()
    if args.url is None and not args.no_postgres:
        from tests import pg
        args.url = pg.PG_URL
    return args


def main() -> int:
    return asyncio.run(run(parse_args()))


if __name__ == "__main__":
    sys.exit(main())
