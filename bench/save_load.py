"""Save/load cost of the SQLite checkpoint store against raw sqlite3, by session length.

Run: ``.venv/bin/python bench/save_load.py`` (``--reps`` to change the repetitions).
``bench/save_load_postgres.py`` runs the same measurements on PostgreSQL (a ``Backend``).

For sessions of 10, 100, 1,000 and 10,000 entries it measures, with medians:

- saving one more turn (a user and an assistant entry plus the snapshot update) through
  ``SQLiteCheckpointStore.save_session``, beside a raw append of the same two rows
  (``BEGIN``, two ``INSERT``\\s, ``COMMIT``; same pragmas, same table shape and size);
- loading the whole session through ``load_session``, beside a raw read of the same rows
  plus ``json.loads`` of each;
- the database file size against the payload (entry JSON bytes plus snapshots).

Then, for sessions of 10, 1,000, 10,000 and 20,000 entries, one more exchange *through
the runtime*, as ``Runner.run_react`` makes it: append the user entry to the ``Session``,
save (``Session.to_state()`` and ``save_session``), append the answer, save again —
beside a raw append of the same rows in the same two transactions.

It checks the goals in ``GOALS`` and ``RUNTIME_GOALS``, printing PASS/FAIL for each
(exit status 1 on a FAIL).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nonoka.runtime.runner import Runner
from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.ledger import RuntimeLimits, RuntimeUsage, SessionRuntimeState
from nonoka.state.messages import ToolCall
from nonoka.state.plan import Plan, Step
from nonoka.state.session_state import SessionState, SessionStatus, TraceEvent
from nonoka.store.base import CheckpointStore, entry_json, snapshot_json
from nonoka.store.reuse import StoreReuse
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.database import BUSY_TIMEOUT_SECONDS

SIZES = (10, 100, 1_000, 10_000)
RUNTIME_SIZES = (10, 1_000, 10_000, 20_000)
WORDS = [
    "the", "file", "read", "write", "test", "session", "model", "tool", "call", "result",
    "error", "plan", "step", "budget", "token", "cache", "index", "query", "commit", "数据",
    "résumé", "—", "✓", "{", "}", "[", "]", '"', "\\", "42", "3.14",
]


# -- realistic content --------------------------------------------------------------------

def _text(rng: random.Random) -> str:
    n = rng.randint(200, 800)
    out: list[str] = []
    length = 0
    while length < n:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:n]


def make_turn(rng: random.Random, n: int) -> list[MemoryEntry]:
    """A user entry and an assistant entry; every fourth assistant entry calls a tool."""
    user = MemoryEntry.make("user", _text(rng))
    if n % 4 == 3:
        call = ToolCall(id=f"call_{n}", name="read_file",
                        arguments=json.dumps({"path": f"src/module_{n}.py"}))
        return [user, MemoryEntry.assistant(_text(rng), [call])]
    return [user, MemoryEntry.assistant(_text(rng))]


def make_state(session_id: str, entries: list[MemoryEntry]) -> SessionState:
    """A session with the small mutable rest filled in, as a real one would have."""
    plan = Plan(steps=[Step(id=f"s{i}", tool="run", args={"i": i},
                            depends_on=[f"s{i - 1}"] if i else []) for i in range(8)])
    return SessionState(
        session_id=session_id,
        status=SessionStatus.RUNNING,
        current_plan=plan,
        memory_entries=entries,
        runtime_state=SessionRuntimeState(
            limits=RuntimeLimits(max_model_turns=200, max_total_tokens=2_000_000),
            usage=RuntimeUsage(model_turns=len(entries) // 2, input_tokens=123_456),
        ),
        extension_state={"approval": {"granted": ["ls", "cat"]}, "progress": {"repeats": 1}},
        trace=[TraceEvent(kind="turn", detail=f"turn {i}") for i in range(50)],
        turn_count=len(entries) // 2,
    )


# -- measurements -------------------------------------------------------------------------

@dataclass
class Row:
    entries: int
    save_us: float
    raw_append_us: float
    load_ms: float
    raw_load_ms: float
    db_bytes: int
    payload_bytes: int


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


EntryRow = tuple[str, int, str]
"""``(session_id, seq, entry_json)``: one row of the raw baseline's table."""


class Backend(Protocol):
    """One engine under test, with its raw-driver baseline over the same table shape."""

    store: CheckpointStore

    async def raw_append(self, rows: list[EntryRow]) -> None:
        """Insert ``rows`` into the baseline table in one transaction."""
        ...

    async def raw_load(self, session_id: str) -> None:
        """Read the store's snapshot and entry rows of the session in one transaction,
        and ``json.loads`` each."""
        ...

    async def finish(self) -> int:
        """Close everything; return the bytes the store's data takes."""
        ...


