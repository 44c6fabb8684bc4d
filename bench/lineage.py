"""Branches on SQLite: what a fork costs, and what reading a branch costs.

Run: ``.venv/bin/python bench/lineage.py`` (``--reps`` to change the repetitions).

Side by side in one run, medians:

- forking a session of 10 and of 10,000 entries at its end (``Runner.fork_session``, which
  loads the parent, then stores the branch): the ratio, and the bytes the fork adds to
  the database file (after a checkpoint of the write-ahead log);
- loading a 10,000-entry branch whose entries come from its parent (forked at 5,000,
  5,000 of its own), beside loading an unbranched session of the same 10,000 entries,
  both cold (the per-process decoded-entry cache emptied first, as in a new process);
- classifying a host's history of 5,000 messages against the stored conversation
  (``nonoka.bridge.reconcile.classify``), beside the checks a plain continuation was
  given before lineage (``_prefix_check``: the stored user messages are the request's
  first ones, and the trailing prompt is new).

and checks the goals in ``GOALS``, printing PASS/FAIL for each (exit status 1 on a FAIL).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.save_load import make_state, make_turn
from nonoka.bridge.reconcile import classify
from nonoka.protocol.turns import joined_prompt, split_after_reply
from nonoka.runtime.runner import Runner
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message
from nonoka.store.reuse import StoreReuse
from nonoka.store.sqlite import SQLiteCheckpointStore

GOALS = {
    "fork 10,000 / fork 10 entries": 1.5,
    "bytes a 10,000-entry fork adds (KB)": 4.0,
    "load branch / load plain (10,000 entries)": 1.2,
    "classify / continuation check (5,000 messages)": 1.5,
}


def _entries(n: int, seed: int) -> list[MemoryEntry]:
    rng = random.Random(seed)
    out: list[MemoryEntry] = []
    while len(out) < n:
        out.extend(make_turn(rng, len(out)))
    return out[:n]


def _host_users(entries: list[MemoryEntry]) -> list[MemoryEntry]:
    return [e for e in entries if e.role == "user" and not e.metadata.get("contract_repair")
            and not e.metadata.get("summary")]


def _prefix_check(stored: list[MemoryEntry], messages: list[Message]) -> bool:
    """The checks a continuation got before lineage (the bridge's former
    ``matches_stored`` and ``plan_turn``): the stored user messages open the request's,
    and the trailing prompt is not the one already stored."""
    stored_users = [e.content for e in _host_users(stored)]
    request_users = [m.content for m in messages if m.role == "user"]
    if not stored_users or len(stored_users) > len(request_users) or request_users[
            :len(stored_users)] != stored_users:
        return False
    tail = split_after_reply(messages)[1]  # plan_turn
    prompt = joined_prompt(tail)
    if prompt is None or [m for m in tail if m.role == "tool"]:
        return False
    users = _host_users(stored)  # prompt_is_stored
    if users[-1].content != prompt or stored[-1].role == "user":
        return users[-1].content != prompt
    tail = split_after_reply(messages)[1]
    sent = sum(1 for m in messages if m.role == "user") - sum(
        1 for m in tail if m.role == "user") + 1
    return len(users) != sent


async def _median_ms(reps: int, fn: Callable[[], Awaitable[object]]) -> float:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def _paired_ms(reps: int, first: Callable[[], Awaitable[object]],
                     second: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Medians of two operations run alternately, so load on the machine hits both alike."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(reps):
        for fn, out in ((first, a), (second, b)):
            start = time.perf_counter()
            await fn()
            out.append((time.perf_counter() - start) * 1000)
    return statistics.median(a), statistics.median(b)


def _size(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


async def run(reps: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lineage.db"
        store = SQLiteCheckpointStore(path)
        runner = Runner(store)
        big = _entries(10_000, 1)
        for sid, entries in (("small", big[:10]), ("big", big)):
            await store.save_session(make_state(sid, entries))
        fork_small = await _median_ms(reps, lambda: runner.fork_session("small"))
        fork_big = await _median_ms(reps, lambda: runner.fork_session("big"))
        results["fork 10 entries (ms)"] = fork_small
        results["fork 10,000 entries (ms)"] = fork_big
        results["fork 10,000 / fork 10 entries"] = fork_big / fork_small
        before = _size(path)
        for _ in range(20):
            await runner.fork_session("big")
        results["bytes a 10,000-entry fork adds (KB)"] = (_size(path) - before) / 20 / 1024

        half = await runner.fork_session("big", 5_000)
        state = await store.load_session(half)
        assert state is not None
        grown = Runner(store)
        session = await grown.load_session(half)
        assert session is not None
        for entry in _entries(5_000, 2):
            session.memory.append(entry)
        await grown.save_session(session)
        await store.save_session(make_state("plain", list(session.memory.entries)))
        async def cold(session_id: str) -> None:
            store.reuse = StoreReuse()  # a cold read, as every new bridge process makes it
            await store.load_session(session_id)

        load_branch, load_plain = await _paired_ms(
            reps, lambda: cold(half), lambda: cold("plain"))
        results["load branch (ms)"], results["load plain (ms)"] = load_branch, load_plain
        results["load branch / load plain (10,000 entries)"] = load_branch / load_plain

        stored = big[:5_000]
        messages = [e.to_message() for e in stored]
        host = [*messages, messages[-1].model_copy(update={"role": "user",
                                                             "content": "one more"})]

        async def reconcile() -> None:
            classify(stored, host)

        async def prefix() -> None:  # what a continuation was checked with before
            assert _prefix_check(stored, host)

        classify_ms, prefix_ms = await _paired_ms(reps * 10, reconcile, prefix)
        results["classify 5,000 (ms)"], results["continuation check 5,000 (ms)"] = (
            classify_ms, prefix_ms)
        results["classify / continuation check (5,000 messages)"] = classify_ms / prefix_ms
        await store.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    results = asyncio.run(run(parser.parse_args().reps))
    for name, value in results.items():
        if name not in GOALS:
            print(f"      {name}: {value:.2f}")
    ok = True
    for name, limit in GOALS.items():
        passed = results[name] <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {results[name]:.2f} (limit {limit})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
