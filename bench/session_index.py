"""The session list's lookups as a project's list grows, and what each index is worth.

Run: ``.venv/bin/python bench/session_index.py [--sessions N ...] [--reps N]`` (about
20 s).

A SQLite project holds ``--sessions`` index rows (``cli_sessions``) written through the
record store, with the metadata the bridge gives a chat session (conversation key, host
conversation id, working directory, purpose) and one title session for every four chats.
Side by side on the same file, medians over ``--reps`` calls of the record store's own
methods:

- ``find_by_host_session``: what the bridge asks on every request that carries the host's
  conversation id (OpenCode's always do), with ``cli_sessions_host_session`` and with it
  dropped, as files before ``m012_session_list_lookups`` were;
- ``find_by_conversation_key``: the bridge's lookup when the host gives no id;
- ``list_sessions(50)``: the first page of ``sessions list``, with the list order's
  index (``cli_sessions_list_order``) and with it dropped (what the list would cost a
  layout without an index on its order);
- ``get_session``: the primary key, for scale.

Goal: at the largest size, the bridge's two lookups each take at most 1 ms (median).
Exit status 1 on a FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nonoka.store.records import SessionRecord
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.records import SQLiteRecordStore

GOAL_MS = 1.0


def session(n: int) -> SessionRecord:
    title = n % 5 == 4
    return SessionRecord(
        session_id=f"{n:08x}-4c1e-4b7a-9d2f-{n:012x}", title=f"session {n}",
        model="scripted", status="completed", turn_count=n % 40, message_count=n % 80,
        created_at=1_700_000_000 + n * 60, last_active=1_700_000_000 + n * 60 + 30,
        metadata={"conversation_key": f"{n * 2654435761 % 2**64:064x}",
                  "host_session_id": f"ses_{n:026d}", "cwd": "/home/user/projects/app",
                  "purpose": "title" if title else "chat"})


def fill(store: SQLiteCheckpointStore, count: int) -> None:
    """The rows, written by the record store's own row write, in one transaction."""
    from nonoka.store.sqlite.records import _write_row

    with store.transaction() as db:
        for n in range(count):
            _write_row(db, session(n))


async def median_ms(call: Callable[[], Awaitable[object]], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def measure(path: Path, count: int, reps: int) -> dict[str, float]:
    store = SQLiteCheckpointStore(path)
    records = SQLiteRecordStore.from_checkpoints(store)
    try:
        await store.load_session("none")  # opens and migrates the file
        fill(store, count)
        probe = session(count // 2 - (count // 2) % 5)  # a chat, in the middle of the list
        host, key = probe.metadata["host_session_id"], probe.metadata["conversation_key"]
        out: dict[str, float] = {}

        async def timed(name: str, call: Callable[[], Awaitable[list[SessionRecord]]],
                        expect: int) -> None:
            assert len(await call()) == expect, name
            out[name] = await median_ms(call, reps)

        await timed("host id", lambda: records.find_by_host_session(str(host)), 1)
        await timed("conversation key", lambda: records.find_by_conversation_key(str(key)), 1)
        await timed("list, first 50", lambda: records.list_sessions(50), 50)
        get = await median_ms(lambda: records.get_session(probe.session_id), reps)
        out["get by id"] = get
        db = records.connection
        db.execute("DROP INDEX cli_sessions_host_session")
        await timed("host id, no index (before m012)",
                    lambda: records.find_by_host_session(str(host)), 1)
        db.execute("DROP INDEX cli_sessions_list_order")
        await timed("list, first 50, no list order index",
                    lambda: records.list_sessions(50), 50)
        return out
    finally:
        await store.close()


async def run(args: argparse.Namespace) -> int:
    table: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.sessions:
            table[count] = await measure(Path(tmp) / f"{count}.db", count, args.reps)
    names = list(next(iter(table.values())))
    print(f"\nSQLite, median ms over {args.reps} calls\n")
    print(f"{'lookup':<40} | " + " | ".join(f"{c:>9,}" for c in table))
    print("-" * (43 + 12 * len(table)))
    for name in names:
        print(f"{name:<40} | " + " | ".join(f"{table[c][name]:9.3f}" for c in table))
    largest = table[max(table)]
    failed = False
    for name in ("host id", "conversation key"):
        ok = largest[name] <= GOAL_MS
        failed |= not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name} at {max(table):,} sessions <= "
              f"{GOAL_MS} ms: {largest[name]:.3f} ms")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--reps", type=int, default=50)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