class SQLiteBackend:
    """``SQLiteCheckpointStore`` beside plain ``sqlite3`` with the same pragmas."""

    description = f"SQLite {sqlite3.sqlite_version}"

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "store.db"
        self.store: CheckpointStore = SQLiteCheckpointStore(self.path)
        self.raw = _raw_connect(tmp / "raw.db")
        self.raw.execute("CREATE TABLE session_entries (session_id TEXT NOT NULL, "
                         "seq INTEGER NOT NULL, entry_json TEXT NOT NULL, "
                         "PRIMARY KEY (session_id, seq)) WITHOUT ROWID")
        self.reader = _raw_connect(self.path)

    async def raw_append(self, rows: list[EntryRow]) -> None:
        self.raw.execute("BEGIN")
        self.raw.executemany("INSERT INTO session_entries VALUES (?, ?, ?)", rows)
        self.raw.execute("COMMIT")

    async def raw_load(self, session_id: str) -> None:
        db = self.reader
        db.execute("BEGIN")
        (snapshot,) = db.execute("SELECT state_json FROM checkpoints WHERE session_id = ?",
                                 (session_id,)).fetchone()
        rows = db.execute("SELECT entry_json FROM session_entries WHERE session_id = ? "
                          "ORDER BY seq", (session_id,)).fetchall()
        db.execute("COMMIT")
        json.loads(snapshot)
        [json.loads(r[0]) for r in rows]

    async def finish(self) -> int:
        self.reader.close()
        self.raw.close()
        await self.store.close()  # folds the WAL into the file
        return self.path.stat().st_size


def _raw_connect(path: Path) -> sqlite3.Connection:
    """A plain connection with the store's pragmas."""
    db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_SECONDS)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    return db


