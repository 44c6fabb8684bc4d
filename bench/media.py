"""Files in sessions on the SQLite store: stored once, and no save costs more for them.

Run: ``.venv/bin/python bench/media.py`` (``--reps`` pairs of saves timed; about 30 s).

1. **Size.** A 200-turn session (realistic turns, ``bench/save_load.py``'s) whose user
   sends one 2 MiB screenshot in its second turn, saved turn by turn as the runtime saves
   it, in a fresh database: how much the database file grows (after closing, the WAL
   folded in) against the payload, the image's bytes plus the text stored (every entry
   row as stored, the last snapshot). Then the same with the screenshot sent again in 5
   turns (it is still one file), and both again with the previous release's layout
   (every file inline in its entry row, as base64) for comparison.
2. **Saves stay flat.** The save of one more text turn in sessions that hold the image,
   at 10 turns and at 200 turns, timed in pairs (one save of each, one after the other,
   so both see the same machine), and the median of the pairs' ratios. Also the save of
   the turn that sends the image (its bytes are decoded, hashed and stored once), and a
   cold load of the 200-turn session (the image's bytes come back in one query).

It checks ``GOALS``, printing PASS/FAIL for each (exit status 1 on a FAIL).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.save_load import make_state, make_turn
from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState
from nonoka.store import base
from nonoka.store.media import Media
from nonoka.store.reuse import StoreReuse
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite import checkpoints as sqlite_checkpoints
from nonoka.store.sqlite.packing import unpack

IMAGE_BYTES = 2 * 1024 * 1024
TURNS = 200
SHORT = 10
AGAIN_AT = (20, 60, 100, 140, 180)
"""The turns that send the screenshot again (besides the second)."""


def screenshot(seed: int) -> bytes:
    """2 MiB that do not compress, as a PNG's do not."""
    return random.Random(seed).randbytes(IMAGE_BYTES)


def with_image(rng: random.Random, n: int, data: str) -> list[MemoryEntry]:
    """Turn ``n``, its user message holding the screenshot."""
    user, answer = make_turn(rng, n)
    sent = MemoryEntry.make("user", user.content, parts=[
        {"type": "text", "text": user.content},
        {"type": "file", "media_type": "image/png", "data": data, "filename": "shot.png"}])
    return [sent, answer]


@contextmanager
def inline_rows() -> Iterator[None]:
    """The previous release's layout: every entry stored as ``entry_json`` (files inline)."""
    def inline(entry: MemoryEntry) -> tuple[str, list[Media] | None]:
        return base.entry_json(entry), None

    names = vars(sqlite_checkpoints)  # the name the store's save calls
    saved = names["encode_entry"]
    names["encode_entry"] = inline
    try:
        yield
    finally:
        names["encode_entry"] = saved


@dataclass
class Growth:
    label: str
    grown: int
    """Bytes the database file grew by."""
    image: int
    text: int
    files: int
    image_save_ms: float
    """The save of the turn that sends the image."""
    load_ms: float
    """A cold load of the whole session (median)."""

    @property
    def ratio(self) -> float:
        return self.grown / (self.image + self.text)


async def grow(label: str, again: tuple[int, ...], rng: random.Random) -> Growth:
    """A 200-turn session saved turn by turn in a fresh file; how much the file grew."""
    data = base64.b64encode(screenshot(1)).decode()
    with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as tmp:
        path = Path(tmp) / "sessions.db"
        await SQLiteCheckpointStore(path).close()
        empty = path.stat().st_size
        store = SQLiteCheckpointStore(path)
        state = make_state("media-session", [])
        try:
            for n in range(TURNS):
                turn = with_image(rng, n, data) if n == 1 or n in again else make_turn(rng, n)
                state = state.model_copy(update={
                    "memory_entries": [*state.memory_entries, *turn],
                    "turn_count": state.turn_count + 1})
                start = time.perf_counter()
                state = state.model_copy(update={"revision": await store.save_session(state)})
                if n == 1:
                    image_save = time.perf_counter() - start
            with store.transaction(write=False) as db:
                rows = db.execute("SELECT entry_json FROM session_entries").fetchall()
                (files,) = db.execute("SELECT count(*) FROM media").fetchone()
            loads = []
            for _ in range(9):
                store.reuse = StoreReuse()  # a cold read, as a new process makes it
                gc.collect()
                start = time.perf_counter()
                loaded = await store.load_session(state.session_id)
                loads.append(time.perf_counter() - start)
                assert loaded is not None and loaded.memory_entries == state.memory_entries
        finally:
            await store.close()
        text = sum(len(unpack(r[0]).encode()) for r in rows) + len(
            base.snapshot_json(state).encode())
        if files == 0:  # inline rows: their base64 is the image, not text
            text -= len(data) * (1 + len(again))
        return Growth(label, path.stat().st_size - empty, IMAGE_BYTES, text, files,
                      image_save * 1e3, statistics.median(loads) * 1e3)


