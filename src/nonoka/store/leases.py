"""Holding a session's lease for the length of a run.

``hold_lease`` is what a worker wraps around one turn: it takes the lease (waiting up to
``wait`` seconds for another owner to finish) or raises ``SessionBusyError``, renews it
in the background every ``ttl / 3`` so a long turn keeps it, and releases it on the way
out. A process killed while holding it stops renewing, so the lease expires ``ttl``
seconds later and the session is usable again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nonoka.errors import ConfigurationError, SessionBusyError, StoreError
from nonoka.store.base import SessionLeases, check_lease_args
from nonoka.store.lease_terms import DEFAULT_TTL, lease_host, new_lease_owner

__all__ = ("DEFAULT_TTL", "HeldLease", "hold_lease", "holder_is_dead", "lease_host",
           "lease_wait_from_env", "new_lease_owner", "owner_process", "process_gone")

_FIRST_POLL = 0.05
_MAX_POLL = 0.5


def lease_wait_from_env() -> float:
    """Seconds to wait for a busy session, from ``NONOKA_LEASE_WAIT`` (default 0)."""
    raw = os.environ.get("NONOKA_LEASE_WAIT", "").strip()
    try:
        return max(float(raw), 0.0) if raw else 0.0
    except ValueError:
        raise ConfigurationError(
            f"NONOKA_LEASE_WAIT={raw!r} is not a number of seconds") from None


class HeldLease:
    """The lease while ``hold_lease`` holds it.

    ``lost`` turns true when a renewal finds another owner took the lease over (this
    process stalled for longer than the ttl); a save after that may still succeed if the
    new owner has not written yet, so a caller that sees it should stop early. Stored
    revisions still turn any actually conflicting write into ``SessionConflictError``.
    """

    def __init__(self, session_id: str, owner: str, ttl: float) -> None:
        self.session_id = session_id
        self.owner = owner
        self.ttl = ttl
        self.renewals = 0
        self._lost = asyncio.Event()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    async def wait_lost(self) -> None:
        """Return when the lease is lost (for a watcher that cancels the run)."""
        await self._lost.wait()


@asynccontextmanager
async def hold_lease(
    store: SessionLeases,
    session_id: str,
    owner: str,
    ttl: float = DEFAULT_TTL,
    wait: float = 0.0,
) -> AsyncIterator[HeldLease]:
    """Hold the session's lease for the block; ``SessionBusyError`` if it stays taken.

    ``wait`` is how long to keep trying (polling from 50 ms up to 0.5 s apart) while
    another owner holds it; ``0`` tries once. Store errors while acquiring propagate;
    while renewing they are retried at the next tick; while releasing they are ignored
    (the lease then expires by itself).
    """
    check_lease_args(owner, ttl)
    await _acquire(store, session_id, owner, ttl, max(wait, 0.0))
    held = HeldLease(session_id, owner, ttl)
    renewer = asyncio.create_task(_renew(store, held), name=f"nonoka-lease-{session_id}")
    try:
        yield held
    finally:
        renewer.cancel()
        await asyncio.wait([renewer])  # unlike awaiting it, never swallows our own cancel
        with contextlib.suppress(StoreError):
            await store.release_lease(session_id, owner)
        failure = None if renewer.cancelled() else renewer.exception()
        if failure is not None:  # a bug, not a store error: do not hide it
            raise failure


def holder_is_dead(owner: str) -> bool:
    """Whether ``owner`` names a process on this host that no longer exists.

    A per-turn process killed with SIGKILL leaves its lease behind; waiting out the ttl
    would make the very next turn fail as busy. A lease whose holder is provably gone
    (same host, no such pid) is released at once instead. A reused pid only makes us
    wait for the expiry, which is the safe side.
    """
    found = owner_process(owner)
    return found is not None and process_gone(*found)


def owner_process(owner: str) -> tuple[str, int] | None:
    """``(host, pid)`` of the process an owner token (``host:pid:anything``: a lease's,
    or the one a turn's opening entry names) stands for; ``None`` for another form."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def process_gone(host: str, pid: int) -> bool:
    """Whether ``pid`` on ``host`` provably no longer runs: the same host as this one
    (``lease_host``), and no such process, or only its zombie. Another host's process
    is never judged gone."""
    if host != lease_host():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits only to be reaped by its parent.

    A killed bridge stays a zombie until the host that spawned it reaps it, and a
    zombie still answers ``kill(pid, 0)``; it runs nothing and holds nothing.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)
    except OSError:
        return False
    return len(fields) == 2 and fields[1].split()[:1] == [b"Z"]


async def _acquire(
    store: SessionLeases, session_id: str, owner: str, ttl: float, wait: float
) -> None:
    start = time.monotonic()
    delay = _FIRST_POLL
    while not await store.acquire_lease(session_id, owner, ttl):
        lease = await store.get_lease(session_id)
        if lease is not None and holder_is_dead(lease.owner):
            await store.release_lease(session_id, lease.owner)
            continue
        left = wait - (time.monotonic() - start)
        if left <= 0:
            raise await _busy(store, session_id, wait)
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, _MAX_POLL)


async def _busy(store: SessionLeases, session_id: str, wait: float) -> SessionBusyError:
    lease = await store.get_lease(session_id)
    holder = (
        f"{lease.owner!r} holds its lease (expires in {lease.expires_in:.1f} s unless renewed)"
        if lease is not None else "another owner held its lease a moment ago"
    )
    waited = f" after waiting {wait:g} s" if wait > 0 else ""
    return SessionBusyError(
        f"session {session_id} is busy{waited}: {holder}. Another process is running it; "
        "try again when it has finished, or wait longer for it."
    )


async def _renew(store: SessionLeases, held: HeldLease) -> None:
    """Renew every ttl/3 until cancelled or the lease is lost."""
    while True:
        await asyncio.sleep(held.ttl / 3)
        try:
            kept = await store.renew_lease(held.session_id, held.owner, held.ttl)
        except StoreError:
            continue  # the database may be back before the lease expires
        if not kept:
            held._lost.set()
            return
        held.renewals += 1
