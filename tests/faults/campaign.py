"""The crash campaign: kill a real process at every fault point, continue, check invariants.

Usage (from the repository root)::

    python -m tests.faults.campaign            # every (point, occurrence) pair
    python -m tests.faults.campaign --sample 4 # a few pairs per scenario
    python -m tests.faults.campaign --scenario bridge --jobs 4 --verbose

Two conversations are played, each as a host would play it:

``bridge``
    a host drives real ``nonoka bridge`` processes through ``NonokaProvider`` (one process
    per call) against a scripted OpenAI-compatible HTTP server: a text turn, a turn whose
    answer calls two host tools, the turn that hands back their results, a last text turn.
``worker``
    ``tests/faults/worker.py`` processes drive ``Runner`` directly (the bridge has host tools
    only): a turn with two idempotent lookups and a non-idempotent e-mail, a second turn,
    and a plan whose first layer runs three steps in parallel.

First a clean run with ``NONOKA_FAULT_TRACE`` lists every fault point each step reaches,
in order; that gives the (point, occurrence) pairs. Then, for each pair, the project as it
stood before that step is copied, the step is run with ``NONOKA_FAULT=<point>:<n>`` (the
process SIGKILLs itself there), the same request is retried by a fresh process (as a host
would after a crash) and the rest of the conversation is played. The invariants checked
after every kill are listed in ``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonoka.faults import FAULT_ENV, POINTS, TRACE_ENV
from nonoka.llm.base import ModelResponse
from nonoka.provider import BridgeError, NonokaProvider
from nonoka.state.entries import dangling_tool_calls
from nonoka.state.session_state import SessionState
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing import calls, text
from nonoka.testing.server import ScriptedOpenAIServer, Step

ROOT = Path(__file__).resolve().parents[2]
DB = Path(".nonoka") / "sessions.db"
PROCESS_TIMEOUT = 60.0

Msg = dict[str, Any]


@dataclass(frozen=True)
class Pair:
    """One crash: the ``occurrence``-th time ``point`` is reached while playing ``step``."""

    scenario: str
    step: int
    point: str
    occurrence: int

    def __str__(self) -> str:
        return f"{self.scenario}/step{self.step + 1}/{self.point}#{self.occurrence}"


@dataclass
class Outcome:
    """What one crash run found."""

    pair: Pair
    killed: bool = False
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Snapshot:
    """What the database holds: decoded sessions, index rows, and the integrity check."""

    sessions: dict[str, SessionState]
    index: dict[str, dict[str, Any]]
    integrity: str


# -- reading a project's database ---------------------------------------------------------


async def snapshot(project: Path) -> Snapshot:
    """Decode every stored session with the real store (migrations and step merges included)."""
    file = project / DB
    if not file.exists():
        return Snapshot({}, {}, "ok")
    integrity = _integrity(file)
    store = SQLiteCheckpointStore(file)
    try:
        ids = [r[0] for r in store.connection.execute("SELECT session_id FROM checkpoints")]
        sessions: dict[str, SessionState] = {}
        for sid in ids:
            state = await store.load_session(sid)
            if state is not None:
                sessions[sid] = state
        rows = store.connection.execute(
            "SELECT session_id, status, turn_count, message_count, input_tokens, "
            "output_tokens, metadata FROM cli_sessions").fetchall()
    finally:
        await store.close()
    index = {r[0]: {"status": r[1], "turn_count": r[2], "message_count": r[3],
                    "input_tokens": r[4], "output_tokens": r[5], "metadata": json.loads(r[6])}
             for r in rows}
    return Snapshot(sessions, index, integrity)


def _integrity(file: Path) -> str:
    db = sqlite3.connect(file)
    try:
        return "; ".join(str(r[0]) for r in db.execute("PRAGMA integrity_check"))
    finally:
        db.close()


def conversation(state: SessionState) -> list[tuple[Any, ...]]:
    """The stored conversation as comparable tuples (role, content, call ids)."""
    return [(e.role, e.content, e.tool_call_id,
             tuple((c.id, c.name, c.arguments) for c in e.tool_calls))
            for e in state.memory_entries]


def usage_of(state: SessionState) -> dict[str, int]:
    usage = state.runtime_state.usage
    return {"model_turns": usage.model_turns, "tool_calls": usage.tool_calls,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


def common_checks(before: Snapshot, after: Snapshot, out: Outcome) -> None:
    """Invariants every scenario shares: integrity, nothing persisted is lost or reset,
    no unanswered call, and the index agrees with the checkpoints."""
    for when, snap in (("after the kill", before), ("at the end", after)):
        if snap.integrity != "ok":
            out.violations.append(f"integrity_check {when}: {snap.integrity}")
    for sid, killed in before.sessions.items():
        final = after.sessions.get(sid)
        if final is None:
            out.violations.append(f"session {sid} stored before the kill is gone")
            continue
        if conversation(final)[:len(killed.memory_entries)] != conversation(killed):
            out.violations.append(f"session {sid}: entries stored before the kill were "
                                  "lost, changed or reordered")
        old, new = usage_of(killed), usage_of(final)
        shrunk = [k for k in old if new[k] < old[k]]
        if shrunk:
            out.violations.append(f"session {sid}: usage went backwards ({shrunk}: {old} -> "
                                  f"{new})")
    for sid, state in after.sessions.items():
        _, dangling = dangling_tool_calls(state.memory_entries)
        if dangling and str(state.status) != "paused":
            out.violations.append(f"session {sid} ({state.status}) has unanswered tool calls "
                                  f"{[c.id for c in dangling]}")
        index_checks(sid, state, before, after, out)
    for sid in after.index:
        if sid not in after.sessions:
            out.violations.append(f"index row {sid} has no checkpoint")


def index_checks(sid: str, state: SessionState, before: Snapshot, after: Snapshot,
                 out: Outcome) -> None:
    """The index row agrees with the checkpoint for every session the continuation wrote.

    A session nothing continued (a killed first request: the host's retry holds no
    assistant message, so it is a new conversation) keeps the row its last process wrote;
    that is noted.
    """
    row = after.index.get(sid)
    if row is None:
        out.notes.append("stillborn session (checkpoint without index row)")
        return
    expected = {"status": str(state.status), "turn_count": state.turn_count,
                "message_count": len(state.memory_entries),
                "input_tokens": state.runtime_state.usage.input_tokens,
                "output_tokens": state.runtime_state.usage.output_tokens}
    differs = {k: (row[k], v) for k, v in expected.items() if row[k] != v}
    killed = before.sessions.get(sid)
    if differs and (killed is None or killed.revision != state.revision):
        out.violations.append(f"session {sid}: index row disagrees with the checkpoint "
                              f"(index, checkpoint): {differs}")
    elif differs:
        out.notes.append("abandoned session whose index row lags its checkpoint")


def trace_counts(trace: Path) -> list[str]:
    return trace.read_text().split() if trace.exists() else []


def pairs_of(scenario: str, step: int, points: Sequence[str]) -> list[Pair]:
    seen: Counter[str] = Counter()
    found = []
    for name in points:
        seen[name] += 1
        found.append(Pair(scenario, step, name, seen[name]))
    return found


def copy_project(source: Path, target: Path) -> None:
    if source.exists():
        shutil.copytree(source, target)
    else:
        target.mkdir(parents=True)


# -- the bridge conversation ----------------------------------------------------------------

TOOLS: list[Msg] = [{"name": "read", "description": "Read a file",
                     "parameters": {"type": "object",
                                    "properties": {"path": {"type": "string"}},
                                    "required": ["path"]}}]
BRIDGE_STEPS = ("hello", "please read a and b", None, "thanks")
"""A user message per step; ``None`` hands back the results of the host tools."""


def model_answer(body: dict[str, Any]) -> Step:
    """The scripted model: a pure function of the conversation it is sent."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return text("I read: " + " | ".join(results), input_tokens=11, output_tokens=7)
    if last["role"] == "user" and "read" in last["content"]:
        response: ModelResponse = calls(("read", {"path": "a"}, "call_a"),
                                        ("read", {"path": "b"}, "call_b"))
        return response
    users = sum(1 for m in messages if m["role"] == "user")
    return text(f"answer {users} to {last['content']}", input_tokens=11, output_tokens=7)


