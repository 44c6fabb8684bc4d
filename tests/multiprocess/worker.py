"""A worker process: take session-turns from a shared queue and run each under a lease.

Run as ``python worker.py '<json job>'`` (see ``Job``); prints a JSON report when the
queue is empty. The queue is a table in the store's own database (SQLite file or
PostgreSQL schema), one row per ``(session, turn)``; a row is marked done once.

A turn is: hold the session's lease → if the turn is already done, nothing; if its user
message is stored (a worker died mid-turn) resume the session, else run the turn with
``Runner.run_react`` (an offline ``FunctionModel`` that calls one tool, then answers) →
mark the row done → release. So a worker killed at any point leaves at most a lease
that expires and a turn the next worker finishes, never a turn run twice. Every worker
logs when it starts and ends running a turn, to check that runs never overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nonoka import Agent, Runner, tool
from nonoka.errors import SessionBusyError
from nonoka.state.messages import Message
from nonoka.state.session_state import SessionStatus
from nonoka.store.base import SessionLeases
from nonoka.store.leases import hold_lease, new_lease_owner
from nonoka.store.project import open_project_stores
from nonoka.testing import FunctionModel, call, text

WORKER = Path(__file__).resolve()


def prompt(session_id: str, turn: int) -> str:
    return f"turn {turn} of {session_id}"


class TurnQueue:
    """The ``turn_queue`` table, over sqlite3 or psycopg (sync), by the store URL."""

    def __init__(self, url: str) -> None:
        self._db: Any
        if url.startswith("sqlite:"):
            self._db = sqlite3.connect(url.removeprefix("sqlite:"), isolation_level=None,
                                       timeout=30)
            self._mark = "?"
        else:
            import psycopg

            self._db = psycopg.connect(url, autocommit=True)
            self._mark = "%s"

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self._db.execute(sql.replace("?", self._mark), params)

    def create(self, sessions: int, turns: int) -> list[str]:
        """Fill the queue; return the session ids."""
        self._run("CREATE TABLE turn_queue (session_id TEXT NOT NULL, turn INTEGER NOT NULL, "
                  "done_by TEXT, done_at DOUBLE PRECISION, PRIMARY KEY (session_id, turn))")
        ids = [f"sess-{n:03d}" for n in range(sessions)]
        for turn in range(turns):
            for sid in ids:
                self._run("INSERT INTO turn_queue (session_id, turn) VALUES (?, ?)", (sid, turn))
        return ids

    def pending(self) -> list[tuple[str, int]]:
        """Each unfinished session with its next turn."""
        rows = self._run("SELECT session_id, min(turn) FROM turn_queue WHERE done_by IS NULL "
                         "GROUP BY session_id").fetchall()
        return [(str(sid), int(turn)) for sid, turn in rows]

    def is_done(self, session_id: str, turn: int) -> bool:
        row = self._run("SELECT done_by FROM turn_queue WHERE session_id = ? AND turn = ?",
                        (session_id, turn)).fetchone()
        return row is not None and row[0] is not None

    def mark_done(self, session_id: str, turn: int, worker: str) -> bool:
        """``False`` if the row was already done: a turn completed twice."""
        cur = self._run("UPDATE turn_queue SET done_by = ?, done_at = ? WHERE session_id = ? "
                        "AND turn = ? AND done_by IS NULL",
                        (worker, time.time(), session_id, turn))
        return int(cur.rowcount) == 1

    def done(self) -> int:
        return int(self._run("SELECT count(*) FROM turn_queue WHERE done_by IS NOT NULL")
                   .fetchone()[0])

    def rows(self) -> list[tuple[str, int, str | None, float | None]]:
        return [tuple(r) for r in self._run(
            "SELECT session_id, turn, done_by, done_at FROM turn_queue "
            "ORDER BY session_id, turn").fetchall()]

    def close(self) -> None:
        self._db.close()


@dataclass
class Job:
    url: str
    """The store and queue: ``sqlite:/abs/file.db`` or a ``postgresql://`` URL."""
    name: str
    log: str
    """File this worker appends its run intervals to (JSON lines)."""
    ttl: float = 1.0
    tool_sleep: float = 0.0
    """Each tool call sleeps up to this long (random), leaving room for a kill mid-turn."""
    seed: int = 0
    start_at: float = 0.0
    """Wall-clock time to start taking turns (lets every worker start together)."""


