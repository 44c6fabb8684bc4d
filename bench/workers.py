"""Turns per second with 1, 2, 4 and 8 worker processes, on SQLite and on PostgreSQL.

Run: ``.venv/bin/python bench/workers.py [--turns N] [--sessions N] [--repeat N]`` (the
PostgreSQL server is the tests' one: ``NONOKA_TEST_POSTGRES_URL`` or the local server).

Each configuration gets a fresh database (a SQLite file in a temporary directory, or a
new PostgreSQL schema, dropped afterwards) holding a queue of ``--turns`` session-turns
spread over ``--sessions`` sessions. The workers are the ones ``tests/multiprocess`` runs
(without the kills): each turn takes the session's lease, runs one ``Runner.run_react``
turn (an offline model that calls one tool, then answers: two model calls, four saves),
marks the queue row done and releases the lease. Workers connect first and then start
together at a set time; throughput is turns over the time from that start to the last
row done. The latency column is the median time a worker spent running one turn (inside
its lease, from its log).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import pg
from tests.multiprocess.worker import Job, TurnQueue, spawn

WORKER_COUNTS = (1, 2, 4, 8)


@dataclass
class Result:
    engine: str
    workers: int
    turns: int
    seconds: float
    turn_ms: float
    busy: int
    late: int

    @property
    def rate(self) -> float:
        return self.turns / self.seconds


def run_fleet(url: str, engine: str, workers: int, turns: int, sessions: int,
              tmp: Path) -> Result:
    queue = TurnQueue(url)
    try:
        queue.create(sessions, turns // sessions)
        start_at = time.time() + 1.0 + 0.4 * workers  # every worker connected by then
        procs = [spawn(Job(url=url, name=f"w{n}", log=str(tmp / f"w{n}.log"), ttl=10.0,
                           seed=n, start_at=start_at)) for n in range(workers)]
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise SystemExit(f"a worker failed:\n{err.decode()}")
            reports.append(json.loads(out))
        rows = queue.rows()
    finally:
        queue.close()
    done = [at for *_, at in rows if at is not None]
    assert len(done) == len(rows), "turns were left undone"
    return Result(engine, workers, len(rows), max(done) - start_at, _turn_ms(tmp),
                  sum(r["busy"] for r in reports), sum(r["late"] for r in reports))


def _turn_ms(logs: Path) -> float:
    spans: list[float] = []
    for log in logs.glob("w*.log"):
        started: dict[int, float] = {}
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["e"] == "start":
                started[event["pid"]] = event["t"]
            elif event["e"] == "end":
                spans.append(event["t"] - started.pop(event["pid"]))
    return statistics.median(spans) * 1000


def bench(engine: str, workers: int, args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as tmp:
        if engine == "sqlite":
            return run_fleet(f"sqlite:{Path(tmp) / 'sessions.db'}", engine, workers,
                             args.turns, args.sessions, Path(tmp))
        with pg.temp_schema() as schema:
            return run_fleet(pg.schema_url(schema), engine, workers, args.turns,
                             args.sessions, Path(tmp))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=640)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per configuration; the median run is shown")
    args = parser.parse_args()
    print(f"{args.turns} turns over {args.sessions} sessions, {os.cpu_count()} cores\n")
    header = (f"{'engine':<9} | {'workers':>7} | {'turns/s':>8} | {'x 1 worker':>10} | "
              f"{'turn (median)':>13} | {'busy skips':>10}")
    print(header)
    print("-" * len(header))
    for engine in args.engines.split(","):
        base = None
        for workers in WORKER_COUNTS:
            runs = sorted((bench(engine, workers, args) for _ in range(args.repeat)),
                          key=lambda r: r.rate)
            result = runs[len(runs) // 2]
            base = base or result.rate
            print(f"{engine:<9} | {workers:>7} | {result.rate:>8.1f} | "
                  f"{result.rate / base:>10.2f} | {result.turn_ms:>10.1f} ms | "
                  f"{result.busy:>10}" + ("  (a worker started late)" if result.late else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
