"""Session operations at scale: search, export, prune beside a writer, and what the search
index costs a save.

Run: ``.venv/bin/python bench/ops.py`` (about 3 minutes the first time, which builds the
1,000,000-entry database in the temporary directory and keeps it for later runs;
``--entries`` for a smaller one). It prints PASS/FAIL for each goal and exits 1 on a FAIL:

1. search: the first page (20 matches) over 1,000,000 entries (~200 MB of text) within
   50 ms on SQLite (median over common, rare and two-word queries);
2. export: JSONL of a 100,000-entry session at least half the speed of a raw ``sqlite3``
   dump of the same rows to JSON lines, with flat memory (the peak Python allocation
   while exporting 100,000 entries at most 2x that of 10,000);
3. prune: 10,000 sessions pruned while another process saves turns: no save waits more
   than 100 ms (with ``--postgres URL``, also on PostgreSQL: no transaction of the prune
   stays open over 100 ms, and it takes no lock a writer of another session waits for);
4. the search index costs a per-turn save at most 1.5x what it costs without it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.save_load import make_state, make_turn
from nonoka.ops.export import export_jsonl
from nonoka.ops.model import SearchQuery
from nonoka.ops.prune import prune
from nonoka.ops.search import search
from nonoka.store.project import open_project_stores
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.entries import doc, new_block, rows_of
from nonoka.store.sqlite.packing import pack, unpack

VOCABULARY = 20_000
_CHECKPOINT = ("INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
               "memory_generation, created_at, updated_at, entry_block) "
               "VALUES (?, '{}', 1, ?, 0, ?, ?, ?)")
_ENTRY = "INSERT INTO session_entries (doc, session_id, seq, entry_json) VALUES (?, ?, ?, ?)"


def _store(db: sqlite3.Connection, sid: str, texts: list[str], at: float) -> None:
    """A session's checkpoint and entry rows as the store writes them (its block
    chosen, each row at its place)."""
    block = new_block(db)
    db.execute(_CHECKPOINT, (sid, len(texts), at, at, block))
    db.executemany(_ENTRY, [(doc(block, i), sid, i, pack(t)) for i, t in enumerate(texts)])
results: list[tuple[str, bool, str]] = []


def goal(name: str, passed: bool, detail: str) -> None:
    results.append((name, passed, detail))
    print(f"{'PASS' if passed else 'FAIL'}  {name}: {detail}", flush=True)


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10)))
            for _ in range(VOCABULARY)]


def _entry(rng: random.Random, words: list[str], cumulative: list[float]) -> str:
    text = " ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(20, 45)))
    return json.dumps({"role": rng.choice(("user", "assistant")), "content": text,
                       "metadata": {}, "tokens": len(text) // 4}, ensure_ascii=False)


# -- 1. search -------------------------------------------------------------------------------


def build_search_db(path: Path, entries: int) -> list[str]:
    """A project database of ``entries`` entries in sessions of 500 (the triggers index
    them as the store's writes would); returns query words by frequency class."""
    rng = random.Random(1)
    words = _vocabulary(rng)
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))
    if not path.exists():
        print(f"building {entries:,} entries in {path} (once) ...", flush=True)
        started = time.monotonic()
        asyncio.run(_create(path))
        db = sqlite3.connect(path, isolation_level=None)
        per_session = 500
        now = time.time()
        for first in range(0, entries, per_session * 20):
            db.execute("BEGIN")
            for n in range(first, min(entries, first + per_session * 20), per_session):
                sid = str(uuid.UUID(int=rng.getrandbits(128)))
                count = min(per_session, entries - n)
                _store(db, sid, [_entry(rng, words, weights) for _ in range(count)], now)
                db.execute("INSERT INTO cli_sessions (session_id, title, created_at, "
                           "last_active, status, model) VALUES (?, ?, ?, ?, 'completed', "
                           "'openai:m')", (sid, f"session {n}", now - n, now - n))
            db.execute("COMMIT")
        from nonoka.store.sqlite.entries import catch_up

        catch_up(db, batch=50_000)
        db.close()
        print(f"built in {time.monotonic() - started:.0f} s, "
              f"{path.stat().st_size / 1e6:.0f} MB", flush=True)
    return [words[0], words[50], words[5000], words[19_000], f"{words[3]} {words[40]}"]