@dataclass
class Saves:
    short_us: float
    long_us: float
    pair_ratio: float


async def saves(reps: int, rng: random.Random) -> Saves:
    """One more text turn saved in sessions holding the image, at 10 and at 200 turns, in
    pairs; each session takes 5 saves (it stays within 5 turns of its size)."""
    data = base64.b64encode(screenshot(2)).decode()
    per_session = 5
    with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as tmp:
        store = SQLiteCheckpointStore(Path(tmp) / "sessions.db")

        async def session(sid: str, turns: int) -> SessionState:
            state = make_state(sid, [])
            for n in range(turns):
                turn = with_image(rng, n, data) if n == 1 else make_turn(rng, n)
                state = state.model_copy(update={
                    "memory_entries": [*state.memory_entries, *turn],
                    "turn_count": state.turn_count + 1})
                state = state.model_copy(update={"revision": await store.save_session(state)})
            return state

        async def one_more(state: SessionState, n: int) -> tuple[SessionState, float]:
            state = state.model_copy(update={
                "memory_entries": [*state.memory_entries, *make_turn(rng, n)],
                "turn_count": state.turn_count + 1})
            start = time.perf_counter()
            revision = await store.save_session(state)
            elapsed = time.perf_counter() - start
            return state.model_copy(update={"revision": revision}), elapsed

        short: list[float] = []
        long: list[float] = []
        ratios: list[float] = []
        try:
            for s in range(-(-reps // per_session)):
                a = await session(f"short-{s}", SHORT)
                b = await session(f"long-{s}", TURNS)
                gc.collect()
                for t in range(min(per_session, reps - s * per_session)):
                    a, at_10 = await one_more(a, SHORT + t)
                    b, at_200 = await one_more(b, TURNS + t)
                    short.append(at_10)
                    long.append(at_200)
                    ratios.append(at_200 / at_10)
        finally:
            await store.close()
    return Saves(statistics.median(short) * 1e6, statistics.median(long) * 1e6,
                 statistics.median(ratios))


GOALS: list[tuple[str, float, Callable[[list[Growth], Saves], float]]] = [
    ("a 200-turn session holding one 2 MiB image grows the database <= 1.1x "
     "(image + text)", 1.1, lambda g, _: g[0].ratio),
    ("the same image sent again in 5 turns: still <= 1.1x (stored once)", 1.1,
     lambda g, _: g[1].ratio),
    ("the image sent 6 times is one stored file", 1.0, lambda g, _: g[1].files),
    ("a save at turn 200 costs <= 1.5x one at turn 10 (median of paired ratios)", 1.5,
     lambda _, s: s.pair_ratio),
]


def report(growths: list[Growth], timed: Saves) -> bool:
    print("| session | db grew | image | text | grew / (image + text) | files | "
          "save of the image's turn | cold load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for g in growths:
        print(f"| {g.label} | {g.grown / 1024:.0f} KiB | {g.image / 1024:.0f} KiB | "
              f"{g.text / 1024:.0f} KiB | {g.ratio:.3f} | {g.files} | "
              f"{g.image_save_ms:.1f} ms | {g.load_ms:.1f} ms |")
    print(f"\nsave of one more text turn, sessions holding the image: {timed.short_us:.0f} µs "
          f"at {SHORT} turns, {timed.long_us:.0f} µs at {TURNS} turns; median of paired "
          f"ratios {timed.pair_ratio:.2f}\n")
    ok = True
    for name, limit, check in GOALS:
        value = check(growths, timed)
        passed = value <= limit
        ok = ok and passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {value:.3f} (limit {limit})")
    return ok


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=100, help="pairs of saves timed")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    growths = [await grow("one image", (), rng),
               await grow("the image in 6 turns", AGAIN_AT, rng)]
    with inline_rows():
        growths += [await grow("one image, inline (before)", (), rng),
                    await grow("the image in 6 turns, inline (before)", AGAIN_AT, rng)]
    timed = await saves(args.reps, rng)
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, SQLite, load average {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f}\n")
    return 0 if report(growths, timed) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