class BridgeScenario:
    """A host resending the whole history to one bridge process per call."""

    name = "bridge"
    steps = len(BRIDGE_STEPS)

    def __init__(self, base_url: str) -> None:
        self.env = {"NONOKA_MODEL": "openai:test-model", "OPENAI_API_KEY": "sk-campaign",
                    "OPENAI_BASE_URL": base_url, "NONOKA_DATABASE_URL": "",
                    FAULT_ENV: "", TRACE_ENV: ""}
        self.histories: list[list[Msg]] = []
        """The host's history before each step of the clean run (and after the last)."""

    def provider(self, project: Path, **extra: str) -> NonokaProvider:
        return NonokaProvider(project, env={**self.env, **extra}, timeout=PROCESS_TIMEOUT,
                              cancel_grace=2.0)

    @staticmethod
    def request(step: int, history: list[Msg]) -> list[Msg]:
        said = BRIDGE_STEPS[step]
        if said is not None:
            return [*history, {"role": "user", "content": said}]
        calls_made = history[-1].get("tool_calls") or []
        return [*history, *({"role": "tool", "tool_call_id": c["id"],
                             "content": f"contents of {json.loads(c['arguments'])['path']}"}
                            for c in calls_made)]

    async def play(self, provider: NonokaProvider, step: int, history: list[Msg],
                   out: Outcome | None) -> list[Msg] | None:
        """One host call; the new history, or ``None`` when the bridge died before finishing."""
        messages = self.request(step, history)
        try:
            result = await provider.chat(messages, TOOLS)
        except BridgeError:
            return None
        if not result.ok:
            problem = f"step {step} failed: {[(e.code, e.message) for e in result.errors]}"
            if out is None:
                raise AssertionError(problem)
            out.violations.append(problem)
        return [*messages, result.assistant_message().model_dump(exclude_none=True)]

    async def clean(self, work: Path) -> list[list[str]]:
        project = work / "clean"
        project.mkdir()
        provider = self.provider(project)
        history: list[Msg] = []
        traces = []
        for step in range(self.steps):
            shutil.copytree(project, work / f"before-{step}")
            self.histories.append(history)
            trace = work / f"trace-{step}"
            provider.env = {**self.env, TRACE_ENV: str(trace)}
            new = await self.play(provider, step, history, None)
            assert new is not None, f"clean step {step} died"
            history = new
            traces.append(trace_counts(trace))
        self.histories.append(history)
        self.final = await snapshot(project)
        self.final_sid = provider.session_id
        return traces

    async def crash(self, work: Path, pair: Pair, out: Outcome) -> None:
        project = work / "project"
        copy_project(work.parent / f"before-{pair.step}", project)
        trace = work / "trace"
        provider = self.provider(project, **{FAULT_ENV: f"{pair.point}:{pair.occurrence}",
                                            TRACE_ENV: str(trace)})
        history = self.histories[pair.step]
        new = await self.play(provider, pair.step, history, out)
        out.killed = _reached(trace, pair)
        before = await snapshot(project)
        provider.env = dict(self.env)
        if restarted_host(pair):  # the host died too: it starts again from the id file
            provider = self.provider(project)
        if new is None:  # the host saw no finish: it retries the same request
            new = await self.play(provider, pair.step, history, out)
            if new is None:
                out.violations.append("the retried request died too")
                return
        for step in range(pair.step + 1, self.steps):
            new = await self.play(provider, step, new, out)
            if new is None:
                out.violations.append(f"step {step} died without a fault armed")
                return
        after = await snapshot(project)
        common_checks(before, after, out)
        self.check(project, provider, new, after, out)

    def check(self, project: Path, provider: NonokaProvider, history: list[Msg],
              after: Snapshot, out: Outcome) -> None:
        if history != self.histories[-1]:
            out.violations.append("the host's conversation differs from the clean run's "
                                  "(an answer was lost, duplicated or changed)")
        sid = provider.session_id
        state = after.sessions.get(sid or "")
        if state is None:
            out.violations.append(f"the provider's session {sid} is not stored")
            return
        clean = self.final.sessions[self.final_sid or ""]
        if conversation(state) != conversation(clean):
            out.violations.append("the stored conversation differs from the clean run's "
                                  "(a message was lost or stored twice)")
        if str(state.status) != str(clean.status):
            out.violations.append(f"final status {state.status}, clean run {clean.status}")
        short = {k: (v, usage_of(clean)[k]) for k, v in usage_of(state).items()
                 if v < usage_of(clean)[k]}
        if short:
            out.violations.append(f"usage below the clean run's (final, clean): {short}")
        id_file = project / ".nonoka" / "provider-session.id"
        if not id_file.exists() or id_file.read_text().strip() != sid:
            out.violations.append("the id file does not hold the conversation's session id")
        others = [s for s, row in after.index.items()
                  if s != sid and row["metadata"].get("purpose", "chat") == "chat"]
        if others:
            out.notes.append("abandoned session (indexed, from a killed new-conversation "
                             "request the host retried)")


