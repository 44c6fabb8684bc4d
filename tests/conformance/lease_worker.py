"""A process that holds a session's lease until it is killed.

Run as ``python lease_worker.py URL SESSION_ID OWNER TTL``; prints ``held`` once it holds
the lease, then sleeps (renewing in the background) until killed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nonoka.store.base import SessionLeases
from nonoka.store.leases import hold_lease
from tests.conformance.engines import open_store


async def main(url: str, session_id: str, owner: str, ttl: float) -> None:
    store = open_store(url)
    assert isinstance(store, SessionLeases)
    try:
        async with hold_lease(store, session_id, owner, ttl):
            print("held", flush=True)
            await asyncio.sleep(3600)
    finally:
        await store.close()


if __name__ == "__main__":
    url, sid, owner, ttl = sys.argv[1:5]
    asyncio.run(main(url, sid, owner, float(ttl)))
