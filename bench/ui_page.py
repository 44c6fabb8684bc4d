"""How fast ``nonoka ui`` shows a 10,000-entry session, beside ``nonoka sessions show``.

Measures, in one run and side by side, for the same stored session:

* ``nonoka sessions show ID --json``: spawn to exit (the terminal's way to look at it);
* the session page in headless Chromium (Debian's, driven by Playwright): navigation
  start until the conversation is drawn and the page is complete, measured in the
  browser, i.e. the first screen with its styles and script, split into the server's
  share (the page's ``Server-Timing``: reading and rendering) and the browser's (the
  requests, transfer, parsing, layout, the rest). A navigation carries no token, so it
  is answered with the small page whose script fetches the session page with the token
  and draws it: both requests are in the time.

The page draws the latest entries and pages the rest on demand, so the cost of its first
screen does not grow with the conversation. Goal: the page's first screen within 3x of
``sessions show --json``. Run: ``.venv/bin/python bench/ui_page.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.ui.harness import UiServer, chromium

from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import ToolCall
from nonoka.state.session_state import SessionState, SessionStatus
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord

ENTRIES = 10_000
GOAL = 3.0
TEXT = ("the session survives process death and resumes from its id while a new "
        "process rebuilds the conversation, the plan, the budget and every extension "
        "état — naïve façade, \"quoted\" and {json}")
WORDS = TEXT.split(" ")


def entry(i: int) -> MemoryEntry:
    text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40 + i % 80))
    if i % 8 == 3:
        return MemoryEntry.assistant(text[:120], [ToolCall(id=f"c{i}", name="read_file",
                                                           arguments='{"path": "src/a.py"}')])
    if i % 8 == 4:
        return MemoryEntry.tool_result(ToolCall(id=f"c{i - 1}", name="read_file"),
                                       text * 3)
    return MemoryEntry.make("user" if i % 2 == 0 else "assistant", text)


async def make_session(project: Path) -> str:
    """One session of ``ENTRIES`` entries, its index row and a 400-event timeline."""
    sid = str(uuid.uuid4())
    async with open_project_stores(project) as stores:
        state = SessionState(session_id=sid, status=SessionStatus.COMPLETED,
                             memory_entries=[entry(i) for i in range(ENTRIES)],
                             turn_count=ENTRIES // 8)
        await stores.checkpoints.save_session(state)
        now = time.time()
        await stores.index.upsert_session(SessionRecord(
            session_id=sid, title="A very long conversation", model="openai:gpt-4o-mini",
            created_at=now - 3600, last_active=now, status="completed",
            turn_count=ENTRIES // 8, message_count=ENTRIES, input_tokens=9_000_000,
            output_tokens=400_000, cost_usd=12.5))
        for turn in range(100):
            await stores.events.append_event(sid, "request", {"messages": turn * 8})
            await stores.events.append_event(sid, "model_call", {
                "model": "openai:gpt-4o-mini", "input_tokens": 9000 + turn * 90,
                "output_tokens": 400, "cost_usd": 0.012})
            await stores.events.append_event(sid, "tool_call", {
                "tool_call_id": f"t{turn}", "tool_name": "read_file", "executed_by": "host"})
            await stores.events.append_event(sid, "finish", {
                "finish_reason": "stop", "input_tokens": 9000, "output_tokens": 400,
                "cost_usd": 0.012})
    return sid


def time_show(project: Path, sid: str, runs: int) -> list[float]:
    env = {**os.environ, "NONOKA_DATABASE_URL": ""}
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nonoka", "sessions", "show", sid, "--json"],
                       cwd=project, env=env, capture_output=True, check=True)
        timings.append(time.perf_counter() - started)
    return timings


DRAWN = """path => new Promise(resolve => {
  const check = setInterval(() => {
    const shown = document.querySelectorAll('#conversation .entry').length;
    if (!shown || document.readyState !== 'complete') return;
    clearInterval(check);
    const page = performance.getEntriesByType('resource').find(
      r => r.initiatorType === 'fetch' && new URL(r.name).pathname === path);
    const timing = page && page.serverTiming.find(t => t.name === 'render');
    resolve({drawn: performance.now(), render: timing ? timing.duration : 0, shown});
  }, 1);
})"""
"""In the page, from navigation start: when the conversation is drawn and the page is
complete, with the session page's own ``Server-Timing``."""


def time_page(project: Path, sid: str, runs: int) -> list[dict[str, float]]:
    """Per run, in seconds: ``total`` (navigation start to the page drawn, measured in
    the browser), its ``server`` and ``browser`` shares, and the ``wall`` time the
    driving process saw."""
    server = UiServer(project)
    results = []
    try:
        with chromium() as browser:
            page = browser.new_page()
            page.goto(server.url)  # enter with the token once (the page keeps it)
            page.goto(server.base + f"s/{sid}")  # warm: the static files are cached
            for _ in range(runs):
                fresh = browser.new_page()
                started = time.perf_counter()
                fresh.goto(server.base + f"s/{sid}", wait_until="commit")
                timing: Any = fresh.evaluate(DRAWN, f"/s/{sid}")
                wall = time.perf_counter() - started
                assert timing["render"] > 0, "the session page's Server-Timing was not seen"
                assert timing["shown"] > 0, "the page shows no entries"
                total, render = float(timing["drawn"]) / 1000, float(timing["render"]) / 1000
                results.append({"total": total, "server": render, "browser": total - render,
                                "wall": wall, "shown": float(timing["shown"])})
                fresh.close()
    finally:
        server.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        sid = asyncio.run(make_session(project))
        show = statistics.median(time_show(project, sid, args.runs))
        pages = time_page(project, sid, args.runs)
    page = statistics.median(r["total"] for r in pages)
    server = statistics.median(r["server"] for r in pages)
    browser = statistics.median(r["browser"] for r in pages)
    ratio = page / show
    print(f"session of {ENTRIES:,} entries; {args.runs} runs (medians); the page shows the "
          f"latest {int(pages[0]['shown'])} entries")
    print(f"{'measure':<52} {'ms':>8}")
    print(f"{'nonoka sessions show ID --json (spawn to exit)':<52} {show * 1000:8.1f}")
    print(f"{'session page, navigation to drawn (first screen)':<52} {page * 1000:8.1f}")
    print(f"{'  server: read and render (Server-Timing)':<52} {server * 1000:8.1f}")
    print(f"{'  browser: requests, transfer, parse, style, script':<52} {browser * 1000:8.1f}")
    verdict = "PASS" if ratio <= GOAL else "FAIL"
    print(f"{verdict}  first screen <= {GOAL:g}x sessions show --json: {ratio:.2f}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