def restarted_host(pair: Pair) -> bool:
    """Half the bridge crashes also lose the host's memory (a new ``NonokaProvider``)."""
    return (pair.step + pair.occurrence) % 2 == 1


def _reached(trace: Path, pair: Pair) -> bool:
    return trace_counts(trace).count(pair.point) >= pair.occurrence


# -- the local-tools conversation ------------------------------------------------------------

WORKER_STEPS: tuple[dict[str, Any], ...] = (
    {"mode": "react", "session_id": "react-1", "prompt": "start"},
    {"mode": "react", "session_id": "react-1", "prompt": "more"},
    {"mode": "plan", "session_id": "plan-1"},
)
UNKNOWN = "outcome unknown"


class WorkerScenario:
    """Runner-driven processes: nonoka-run tools (idempotent or not) and a parallel plan."""

    name = "worker"
    steps = len(WORKER_STEPS)

    async def run(self, project: Path, step: int, *, retry: bool = False,
                  env: dict[str, str] | None = None) -> tuple[int, dict[str, Any] | None, str]:
        job = {**WORKER_STEPS[step], "project": str(project),
               "markers": str(project / "markers.log"), "retry": retry}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.faults.worker", json.dumps(job), cwd=ROOT,
            env={**os.environ, FAULT_ENV: "", TRACE_ENV: "", "NONOKA_DATABASE_URL": "",
                 **(env or {})},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), PROCESS_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return -1, None, "timed out"
        code = proc.returncode if proc.returncode is not None else -1
        report = json.loads(stdout) if code == 0 else None
        return code, report, stderr.decode(errors="replace")

    async def clean(self, work: Path) -> list[list[str]]:
        project = work / "clean"
        project.mkdir()
        traces = []
        self.reports: list[dict[str, Any]] = []
        for step in range(self.steps):
            shutil.copytree(project, work / f"before-{step}")
            trace = work / f"trace-{step}"
            code, report, stderr = await self.run(project, step, env={TRACE_ENV: str(trace)})
            assert code == 0 and report is not None, stderr
            assert not report["warnings"], report
            self.reports.append(report)
            traces.append(trace_counts(trace))
        self.final = await snapshot(project)
        self.markers = Counter(_markers(project))
        return traces

    async def crash(self, work: Path, pair: Pair, out: Outcome) -> None:
        project = work / "project"
        copy_project(work.parent / f"before-{pair.step}", project)
        trace = work / "trace"
        code, _, stderr = await self.run(project, pair.step, env={
            FAULT_ENV: f"{pair.point}:{pair.occurrence}", TRACE_ENV: str(trace)})
        out.killed = _reached(trace, pair)
        if code != -signal.SIGKILL:
            out.violations.append(f"the armed process was not killed (exit {code}): "
                                  f"{stderr[-500:]}")
            return
        before = await snapshot(project)
        warnings: list[str] = []
        for step in range(pair.step, self.steps):
            code, report, stderr = await self.run(project, step, retry=step == pair.step)
            if code != 0 or report is None:
                out.violations.append(f"step {step} after the kill failed (exit {code}): "
                                      f"{stderr[-800:]}")
                return
            warnings += report["warnings"]
        after = await snapshot(project)
        common_checks(before, after, out)
        self.check(project, warnings, after, out)

    def check(self, project: Path, warnings: list[str], after: Snapshot, out: Outcome) -> None:
        started = Counter(_markers(project))
        if "tool_outcome_unknown" in warnings:
            out.notes.append("non-idempotent call recorded as outcome unknown")
        self._check_react(after.sessions.get("react-1"), started, warnings, out)
        self._check_plan(after.sessions.get("plan-1"), started, warnings, out)

    def _check_react(self, state: SessionState | None, started: Counter[str],
                     warnings: list[str], out: Outcome) -> None:
        if state is None:
            out.violations.append("session react-1 is not stored")
            return
        clean = self.final.sessions["react-1"]
        unknown = False
        got, want = conversation(state), conversation(clean)
        if len(got) == len(want):
            for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
                if mine != theirs and mine[0] == "tool" and mine[2] == "m1" \
                        and mine[1].startswith(UNKNOWN):
                    unknown = True
                    got[i] = theirs
        if got != want:
            out.violations.append("react-1: the conversation differs from the clean run's "
                                  "(a message was lost or stored twice)")
        mails = started["send_email ana"]
        if mails > 1:
            out.violations.append(f"react-1: the non-idempotent call ran {mails} times")
        if unknown and "tool_outcome_unknown" not in warnings:
            out.violations.append("react-1: an unknown outcome was recorded without a "
                                  "tool_outcome_unknown warning")
        if not unknown and mails != 1:
            out.violations.append(f"react-1: the e-mail ran {mails} times yet its result "
                                  "says it was sent")
        if str(state.status) != "completed":
            out.violations.append(f"react-1 ended {state.status}")
        self._lookups_ran(("k1", "k2", "k3"), started, out)
        self._usage_at_least_clean("react-1", state, out)

    def _check_plan(self, state: SessionState | None, started: Counter[str],
                    warnings: list[str], out: Outcome) -> None:
        if state is None:
            out.violations.append("session plan-1 is not stored")
            return
        mails = started["send_email team"]
        if mails > 1:
            out.violations.append(f"plan-1: the non-idempotent step ran {mails} times")
        failure = state.failed_steps.get("m")
        if failure is not None and failure.error_type == "OutcomeUnknown":
            if "tool_outcome_unknown" not in warnings:
                out.violations.append("plan-1: outcome unknown without a warning")
            if str(state.status) != "failed":
                out.violations.append(f"plan-1 ended {state.status} after an unknown outcome")
            counted = sum(1 for s in state.completed_steps if s in "abc")
            if state.runtime_state.usage.tool_calls < counted:
                out.violations.append("plan-1: fewer tool calls counted than tool steps "
                                      "completed")
            self._lookups_ran(("a", "b"), started, out)
            return
        clean = self.final.sessions["plan-1"]
        outputs = {k: v.output for k, v in state.completed_steps.items()}
        if outputs != {k: v.output for k, v in clean.completed_steps.items()}:
            out.violations.append(f"plan-1: step outputs differ from the clean run's: {outputs}")
        if str(state.status) != "completed":
            out.violations.append(f"plan-1 ended {state.status}: {failure}")
        if mails != 1:
            out.violations.append(f"plan-1: the e-mail step ran {mails} times yet completed")
        self._lookups_ran(("a", "b", "c"), started, out)
        self._usage_at_least_clean("plan-1", state, out)

    @staticmethod
    def _lookups_ran(keys: Iterable[str], started: Counter[str], out: Outcome) -> None:
        """Idempotent tools may run again, but every one that had to run did."""
        missing = [k for k in keys if not started[f"lookup {k}"]]
        if missing:
            out.violations.append(f"lookups {missing} never ran")

    def _usage_at_least_clean(self, sid: str, state: SessionState, out: Outcome) -> None:
        clean = usage_of(self.final.sessions[sid])
        short = {k: (v, clean[k]) for k, v in usage_of(state).items() if v < clean[k]}
        if short:
            out.violations.append(f"{sid}: usage below the clean run's (final, clean): {short}")