async def _create(path: Path) -> None:
    await SQLiteCheckpointStore(path).close()


async def bench_search(path: Path, queries: list[str]) -> None:
    stores = open_project_stores(path.parent, f"sqlite:{path}")
    try:
        for text in queries:  # warm the cache as a running system would be
            await search(stores, SearchQuery(text))
        times: list[float] = []
        for _ in range(5):
            for text in queries:
                started = time.perf_counter()
                hits = await search(stores, SearchQuery(text, limit=20))
                times.append(time.perf_counter() - started)
                assert hits or text.split()[0] in ("",), text
    finally:
        await stores.close()
    median = statistics.median(times) * 1000
    worst = max(times) * 1000
    goal("search first page over the entries <= 50 ms (median)", median <= 50,
         f"median {median:.1f} ms, worst {worst:.1f} ms over {len(times)} queries")


# -- 2. export ------------------------------------------------------------------------------


async def _big_session(tmp: Path, entries: int) -> tuple[Path, str]:
    path = tmp / f"export-{entries}.db"
    rng = random.Random(2)
    sid = str(uuid.uuid4())
    store = SQLiteCheckpointStore(path)
    turns = [e for n in range(entries // 2) for e in make_turn(rng, n)]
    await store.save_session(make_state(sid, turns[:entries]))
    await store.close()
    return path, sid


def _raw_dump(path: Path, sid: str, out: Path) -> float:
    started = time.perf_counter()
    db = sqlite3.connect(path)
    with out.open("w", encoding="utf-8") as handle:
        for seq, text in db.execute("SELECT seq, entry_json FROM session_entries WHERE "
                                    f"{rows_of('?1')} ORDER BY doc", (sid,)):
            handle.write(json.dumps([sid, seq, unpack(text)], ensure_ascii=False) + "\n")
    db.close()
    return time.perf_counter() - started


async def _export(path: Path, sid: str, out: Path, *, trace: bool = False) -> tuple[float, int]:
    stores = open_project_stores(path.parent, f"sqlite:{path}")
    try:
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        with out.open("w", encoding="utf-8") as handle:
            await export_jsonl(stores, [sid], handle)
        spent = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
        if trace:
            tracemalloc.stop()
        return spent, peak
    finally:
        await stores.close()


async def bench_export(tmp: Path, entries: int) -> None:
    path, sid = await _big_session(tmp, entries)
    out = tmp / "out.jsonl"
    ours = min([(await _export(path, sid, out))[0] for _ in range(3)])
    raw = min(_raw_dump(path, sid, tmp / "raw.jsonl") for _ in range(3))
    goal(f"export of {entries:,} entries >= 0.5x the speed of a raw dump", raw / ours >= 0.5,
         f"export {ours * 1000:.0f} ms, raw dump {raw * 1000:.0f} ms: {raw / ours:.2f}x")
    small_path, small_sid = await _big_session(tmp, entries // 10)
    _, small_peak = await _export(small_path, small_sid, out, trace=True)
    _, big_peak = await _export(path, sid, out, trace=True)
    goal("export memory is flat (peak at 10x the entries <= 2x)", big_peak <= 2 * small_peak,
         f"peak {small_peak / 1e6:.1f} MB at {entries // 10:,} entries, "
         f"{big_peak / 1e6:.1f} MB at {entries:,}")


# -- 3. prune beside a writer ---------------------------------------------------------------


def _writer(path: str, stop: str, report: str) -> None:
    """Save a turn after another until ``stop`` exists; write each save's time."""
    async def run() -> list[float]:
        rng = random.Random(3)
        store = SQLiteCheckpointStore(path)
        sid = str(uuid.uuid4())
        state = make_state(sid, [])
        waits: list[float] = []
        n = 0
        while not await asyncio.to_thread(os.path.exists, stop):
            state = state.model_copy(update={
                "memory_entries": [*state.memory_entries, *make_turn(rng, n)]})
            started = time.perf_counter()
            revision = await store.save_session(state)
            waits.append(time.perf_counter() - started)
            state = state.model_copy(update={"revision": revision})
            n += 1
            await asyncio.sleep(0.002)
        await store.close()
        return waits

    Path(report).write_text(json.dumps(asyncio.run(run())))


async def bench_prune(tmp: Path, sessions: int) -> None:
    path = tmp / "prune.db"
    await _create(path)
    rng = random.Random(4)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    old = time.time() - 90 * 86400
    for _ in range(sessions):
        sid = str(uuid.UUID(int=rng.getrandbits(128)))
        turn = [e.model_dump_json() for e in make_turn(rng, 0) + make_turn(rng, 1)]
        _store(db, sid, turn, old)
        db.execute("INSERT INTO cli_sessions (session_id, title, created_at, last_active, "
                   "status) VALUES (?, 'old', ?, ?, 'completed')", (sid, old, old))
        db.execute("INSERT INTO events VALUES (?, 1, ?, 'finish', '{}')", (sid, old))
    db.execute("COMMIT")
    db.close()
    stop, report = tmp / "stop", tmp / "waits.json"
    writer = multiprocessing.get_context("spawn").Process(
        target=_writer, args=(str(path), str(stop), str(report)))
    writer.start()
    await asyncio.sleep(1.0)
    stores = open_project_stores(tmp, f"sqlite:{path}")
    started = time.perf_counter()
    result = await prune(stores, older_than=30 * 86400)
    spent = time.perf_counter() - started
    await stores.close()
    stop.touch()
    writer.join(60)
    waits = json.loads(report.read_text())
    worst = max(waits) * 1000
    p99 = statistics.quantiles(waits, n=100)[98] * 1000
    assert len(result.removed) == sessions, len(result.removed)
    goal(f"prune of {sessions:,} sessions: no concurrent save waits > 100 ms", worst <= 100,
         f"pruned in {spent:.1f} s; {len(waits)} saves meanwhile, worst {worst:.1f} ms, "
         f"p99 {p99:.1f} ms")


def _sample_locks(url: str, schema: str, stop: threading.Event, seen: dict[str, Any]) -> None:
    """Every millisecond: the open transactions of other backends on ``schema``'s tables,
    their age and the relation locks they hold."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            for age, mode in conn.execute(
                    "SELECT extract(epoch FROM clock_timestamp() - a.xact_start), l.mode "
                    "FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                    "JOIN pg_class c ON c.oid = l.relation "
                    "WHERE a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL "
                    "AND a.state <> 'idle' AND c.relnamespace = %s::regnamespace",
                    (schema,)):
                seen["longest"] = max(seen["longest"], float(age))
                seen["modes"].add(str(mode))
            seen["samples"] += 1
            time.sleep(0.001)


async def bench_prune_postgres(url: str, sessions: int) -> None:
    from urllib.parse import quote

    from tests.conformance.ops_suite import add_session

    schema = f"nonoka_bench_{uuid.uuid4().hex[:8]}"
    joiner = "&" if "?" in url else "?"
    stores = open_project_stores(Path.cwd(),
                                 f"{url}{joiner}options={quote(f'-csearch_path={schema}')}")
    try:
        for _ in range(sessions):
            await add_session(stores, title="old", age=90 * 86400, turns=1)
        stop = threading.Event()
        seen: dict[str, Any] = {"longest": 0.0, "modes": set(), "samples": 0}
        sampler = threading.Thread(target=_sample_locks, args=(url, schema, stop, seen))
        sampler.start()
        started = time.perf_counter()
        result = await prune(stores, older_than=30 * 86400)
        spent = time.perf_counter() - started
        stop.set()
        sampler.join()
    finally:
        await stores.close()
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert len(result.removed) == sessions, len(result.removed)
    # What a writer of another session takes (RowExclusiveLock) waits only for these:
    blocking = seen["modes"] & {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock",
                                "AccessExclusiveLock"}
    longest = seen["longest"] * 1000
    goal(f"PostgreSQL prune of {sessions:,} sessions: transactions <= 100 ms, no table lock",
         longest <= 100 and not blocking,
         f"pruned in {spent:.1f} s; longest open transaction {longest:.1f} ms over "
         f"{seen['samples']} samples; lock modes {', '.join(sorted(seen['modes']))}")


# -- 4. what the index costs a save -------------------------------------------------------------


async def _save_cost(path: Path, reps: int) -> float:
    rng = random.Random(5)
    store = SQLiteCheckpointStore(path)
    sid = str(uuid.uuid4())
    state = make_state(sid, [e for n in range(50) for e in make_turn(rng, n)])
    state = state.model_copy(update={"revision": await store.save_session(state)})
    times: list[float] = []
    for n in range(reps):
        state = state.model_copy(update={
            "memory_entries": [*state.memory_entries, *make_turn(rng, 50 + n)]})
        started = time.perf_counter()
        revision = await store.save_session(state)
        times.append(time.perf_counter() - started)
        state = state.model_copy(update={"revision": revision})
    await store.close()
    return statistics.median(times)


async def bench_save(tmp: Path, reps: int) -> None:
    """The real store against the same store on a database without any of the index:
    no triggers (the doc is the row's place since ``m014_entries_by_session``, so the
    insert is the same and there is no index to drop)."""
    with_index, without = tmp / "with.db", tmp / "without.db"
    await _create(without)
    db = sqlite3.connect(without, isolation_level=None)
    for trigger in ("search_insert", "entries_place", "search_delete", "search_update"):
        db.execute(f"DROP TRIGGER {trigger}")
    db.close()
    costs: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(3):  # interleaved, so a busy moment weighs on both
        costs["with"].append(await _save_cost(with_index, reps))
        costs["without"].append(await _save_cost(without, reps))
    on, off = statistics.median(costs["with"]), statistics.median(costs["without"])
    goal("a turn's save with the search index <= 1.5x without", on / off <= 1.5,
         f"{on * 1e6:.0f} µs with, {off * 1e6:.0f} µs without: {on / off:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--entries", type=int, default=1_000_000,
                        help="entries in the search database (default 1,000,000)")
    parser.add_argument("--export-entries", type=int, default=100_000)
    parser.add_argument("--prune-sessions", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=200, help="saves per variant")
    parser.add_argument("--postgres", metavar="URL",
                        help="also prune on this PostgreSQL server (a schema of its own)")
    parser.add_argument("--only", choices=("search", "export", "prune", "save"),
                        action="append", help="run only this measurement (repeatable)")
    args = parser.parse_args()
    wanted = set(args.only or ("search", "export", "prune", "save"))
    if "search" in wanted:
        search_db = Path(tempfile.gettempdir()) / f"nonoka-bench-search-{args.entries}.db"
        queries = build_search_db(search_db, args.entries)
        asyncio.run(bench_search(search_db, queries))
    if "export" in wanted:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(bench_export(Path(tmp), args.export_entries))
    if "prune" in wanted:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(bench_prune(Path(tmp), args.prune_sessions))
        if args.postgres:
            asyncio.run(bench_prune_postgres(args.postgres, args.prune_sessions))
    if "save" in wanted:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(bench_save(Path(tmp), args.reps))
    return 0 if all(passed for _, passed, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
