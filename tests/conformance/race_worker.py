"""A worker process for the race tests: load, append a turn, save, retry on conflict.

Run as ``python race_worker.py URL SESSION_ID NAME SAVES START_AT``; prints a JSON line
``{"landed": [[label, revision], ...], "conflicts": n}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nonoka.errors import SessionConflictError
from nonoka.state.entries import MemoryEntry
from tests.conformance.engines import open_store


async def main(url: str, session_id: str, name: str, saves: int, start_at: float) -> None:
    store = open_store(url)
    landed: list[tuple[str, int]] = []
    conflicts = 0
    await asyncio.sleep(max(0.0, start_at - time.time()))  # start with the others
    try:
        for i in range(saves):
            label = f"{name}-{i}"
            while True:
                state = await store.load_session(session_id)
                assert state is not None
                new = state.model_copy(update={
                    "memory_entries": [*state.memory_entries, MemoryEntry.make("user", label)],
                    "turn_count": state.turn_count + 1,
                })
                try:
                    revision = await store.save_session(new)
                except SessionConflictError:
                    conflicts += 1
                    continue
                landed.append((label, revision))
                break
    finally:
        await store.close()
    print(json.dumps({"landed": landed, "conflicts": conflicts}))


if __name__ == "__main__":
    url, sid, name, saves, start_at = sys.argv[1:6]
    asyncio.run(main(url, sid, name, int(saves), float(start_at)))