def _markers(project: Path) -> list[str]:
    log = project / "markers.log"
    return log.read_text().splitlines() if log.exists() else []


# -- running the campaign ------------------------------------------------------------------------

Scenario = BridgeScenario | WorkerScenario


@dataclass
class Campaign:
    """The clean traces, the pairs, and every crash run's outcome."""

    traces: dict[str, list[list[str]]] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def pairs(self) -> list[Pair]:
        return [p for name, steps in self.traces.items()
                for i, points in enumerate(steps) for p in pairs_of(name, i, points)]

    @property
    def violations(self) -> int:
        return sum(len(o.violations) for o in self.outcomes)

    def table(self) -> str:
        """The summary printed at the end and kept in ``docs/reliability.md``."""
        lines = ["| scenario | steps | fault points reached | crash runs | killed | "
                 "runs with violations | violations |",
                 "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, steps in self.traces.items():
            mine = [o for o in self.outcomes if o.pair.scenario == name]
            lines.append(
                f"| {name} | {len(steps)} | {len({p for s in steps for p in s})} | {len(mine)} "
                f"| {sum(o.killed for o in mine)} | {sum(bool(o.violations) for o in mine)} "
                f"| {sum(len(o.violations) for o in mine)} |")
        lines += ["", "| fault point | crash runs | violations |", "| --- | --- | --- |"]
        by_point = Counter(o.pair.point for o in self.outcomes)
        bad = Counter(o.pair.point for o in self.outcomes for _ in o.violations)
        for point in POINTS:
            if by_point[point]:
                lines.append(f"| `{point}` | {by_point[point]} | {bad[point]} |")
        notes = Counter(n for o in self.outcomes for n in set(o.notes))
        if notes:
            lines += ["", "| note (not a violation) | crash runs |", "| --- | --- |"]
            lines += [f"| {note} | {count} |" for note, count in sorted(notes.items())]
        return "\n".join(lines)


def sample(pairs: Sequence[Pair], per_scenario: int) -> list[Pair]:
    """Evenly spaced pairs of each scenario: a spread of points and steps, always the same."""
    chosen = []
    for name in dict.fromkeys(p.scenario for p in pairs):
        mine = [p for p in pairs if p.scenario == name]
        stride = max(1, len(mine) // max(per_scenario, 1))
        chosen += mine[stride // 2::stride][:per_scenario]
    return chosen


async def run_campaign(work: Path, *, scenarios: Iterable[str] = ("bridge", "worker"),
                       per_scenario: int | None = None, jobs: int = 4,
                       on_outcome: Any = None) -> Campaign:
    """Trace clean runs, then crash at every pair (or a sample) ``jobs`` at a time."""
    started = time.monotonic()
    campaign = Campaign()
    with ScriptedOpenAIServer(model_answer) as server:
        built: dict[str, Scenario] = {}
        for name in scenarios:
            scenario: Scenario = (BridgeScenario(server.base_url) if name == "bridge"
                                  else WorkerScenario())
            (work / name).mkdir(parents=True)
            campaign.traces[name] = await scenario.clean(work / name)
            built[name] = scenario
        pairs = campaign.pairs
        if per_scenario is not None:
            pairs = sample(pairs, per_scenario)
        gate = asyncio.Semaphore(jobs)

        async def crash(index: int, pair: Pair) -> Outcome:
            async with gate:
                out = Outcome(pair)
                begun = time.monotonic()
                folder = work / pair.scenario / f"crash-{index}"
                folder.mkdir()
                try:
                    await built[pair.scenario].crash(folder, pair, out)
                except Exception as exc:  # a harness failure counts against the run
                    out.violations.append(f"harness error: {type(exc).__name__}: {exc}")
                out.seconds = time.monotonic() - begun
                if not out.violations:
                    shutil.rmtree(folder, ignore_errors=True)
                if on_outcome is not None:
                    on_outcome(out)
                return out

        campaign.outcomes = list(await asyncio.gather(
            *(crash(i, p) for i, p in enumerate(pairs))))
    campaign.seconds = time.monotonic() - started
    return campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.campaign",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--scenario", action="append", choices=["bridge", "worker"],
                        help="run only this scenario (repeatable)")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="crash at N evenly spaced pairs per scenario instead of all")
    parser.add_argument("--jobs", type=int, default=max(2, (os.cpu_count() or 2)),
                        help="crash runs at a time")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (runs with violations are kept anyway)")
    parser.add_argument("--verbose", action="store_true", help="print every crash run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="nonoka-campaign-"))

    def report(out: Outcome) -> None:
        if args.verbose or out.violations:
            mark = "FAIL" if out.violations else "ok"
            print(f"{mark:4} {out.pair} ({out.seconds:.1f}s) {'; '.join(out.violations)}",
                  flush=True)

    campaign = asyncio.run(run_campaign(
        work, scenarios=args.scenario or ("bridge", "worker"), per_scenario=args.sample,
        jobs=args.jobs, on_outcome=report))
    if not args.keep and not campaign.violations:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(campaign.table())
    print(f"\n{len(campaign.outcomes)} crash runs in {campaign.seconds:.0f} s; "
          f"{campaign.violations} invariant violations; work directory {work}")
    return 1 if campaign.violations else 0


if __name__ == "__main__":
    sys.exit(main())