def spawn(job: Job) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), json.dumps(asdict(job))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def build_agent(rng: random.Random, tool_sleep: float) -> Agent:
    @tool(idempotent=True)
    async def note(text: str) -> str:
        """Write a note (safe to repeat)."""
        await asyncio.sleep(rng.uniform(0, tool_sleep))
        return f"noted: {text}"

    def answer(messages: list[Message], _tools: object) -> Any:
        last = messages[-1]
        if last.role == "tool":
            return text(f"done, {last.content}")
        return call("note", {"text": last.content})

    return Agent(model=FunctionModel(answer), tools=[note])


class Worker:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.rng = random.Random(job.seed)
        self.agent = build_agent(self.rng, job.tool_sleep)
        self.report = {"turns": 0, "resumed": 0, "already_done": 0, "busy": 0, "twice": 0,
                       "late": 0}
        self._log = os.open(job.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def log(self, event: str, session_id: str, turn: int) -> None:
        line = {"e": event, "sid": session_id, "turn": turn, "t": time.time(),
                "pid": os.getpid(), "worker": self.job.name}
        os.write(self._log, (json.dumps(line) + "\n").encode())  # one append: atomic

    async def run(self) -> None:
        stores = open_project_stores(Path.cwd(), self.job.url)
        queue = TurnQueue(self.job.url)
        leases = stores.checkpoints
        assert isinstance(leases, SessionLeases)
        try:
            await stores.checkpoints.load_session("warm-up")  # connect before the start
            wait = self.job.start_at - time.time()
            self.report["late"] = int(self.job.start_at > 0 and wait < 0)
            await asyncio.sleep(max(0.0, wait))
            runner = Runner(stores.checkpoints)
            while pending := queue.pending():
                self.rng.shuffle(pending)
                for session_id, turn in pending:
                    try:
                        async with hold_lease(leases, session_id, new_lease_owner(),
                                              self.job.ttl):
                            await self.turn(runner, queue, session_id, turn)
                        break
                    except SessionBusyError:
                        self.report["busy"] += 1
                else:
                    await asyncio.sleep(0.02)  # every unfinished session is being run
        finally:
            queue.close()
            await stores.close()
            os.close(self._log)

    async def turn(self, runner: Runner, queue: TurnQueue, session_id: str, turn: int) -> None:
        if queue.is_done(session_id, turn):  # finished between listing and leasing
            self.report["already_done"] += 1
            return
        self.log("start", session_id, turn)
        message = prompt(session_id, turn)
        state = await runner.store.load_session(session_id)
        users = [e.content for e in state.memory_entries if e.role == "user"] if state else []
        if users and users[-1] == message:  # a worker died in this turn: finish it
            assert state is not None
            if state.status != SessionStatus.COMPLETED:
                self.log("resume", session_id, turn)
                result = await runner.resume(self.agent, session_id)
                assert result.success, result.error
                self.report["resumed"] += 1
        else:
            assert message not in users, f"{message!r} is stored but is not the last turn"
            result = await runner.run_react(self.agent, message, session_id=session_id)
            assert result.success, result.error
        self.log("end", session_id, turn)
        if queue.mark_done(session_id, turn, self.job.name):
            self.report["turns"] += 1
        else:
            self.log("twice", session_id, turn)
            self.report["twice"] += 1


async def main(job: Job) -> None:
    worker = Worker(job)
    await worker.run()
    print(json.dumps(worker.report))


if __name__ == "__main__":
    asyncio.run(main(Job(**json.loads(sys.argv[1]))))
