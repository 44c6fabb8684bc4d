"""Real OS processes writing one session: every save lands or raises, none is lost."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from nonoka.testing.conformance import states
from tests.conformance.engines import EngineHarness

WORKER = Path(__file__).with_name("race_worker.py")


async def test_racing_processes_never_lose_a_write(shared_engine: EngineHarness) -> None:
    engine = shared_engine
    assert engine.process_url is not None
    state = states.minimal()
    await engine.store.save_session(state)
    workers, saves = 3, 15
    start_at = time.time() + 1.5  # after every interpreter has started
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), engine.process_url, state.session_id, f"w{n}",
            str(saves), str(start_at),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for n in range(workers)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
    reports = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        reports.append(json.loads(out))

    landed = sorted((rev, label) for r in reports for label, rev in r["landed"])
    assert len(landed) == workers * saves
    # Each save got its own revision, in one unbroken sequence after the first save...
    assert [rev for rev, _ in landed] == list(range(2, 2 + workers * saves))
    # ...and the stored conversation holds every landed write, in revision order.
    final = await engine.store.load_session(state.session_id)
    assert final is not None
    assert final.revision == 1 + workers * saves
    assert final.turn_count == workers * saves
    assert [e.content for e in final.memory_entries] == [label for _, label in landed]
