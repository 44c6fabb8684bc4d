"""Kill campaign at random moments of a streamed turn: start-up, mid-answer, the save.

Each run SIGKILLs a real ``nonoka bridge`` at a random time after its request was sent
(a seeded draw over the whole turn: before the model answers, while the answer streams,
while the turn is saved) to a model of each adapter (Chat Completions, Anthropic's
Messages API, the Responses API: a scripted endpoint of its API that streams the answer
a piece at a time), then a fresh bridge gets the same request, as a host retries
after a crash. After every kill:

- what the killed turn journaled of its answer (``partial_answer``) is a prefix of what
  the host received, short of it by at most one journaling window (2 KB, plus the piece
  that crossed it);
- the retried turn (a host retries a turn whose ``finish`` it did not see) completes,
  and the database holds the prompt once and the whole answer once: nothing lost,
  nothing doubled;
- the database passes ``PRAGMA integrity_check``.

A sample runs with the suite; ``-m slow`` runs the long campaign.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nonoka.store.sqlite.packing import unpack
from nonoka.testing.server import (
    Paced,
    ScriptedAnthropicServer,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from nonoka.turn.journal import PARTIAL_BYTES
from tests.support.bridge import Bridge, chat, user
from tests.support.processes import model_env

PIECES = [f"w{i:03d}x " * 8 for i in range(160)]
ANSWER = "".join(PIECES)
PIECE_SECONDS = 0.005
SAMPLES = {"openai": 8, "anthropic": 4, "openai-responses": 4}
"""Kills per adapter in the suite's sample (the Chat Completions adapter's the most: it
is every OpenAI-compatible provider's)."""
CAMPAIGN = 40


@dataclass(frozen=True)
class Endpoint:
    """One adapter's scripted endpoint: the adapter's name and the environment that
    points a bridge at it."""

    adapter: str
    env: dict[str, str]

    def bridge(self, project: Path) -> Bridge:
        """A bridge in ``project`` (made here) on this endpoint's model."""
        project.mkdir()
        bridge = Bridge(project, None)
        bridge.env.update(self.env)
        return bridge


@pytest.fixture(scope="module", params=sorted(SAMPLES))
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    """A scripted endpoint of one adapter's API streaming ``ANSWER`` a piece every 5 ms,
    every time it is asked."""
    adapter: str = request.param

    def script(body: dict[str, Any]) -> Paced:
        return Paced(PIECE_SECONDS, ANSWER)

    size = len(PIECES[0])
    if adapter == "anthropic":
        with ScriptedAnthropicServer(script, chunk_size=size) as anthropic:
            yield Endpoint(adapter, {"NONOKA_MODEL": "anthropic:claude-haiku-4-5",
                                     "ANTHROPIC_BASE_URL": anthropic.base_url,
                                     "ANTHROPIC_API_KEY": "sk-ant-test"})
        assert not anthropic.failures, anthropic.failures
        return
    served = (ScriptedResponsesServer(script, chunk_size=size) if adapter == "openai-responses"
              else ScriptedOpenAIServer(script, chunk_size=size))
    with served:
        env = model_env(served.base_url)
        if adapter == "openai-responses":
            env["NONOKA_MODEL"] = "openai-responses:gpt-5"
        yield Endpoint(adapter, env)
    assert not served.failures, served.failures