async def measure(backend: Backend, size: int, reps: int, rng: random.Random) -> Row:
    # A session grows by two entries a save; spread the saves over several sessions so
    # each stays within ~10 % of ``size`` (small sizes get more, short sessions).
    per_session = max(5, size // 20)
    sessions = -(-reps // per_session)
    store = backend.store
    save_times: list[float] = []
    raw_times: list[float] = []
    states: list[SessionState] = []
    try:
        for s in range(sessions):
            sid = f"{s:08d}-bench-{size}"
            entries = [e for n in range(size // 2) for e in make_turn(rng, n)]
            state = make_state(sid, entries)
            state = state.model_copy(update={"revision": await store.save_session(state)})
            await backend.raw_append([(sid, i, entry_json(e)) for i, e in enumerate(entries)])
            gc.collect()
            for t in range(min(per_session, reps - s * per_session)):
                turn = make_turn(rng, size + t)
                state = state.model_copy(update={
                    "memory_entries": [*state.memory_entries, *turn],
                    "turn_count": state.turn_count + 1,
                })
                start = time.perf_counter()
                revision = await store.save_session(state)
                save_times.append(time.perf_counter() - start)
                state = state.model_copy(update={"revision": revision})

                seq = len(state.memory_entries) - 2
                rows = [(sid, seq, entry_json(turn[0])), (sid, seq + 1, entry_json(turn[1]))]
                start = time.perf_counter()
                await backend.raw_append(rows)
                raw_times.append(time.perf_counter() - start)
            states.append(state)

        longest = states[0]
        load_reps = max(7, min(200, 200_000 // size))
        load_times, raw_load_times = await _loads(backend, longest, load_reps)
        payload = sum(len(snapshot_json(s).encode()) for s in states) + sum(
            len(entry_json(e).encode()) for s in states for e in s.memory_entries
        )
    finally:
        db_bytes = await backend.finish()
    return Row(
        entries=size,
        save_us=_median_us(save_times),
        raw_append_us=_median_us(raw_times),
        load_ms=_median_us(load_times) / 1000,
        raw_load_ms=_median_us(raw_load_times) / 1000,
        db_bytes=db_bytes,
        payload_bytes=payload,
    )


def _forget(store: object) -> None:
    """Give ``store`` an empty ``StoreReuse``: its next read decodes every row and the
    snapshot, as a new process's store does (nothing is kept outside the store)."""
    if hasattr(store, "reuse"):
        store.reuse = StoreReuse()


async def _loads(
    backend: Backend, state: SessionState, reps: int
) -> tuple[list[float], list[float]]:
    sid = state.session_id
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(reps):
        _forget(backend.store)  # a cold read, as a new process makes it
        start = time.perf_counter()
        loaded = await backend.store.load_session(sid)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        await backend.raw_load(sid)
        theirs.append(time.perf_counter() - start)
    assert loaded == state, "load returned something other than what was saved"
    return ours, theirs


@dataclass
class RuntimeRow:
    entries: int
    exchange_us: float
    raw_us: float


async def measure_runtime(backend: Backend, size: int, reps: int,
                          rng: random.Random) -> RuntimeRow:
    """One more exchange through ``Session`` and ``Runner``'s save, as ``run_react``
    makes it (two saves), beside a raw append of its two rows in two transactions."""
    store = backend.store
    runner = Runner(store)
    per_session = max(5, size // 20)
    exchanges: list[float] = []
    raws: list[float] = []
    try:
        for s in range(-(-reps // per_session)):
            sid = f"{s:08d}-runtime-{size}"
            session = Session.from_state(make_state(sid, [
                e for n in range(size // 2) for e in make_turn(rng, n)]))
            await runner.save_session(session)
            gc.collect()
            for t in range(min(per_session, reps - s * per_session)):
                user, answer = make_turn(rng, size + t)
                start = time.perf_counter()
                session.memory.append(user)
                await runner.save_session(session)
                session.memory.append(answer)
                await runner.save_session(session)
                exchanges.append(time.perf_counter() - start)
                seq = len(session.memory) - 2
                rows = [(sid, seq, entry_json(user)), (sid, seq + 1, entry_json(answer))]
                start = time.perf_counter()
                await backend.raw_append(rows[:1])
                await backend.raw_append(rows[1:])
                raws.append(time.perf_counter() - start)
    finally:
        await backend.finish()
    return RuntimeRow(size, _median_us(exchanges), _median_us(raws))


RUNTIME_GOALS: list[tuple[str, Callable[[list[RuntimeRow]], tuple[float, float]]]] = [
    ("an exchange through the runtime at 20,000 entries costs <= 1.3x one at 10",
     lambda rows: (rows[-1].exchange_us / rows[0].exchange_us, 1.3)),
    ("an exchange through the runtime <= 5x the raw append of its rows (worst size)",
     lambda rows: (max(r.exchange_us / r.raw_us for r in rows), 5.0)),
]


def report_runtime(rows: list[RuntimeRow]) -> bool:
    header = f"{'entries':>8} | {'exchange':>10} | {'raw append':>10} | {'x':>5}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.entries:>8,} | {r.exchange_us:>7.0f} µs | {r.raw_us:>7.0f} µs | "
              f"{r.exchange_us / r.raw_us:>5.2f}")
    print()
    ok = True
    for name, check in RUNTIME_GOALS:
        value, limit = check(rows)
        passed = value <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {value:.2f} (limit {limit})")
    return ok


# -- report -------------------------------------------------------------------------------

GOALS: list[tuple[str, Callable[[list[Row]], tuple[float, float]]]] = [
    ("saving a turn at 10,000 entries costs <= 1.5x saving one at 10",
     lambda rows: (rows[-1].save_us / rows[0].save_us, 1.5)),
    ("save <= 10x raw append (worst size)",
     lambda rows: (max(r.save_us / r.raw_append_us for r in rows), 10.0)),
    ("load of 10,000 entries <= 3x raw read + json.loads",
     lambda rows: (rows[-1].load_ms / rows[-1].raw_load_ms, 3.0)),
    ("database size <= 2x payload (worst size)",
     lambda rows: (max(r.db_bytes / r.payload_bytes for r in rows), 2.0)),
]


def report(rows: list[Row]) -> bool:
    header = (f"{'entries':>8} | {'save turn':>10} | {'raw append':>10} | {'x':>5} | "
              f"{'load':>9} | {'raw load':>9} | {'x':>5} | {'db':>9} | {'payload':>9} | {'x':>5}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.entries:>8,} | {r.save_us:>7.0f} µs | {r.raw_append_us:>7.0f} µs | "
              f"{r.save_us / r.raw_append_us:>5.2f} | {r.load_ms:>6.2f} ms | "
              f"{r.raw_load_ms:>6.2f} ms | {r.load_ms / r.raw_load_ms:>5.2f} | "
              f"{r.db_bytes / 1024:>6.0f} KiB | {r.payload_bytes / 1024:>6.0f} KiB | "
              f"{r.db_bytes / r.payload_bytes:>5.2f}")
    print()
    ok = True
    for name, check in GOALS:
        value, limit = check(rows)
        passed = value <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {value:.2f} (limit {limit})")
    return ok


def parse_args(extra: Sequence[tuple[str, str, str]] = ()) -> argparse.Namespace:
    """``--reps`` and ``--seed``, plus ``extra`` string options ``(flag, default, help)``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=300, help="saves timed per size")
    parser.add_argument("--seed", type=int, default=7)
    for flag, default, help in extra:
        parser.add_argument(flag, default=default, help=help)
    return parser.parse_args()


async def run(
    open_backend: Callable[[Path], Awaitable[Backend]], description: str,
    args: argparse.Namespace,
) -> int:
    """Measure every size on a fresh backend; print the table and the goals."""
    rng = random.Random(args.seed)
    rows: list[Row] = []
    for size in SIZES:
        with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as tmp:
            rows.append(await measure(await open_backend(Path(tmp)), size, args.reps, rng))
    runtime_rows: list[RuntimeRow] = []
    for size in RUNTIME_SIZES:
        with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as tmp:
            runtime_rows.append(await measure_runtime(await open_backend(Path(tmp)), size,
                                                      args.reps, rng))
    print(f"python {sys.version.split()[0]}, {description}, "
          f"{args.reps} saves per size, medians\n")
    ok = report(rows)
    print("\nOne more exchange through the runtime (Session, to_state, save; twice):\n")
    return 0 if report_runtime(runtime_rows) and ok else 1


async def _sqlite(tmp: Path) -> Backend:
    return SQLiteBackend(tmp)


async def main() -> int:
    return await run(_sqlite, SQLiteBackend.description, parse_args())


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
