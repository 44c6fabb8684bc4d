"""Leases beyond the store protocol: owner tokens, and a real process killed while it
holds a lease (``nonoka.testing.conformance.leases`` has the protocol's behaviour)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nonoka.store.base import CheckpointStore, SessionLeases
from nonoka.store.leases import new_lease_owner
from tests.conformance.engines import EngineHarness

WORKER = Path(__file__).with_name("lease_worker.py")


def _leases(store: CheckpointStore) -> SessionLeases:
    assert isinstance(store, SessionLeases), f"{type(store).__name__} has no leases"
    return store


def test_new_lease_owner_is_unique_and_names_the_process() -> None:
    owners = {new_lease_owner() for _ in range(100)}
    assert len(owners) == 100
    assert all(f":{os.getpid()}:" in o for o in owners)


# -- a killed owner ------------------------------------------------------------------------


async def test_a_killed_processs_lease_expires(shared_engine: EngineHarness) -> None:
    engine = shared_engine
    assert engine.process_url is not None
    ours = _leases(engine.store)
    ttl = 1.0
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), engine.process_url, "s1", "worker", str(ttl),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line == b"held\n", (await proc.communicate())[1].decode()
        await asyncio.sleep(ttl * 1.5)  # alive and renewing: still its lease
        assert await ours.acquire_lease("s1", "us", ttl) is False
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.communicate()
    killed_at = time.monotonic()
    assert proc.returncode == -signal.SIGKILL
    lease = await ours.get_lease("s1")
    assert lease is not None and lease.owner == "worker", "the lease vanished with the process"
    while not await ours.acquire_lease("s1", "us", 5):
        assert time.monotonic() - killed_at < ttl + 2, "the dead owner's lease never expired"
        await asyncio.sleep(0.05)
    # Not before the last renewal's ttl ran out (renewals come every ttl/3).
    assert time.monotonic() - killed_at >= ttl * 2 / 3 - 0.1



def _process_state(pid: int) -> bytes:
    """The state letter of ``/proc/<pid>/stat`` (``Z`` for a zombie)."""
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]


async def test_a_killed_holder_not_yet_reaped_is_dead(shared_engine: EngineHarness) -> None:
    """A SIGKILLed holder its parent has not reaped (a zombie) frees the session at once."""
    from nonoka.store.leases import hold_lease

    engine = shared_engine
    this_host = new_lease_owner().rsplit(":", 2)[0]
    proc = _unreaped_child()  # Popen: nothing reaps it until we ask
    try:
        pid = proc.pid
        owner = f"{this_host}:{pid}:feedface"
        assert await _leases(engine.store).acquire_lease("s1", owner, 60)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _process_state(pid) != b"Z":
            assert time.monotonic() < deadline, "the killed process never became a zombie"
            await asyncio.sleep(0.02)
        async with hold_lease(_leases(engine.store), "s1", "us:1:2", 30, wait=0):
            lease = await _leases(engine.store).get_lease("s1")
            assert lease is not None and lease.owner == "us:1:2"
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def _unreaped_child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