def _killed_turn(bridge: Bridge, delay: float, streamed: int = 0) -> tuple[str, bool]:
    """Send the request, SIGKILL the bridge after ``delay`` seconds (and once it has
    streamed ``streamed`` characters); what it streamed, and whether its ``finish``
    reached the host first."""
    proc = bridge.spawn()
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[str] = []
    finished: list[bool] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("type") == "text_delta":
                seen.append(event["text"])
            elif event.get("type") == "finish":
                finished.append(True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.stdin.write(json.dumps({"cwd": str(bridge.project),
                                 **chat([user("talk")])}).encode() + b"\n")
    proc.stdin.flush()
    time.sleep(delay)
    deadline = time.monotonic() + 30
    while sum(map(len, seen)) < streamed and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    reader.join(timeout=10)
    assert proc.stderr is not None
    proc.stderr.close()
    proc.stdout.close()
    proc.stdin.close()
    return "".join(seen), bool(finished)


def _stored(db: Path) -> tuple[list[tuple[str, str]], list[tuple[str, dict[str, Any]]]]:
    """The session's conversation and event log, read with plain ``sqlite3``; none when
    the kill came before the new database's tables were committed (its first open
    applies them in one transaction: the next open applies them again)."""
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'nonoka_migrations'"
                        ).fetchone() is None:
            assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
            entries, events = [], []
        else:
            rows = conn.execute("SELECT entry_json FROM session_entries "
                                "ORDER BY session_id, seq")
            entries = [(e["role"], e["content"])
                       for e in (json.loads(unpack(r[0])) for r in rows)]
            events = [(kind, json.loads(unpack(data))) for kind, data in conn.execute(
                "SELECT kind, data_json FROM events ORDER BY session_id, seq")]
    conn.close()
    return entries, events


def _campaign(tmp_path: Path, endpoint: Endpoint, runs: int, seed: int) -> dict[str, int]:
    """Kill ``runs`` turns at seeded random moments; how many kills fell before the
    answer streamed, while it streamed, and after the host had all of it."""
    draw = random.Random(seed)
    landed = {"before": 0, "mid-stream": 0, "after": 0}
    turn = len(PIECES) * PIECE_SECONDS
    for run in range(runs):
        delay = draw.uniform(0.0, turn + 0.6)  # start-up, the stream, the save after it
        bridge = endpoint.bridge(tmp_path / f"run{run}")
        seen, finished = _killed_turn(bridge, delay)
        landed["before" if not seen else "after" if seen == ANSWER else "mid-stream"] += 1
        where = (f"{endpoint.adapter}: run {run} (seed {seed}, killed after "
                 f"{delay * 1000:.0f} ms)")
        if bridge.db.exists():
            entries, events = _stored(bridge.db)
            logged = "".join(d["text"] for kind, d in events if kind == "partial_answer")
            assert seen.startswith(logged), where
            if ("assistant", ANSWER) not in entries:  # the answer was not stored yet
                assert len(seen) - len(logged) <= PARTIAL_BYTES + len(PIECES[0]), (
                    where, len(seen), len(logged))
        if not finished:  # the host retries a turn it did not see end; one it saw, not
            done = bridge.run(chat([user("talk")]))
            assert done[-1]["type"] == "finish" and done[-1]["finish_reason"] == "stop", (
                where, done)
        entries, _ = _stored(bridge.db)
        assert entries == [("user", "talk"), ("assistant", ANSWER)], (where, entries[:4])
    print(f"{endpoint.adapter} kills (seed {seed}): {landed}")
    return landed


def test_kills_at_random_moments_of_a_streamed_turn_lose_and_double_nothing(
        tmp_path: Path, endpoint: Endpoint) -> None:
    _campaign(tmp_path, endpoint, SAMPLES[endpoint.adapter],
              seed=int(os.environ.get("NONOKA_KILL_SEED", "7")))


@pytest.mark.slow
def test_a_long_kill_campaign_over_a_streamed_turn(tmp_path: Path, endpoint: Endpoint
                                                    ) -> None:
    _campaign(tmp_path, endpoint, CAMPAIGN, seed=int(time.time()))


def test_a_kill_mid_answer_leaves_its_text_journaled(tmp_path: Path, endpoint: Endpoint
                                                       ) -> None:
    """The campaign's prefix check has something to check: a kill in the middle of the
    answer leaves journaled text, which the retried turn does not store as an answer."""
    bridge = endpoint.bridge(tmp_path / "probe")
    seen, _ = _killed_turn(bridge, 0.0, streamed=len(ANSWER) // 2)
    _, events = _stored(bridge.db)
    logged = "".join(d["text"] for kind, d in events if kind == "partial_answer")
    assert 0 < len(logged) <= len(seen) < len(ANSWER)
    bridge.run(chat([user("talk")]))
    entries, _ = _stored(bridge.db)
    assert entries == [("user", "talk"), ("assistant", ANSWER)]
