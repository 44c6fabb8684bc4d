"""What every ``SessionLeases`` must do: one live owner per session, expiring when the
owner stops renewing; and ``hold_lease`` working over it.

``SessionLeasesSuite`` needs an ``engine`` fixture: a ``StoreHarness`` whose store also
implements ``SessionLeases``, and whose ``reopen()`` stands in for a second process.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import sys
import time

import pytest

from nonoka.errors import SessionBusyError, StoreError
from nonoka.store.base import CheckpointStore, SessionLeases
from nonoka.store.leases import hold_lease, lease_host, new_lease_owner
from nonoka.testing.conformance.harness import StoreHarness


def _leases(store: CheckpointStore) -> SessionLeases:
    assert isinstance(store, SessionLeases), f"{type(store).__name__} has no leases"
    return store


async def _two(engine: StoreHarness) -> tuple[SessionLeases, SessionLeases]:
    """Two store instances over the same data, standing in for two processes."""
    return _leases(engine.store), _leases(await engine.reopen())


class SessionLeasesSuite:
    """Behaviour every store that keeps session leases shows.

    Subclass it as ``Test...`` where an ``engine`` fixture (a ``StoreHarness``) is
    visible; each test then runs once per value of that fixture.
    """

    pytestmark = pytest.mark.asyncio  # every test is async; any asyncio_mode runs them

    async def test_one_owner_at_a_time(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        assert await a.acquire_lease("s1", "A", 10) is True
        assert await b.acquire_lease("s1", "B", 10) is False
        assert await a.acquire_lease("s1", "A", 10) is True  # the owner may take it again
        lease = await b.get_lease("s1")
        assert lease is not None and lease.owner == "A" and lease.session_id == "s1"
        assert 9 < lease.expires_in <= 10
        assert await b.release_lease("s1", "B") is False  # not B's to give up
        assert await b.renew_lease("s1", "B", 10) is False
        assert (await a.get_lease("s1")) is not None
        assert await a.release_lease("s1", "A") is True
        assert await a.get_lease("s1") is None
        assert await a.release_lease("s1", "A") is False
        assert await b.acquire_lease("s1", "B", 10) is True

    async def test_sessions_are_leased_independently(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        assert await a.acquire_lease("s1", "A", 10)
        assert await b.acquire_lease("s2", "B", 10)
        assert await a.acquire_lease("s3", "A", 10)
        assert {(await a.get_lease(s)).owner for s in ("s1", "s3")} == {"A"}  # type: ignore[union-attr]
        assert await b.get_lease("s4") is None

    async def test_an_expired_lease_can_be_taken_over(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        assert await a.acquire_lease("s1", "A", 0.3)
        assert await b.acquire_lease("s1", "B", 5) is False
        await asyncio.sleep(0.45)
        assert await b.get_lease("s1") is None  # expired counts as free
        assert await b.acquire_lease("s1", "B", 5) is True
        # The old owner finds out it lost the lease, and cannot hurt the new one.
        assert await a.renew_lease("s1", "A", 5) is False
        assert await a.release_lease("s1", "A") is False
        assert await a.acquire_lease("s1", "A", 5) is False
        lease = await a.get_lease("s1")
        assert lease is not None and lease.owner == "B"

    async def test_renewing_keeps_the_lease_past_its_first_ttl(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        assert await a.acquire_lease("s1", "A", 0.5)
        for _ in range(3):
            await asyncio.sleep(0.25)
            assert await a.renew_lease("s1", "A", 0.5) is True
            assert await b.acquire_lease("s1", "B", 5) is False
        lease = await b.get_lease("s1")
        assert lease is not None and 0.3 < lease.expires_in <= 0.5

    async def test_an_expired_lease_may_still_be_renewed_by_its_owner(
            self, engine: StoreHarness) -> None:
        """Nobody took it over, so the owner never lost it (e.g. after a slow renewal)."""
        a = _leases(engine.store)
        assert await a.acquire_lease("s1", "A", 0.2)
        await asyncio.sleep(0.3)
        assert await a.renew_lease("s1", "A", 5) is True
        assert (await a.get_lease("s1")) is not None

    @pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf])
    async def test_bad_arguments_are_refused(self, engine: StoreHarness, ttl: float) -> None:
        a = _leases(engine.store)
        with pytest.raises(ValueError, match="ttl"):
            await a.acquire_lease("s1", "A", ttl)
        with pytest.raises(ValueError, match="ttl"):
            await a.renew_lease("s1", "A", ttl)
        with pytest.raises(ValueError, match="owner"):
            await a.acquire_lease("s1", "", 5)
        assert await a.get_lease("s1") is None

    # -- hold_lease -------------------------------------------------------------------

    async def test_hold_lease_holds_renews_and_releases(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        async with hold_lease(a, "s1", "A", ttl=0.3) as held:
            assert held.owner == "A" and held.session_id == "s1"
            await asyncio.sleep(0.8)  # well past the ttl: renewals keep it
            assert held.renewals >= 2 and not held.lost
            assert await b.acquire_lease("s1", "B", 5) is False
        assert await b.get_lease("s1") is None
        assert await b.acquire_lease("s1", "B", 5) is True

    async def test_hold_lease_releases_when_the_block_fails(self, engine: StoreHarness) -> None:
        a = _leases(engine.store)
        with pytest.raises(RuntimeError, match="boom"):
            async with hold_lease(a, "s1", "A", ttl=5):
                raise RuntimeError("boom")
        assert await a.get_lease("s1") is None

    async def test_hold_lease_releases_when_the_run_is_cancelled(
            self, engine: StoreHarness) -> None:
        a = _leases(engine.store)
        holding = asyncio.Event()

        async def run() -> None:
            async with hold_lease(a, "s1", "A", ttl=5):
                holding.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(run())
        await holding.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await a.get_lease("s1") is None

    async def test_hold_lease_on_a_busy_session_raises(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        owner = new_lease_owner()
        assert await a.acquire_lease("s1", owner, 30)
        started = time.monotonic()
        with pytest.raises(SessionBusyError, match="s1 is busy") as info:
            async with hold_lease(b, "s1", "B", ttl=5):
                pytest.fail("entered a busy session")
        assert time.monotonic() - started < 0.5, "wait=0 should not wait"
        assert isinstance(info.value, StoreError)
        assert owner in str(info.value) and "expires in" in str(info.value)
        with pytest.raises(SessionBusyError, match=r"after waiting 0.3 s"):
            async with hold_lease(b, "s1", "B", ttl=5, wait=0.3):
                pass
        assert time.monotonic() - started >= 0.3
        lease = await a.get_lease("s1")
        assert lease is not None and lease.owner == owner  # the holder was not disturbed

    async def test_hold_lease_waits_for_the_holder_to_finish(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        order: list[str] = []
        holding = asyncio.Event()

        async def first() -> None:
            async with hold_lease(a, "s1", "A", ttl=5):
                order.append("A in")
                holding.set()
                await asyncio.sleep(0.3)
                order.append("A out")

        task = asyncio.create_task(first())
        await holding.wait()
        async with hold_lease(b, "s1", "B", ttl=5, wait=5):
            order.append("B in")
        await task
        assert order == ["A in", "A out", "B in"]

    async def test_hold_lease_reports_a_lost_lease(self, engine: StoreHarness) -> None:
        a, b = await _two(engine)
        async with hold_lease(a, "s1", "A", ttl=0.3) as held:
            # Someone frees it behind our back and takes it (as after a long stall).
            assert await a.release_lease("s1", "A")
            assert await b.acquire_lease("s1", "B", 5)
            await asyncio.wait_for(held.wait_lost(), 2)
            assert held.lost
        lease = await b.get_lease("s1")
        assert lease is not None and lease.owner == "B", "releasing must not free B's lease"

    # -- a dead holder ----------------------------------------------------------------

    async def test_a_dead_local_holder_is_taken_over_at_once(self, engine: StoreHarness) -> None:
        """A per-turn process killed mid-turn must not make the next turn wait out the ttl."""
        ours = _leases(engine.store)
        gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await gone.wait()
        host = lease_host()
        # A lease naming a live local process (this one) is respected...
        assert await ours.acquire_lease("s2", f"{host}:{os.getpid()}:cafe", 60)
        with pytest.raises(SessionBusyError):
            async with hold_lease(ours, "s2", new_lease_owner(), ttl=5, wait=0):
                pass
        # ...and so is one from another host, whatever its pid...
        assert await ours.acquire_lease("s3", f"elsewhere.example:{gone.pid}:beef", 60)
        with pytest.raises(SessionBusyError):
            async with hold_lease(ours, "s3", new_lease_owner(), ttl=5, wait=0):
                pass
        # ...and one from a host of the same name in another boot or pid namespace (a
        # container sharing the file): its pid means nothing here...
        assert await ours.acquire_lease("s5", f"{socket.gethostname()}:{gone.pid}:f00d", 60)
        with pytest.raises(SessionBusyError):
            async with hold_lease(ours, "s5", new_lease_owner(), ttl=5, wait=0):
                pass
        # ...but one naming a local process that is gone is released and taken at once.
        dead = f"{host}:{gone.pid}:dead"
        assert await ours.acquire_lease("s4", dead, 60)
        async with hold_lease(ours, "s4", new_lease_owner(), ttl=5, wait=0) as held:
            assert held.owner != dead
            lease = await ours.get_lease("s4")
            assert lease is not None and lease.owner == held.owner
