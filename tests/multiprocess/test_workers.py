"""Eight worker processes share 200 session-turns while some are SIGKILLed and restarted.

At the end every turn is recorded exactly once and in order in its session, every queue
row is done, and no session was ever run by two workers at once: each worker logs when
it starts and ends running a turn (inside its lease), a killed worker's open run ends
when it was killed, and per session those intervals never overlap.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.store.base import CheckpointStore
from nonoka.store.project import open_project_stores
from tests import pg
from tests.multiprocess.worker import Job, TurnQueue, prompt, spawn

WORKERS = 8
SESSIONS = 20
TURNS = 10  # per session: 200 in all
KILLS = 8
TTL = 10.0
"""Long enough that a worker starved of CPU on a loaded machine still renews its lease
in time (a lease that lapses makes its holder's next save a ``SessionConflictError``, as
it must); a killed worker's lease is taken over at once all the same, its holder being
provably gone (``nonoka.store.leases.holder_is_dead``)."""
DEADLINE = 600.0
"""A bound on a hang, not a timing claim."""


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'sessions.db'}"
    else:
        with pg.temp_schema() as schema:
            yield pg.schema_url(schema)


class Fleet:
    """The worker processes, their logs, and when each killed one died."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.live: dict[str, subprocess.Popen[bytes]] = {}
        self.killed_at: dict[int, float] = {}
        self.reports: list[dict[str, int]] = []
        self.started = 0

    def start(self) -> None:
        name = f"w{self.started}"
        self.started += 1
        self.live[name] = spawn(Job(url=self.url, name=name, log=str(self.logs / f"{name}.log"),
                                    ttl=TTL, tool_sleep=0.03, seed=self.started))

    def kill(self, name: str) -> None:
        proc = self.live.pop(name)
        # Its run ends between here and its death. Another worker may take its session
        # over as soon as it is dead, before ``communicate`` returns here (on a loaded
        # machine, milliseconds later), so the time of the signal is the run's end: a
        # run that overlaps it overlapped a live worker.
        self.killed_at[proc.pid] = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL

    def reap(self) -> None:
        """Collect workers that finished; one that failed fails the test."""
        for name, proc in list(self.live.items()):
            if proc.poll() is not None:
                out, err = proc.communicate()
                assert proc.returncode == 0, f"worker {name} failed:\n{err.decode()}"
                self.reports.append(json.loads(out))
                del self.live[name]

    def mid_turn(self) -> list[str]:
        """Workers whose last logged event is the start of a run."""
        found = []
        for name in self.live:
            lines = _read(self.logs / f"{name}.log")
            if lines and lines[-1]["e"] == "start":
                found.append(name)
        return found

    def stop_all(self) -> None:
        for name in list(self.live):
            self.kill(name)


def _read(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


async def test_workers_share_sessions_safely_while_being_killed(
    url: str, tmp_path: Path
) -> None:
    queue = TurnQueue(url)
    sessions = queue.create(SESSIONS, TURNS)
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(url, logs)
    rng = random.Random(1)
    kills_mid_turn = 0
    try:
        for _ in range(WORKERS):
            fleet.start()
        deadline = time.monotonic() + DEADLINE
        while fleet.live:
            assert time.monotonic() < deadline, "the workers did not finish in time"
            await asyncio.sleep(0.02)
            fleet.reap()
            # Kill as the work progresses (from 10 % to 80 % done), so every kill lands
            # while there is work left: mostly mid-turn, every fourth one anywhere.
            kills = len(fleet.killed_at)
            if kills < KILLS and queue.done() >= (kills + 1) * SESSIONS * TURNS // (KILLS + 2):
                targets = fleet.mid_turn() if kills % 4 else list(fleet.live)
                if targets:
                    victim = rng.choice(targets)
                    kills_mid_turn += victim in fleet.mid_turn()
                    fleet.kill(victim)
                    fleet.start()
    finally:
        fleet.stop_all()
        queue.close()

    assert len(fleet.killed_at) == KILLS
    assert kills_mid_turn >= KILLS // 2
    await _check_sessions(url, sessions)
    _check_queue(url)
    events = _check_no_overlap(logs, fleet.killed_at)
    assert events["twice"] == 0, "a turn was completed twice"
    assert events["resume"] >= 1, "no worker ever finished a turn another one was killed in"
    print(f"{url.partition(':')[0]}: {fleet.started} workers started, {KILLS} killed "
          f"({kills_mid_turn} mid-turn), {events['resume']} turns resumed, "
          f"{sum(r['busy'] for r in fleet.reports)} busy sessions skipped by the survivors")


async def _check_sessions(url: str, sessions: list[str]) -> None:
    stores = open_project_stores(Path.cwd(), url)
    try:
        for sid in sessions:
            await _check_session(stores.checkpoints, sid)
    finally:
        await stores.close()


async def _check_session(store: CheckpointStore, sid: str) -> None:
    state = await store.load_session(sid)
    assert state is not None, f"{sid} was never stored"
    entries = state.memory_entries
    users = [e.content for e in entries if e.role == "user"]
    assert users == [prompt(sid, t) for t in range(TURNS)], f"{sid}: turns lost or repeated"
    # Each turn is whole: the prompt, one tool call, its result, the answer.
    assert len(entries) == 4 * TURNS, f"{sid}: {len(entries)} entries"
    for t in range(TURNS):
        user, ask, result, answer = entries[4 * t: 4 * t + 4]
        assert ask.role == "assistant" and len(ask.tool_calls) == 1
        assert result.role == "tool" and result.tool_call_id == ask.tool_calls[0].id
        assert result.content == f"noted: {user.content}"
        assert answer.role == "assistant" and answer.content == f"done, {result.content}"
    assert state.turn_count == TURNS
    assert state.runtime_state.usage.tool_calls >= TURNS


def _check_queue(url: str) -> None:
    queue = TurnQueue(url)
    try:
        rows = queue.rows()
    finally:
        queue.close()
    assert len(rows) == SESSIONS * TURNS
    assert all(done_by is not None for _, _, done_by, _ in rows), "turns were lost"
    by_session: dict[str, list[float]] = defaultdict(list)
    for sid, _, _, done_at in rows:
        assert done_at is not None
        by_session[sid].append(done_at)
    for sid, times in by_session.items():
        assert times == sorted(times), f"{sid}: turns finished out of order"


def _check_no_overlap(logs: Path, killed_at: dict[int, float]) -> Counter[str]:
    """Check the run intervals; return how often each kind of event was logged."""
    runs: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    open_runs: dict[int, dict[str, Any]] = {}
    seen: Counter[str] = Counter()
    for log in sorted(logs.iterdir()):
        for event in _read(log):
            seen[event["e"]] += 1
            if event["e"] == "start":
                assert event["pid"] not in open_runs, "a worker ran two turns at once"
                open_runs[event["pid"]] = event
            elif event["e"] == "end":
                began = open_runs.pop(event["pid"])
                assert (began["sid"], began["turn"]) == (event["sid"], event["turn"])
                runs[event["sid"]].append((began["t"], event["t"], event["worker"]))
    for pid, began in open_runs.items():  # runs cut short by SIGKILL
        assert pid in killed_at, f"worker pid {pid} never finished a run but was not killed"
        runs[began["sid"]].append((began["t"], killed_at[pid], began["worker"]))
    assert sum(map(len, runs.values())) >= SESSIONS * TURNS
    for sid, spans in runs.items():
        spans.sort()
        for (_, end, who), (start, _, next_who) in itertools.pairwise(spans):
            assert start >= end, f"{sid} was run by {who} and {next_who} at once"
    return seen
