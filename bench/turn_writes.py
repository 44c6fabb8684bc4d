"""The bytes one real ``nonoka bridge`` turn writes to the project's database.

Run: ``.venv/bin/python bench/turn_writes.py [--turns N] [--tree DIR ...]`` (needs
``strace``; about 20 s a tree).

A session is created, then continued ``--turns`` times, each turn a fresh ``nonoka
bridge`` process as OpenCode spawns it: the whole history resent, twelve host tools of
about 2 KB each (OpenCode sends ~25 KB of tool definitions), a short streamed answer from
a local endpoint (``bench.turn_cost.ModelServer``). Each process runs under ``strace -f
-e trace=write,pwrite64 -y``, which names the file of every write; the bytes written to
the database file, its write-ahead log and its shared-memory index are summed per turn
(medians over the turns). The first ``--warm`` turns are left out: the log and the file
grow to their working size first.

What the figures mean: the write-ahead log receives every page a transaction changed
(4 KiB each, plus a 24-byte frame header), and the database file receives those pages
again when the log is folded back in, which the last connection to close does: every
bridge process, on a project nobody else has open. ``--tree DIR`` runs the bridge of
another checkout (``DIR/src`` first on ``PYTHONPATH``); several give paired runs, turn by
turn alternately, on the same machine at the same time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.turn_cost import MODEL, ModelServer

TOOLS = [{"name": f"tool_{n}", "description": f"Tool {n}. " + "Describes what it does. " * 90,
          "parameters": {"type": "object", "properties": {
              "path": {"type": "string", "description": "A path in the project."},
              "limit": {"type": "integer", "description": "At most this many lines."}},
              "required": ["path"]}} for n in range(12)]

_WRITE = re.compile(r'^\d+\s+(?:p?write64|write)\(\d+<([^>]*)>, .*\)\s+=\s+(\d+)$')


def request(messages: list[dict[str, Any]], cwd: Path, session_id: str | None) -> bytes:
    line: dict[str, Any] = {"type": "chat", "protocol": {"version": "1"},
                            "messages": messages, "tools": TOOLS, "cwd": str(cwd),
                            "model": f"openai:{MODEL}"}
    if session_id is None:
        line["new_session"] = True
    else:
        line["session_id"] = session_id
    return json.dumps(line).encode() + b"\n"


def traced_turn(tree: Path, cwd: Path, line: bytes, env: dict[str, str]) -> tuple[
        dict[str, int], list[dict[str, Any]]]:
    """Bytes written per database file by one bridge process, and its events."""
    trace = cwd / "trace.txt"
    argv = ["strace", "-f", "-qq", "-y", "-e", "trace=write,pwrite64", "-o", str(trace),
            sys.executable, "-m", "nonoka", "bridge"]
    done = subprocess.run(argv, input=line, cwd=cwd, capture_output=True, check=False,
                          env={**env, "PYTHONPATH": str(tree / "src")})
    events = [json.loads(out) for out in done.stdout.splitlines()]
    if done.returncode != 0 or events[-1].get("type") != "finish":
        raise SystemExit(f"the bridge of {tree} failed: {done.stderr.decode()[-2000:]}")
    written: dict[str, int] = defaultdict(int)
    for entry in trace.read_text(errors="replace").splitlines():
        match = _WRITE.match(entry)
        if match and "/sessions.db" in match[1]:
            suffix = match[1].rsplit("sessions.db", 1)[1] or "db"
            written[suffix.lstrip("-")] += int(match[2])
    trace.unlink()
    return written, events


class Project:
    """One tree's project: a session continued a turn at a time."""

    def __init__(self, tree: Path, root: Path, env: dict[str, str]) -> None:
        self.tree, self.cwd, self.env = tree, root, env
        root.mkdir()
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
        _, events = traced_turn(tree, root, request(self.messages, root, None), env)
        self.session_id = next(e["session_id"] for e in events if e["type"] == "session_init")
        self.turns: list[dict[str, int]] = []

    def turn(self, n: int) -> dict[str, int]:
        self.messages = [*self.messages, {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": f"turn {n}: what next?"}]
        written, _ = traced_turn(self.tree, self.cwd,
                                 request(self.messages, self.cwd, self.session_id), self.env)
        return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--tree", action="append", type=Path, default=[],
                        help="a checkout whose bridge to run (default: this one)")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("turn_writes.py needs strace (apt-get install strace)", file=sys.stderr)
        return 2
    trees = [t.resolve() for t in args.tree] or [Path(__file__).resolve().parents[1]]
    server = ModelServer()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NONOKA_", "OPENAI_"))}
    env.update({"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": server.base_url})
    with tempfile.TemporaryDirectory(prefix="nonoka-bench-") as name:
        projects = [Project(tree, Path(name) / f"tree{i}", env) for i, tree in enumerate(trees)]
        figures: list[list[dict[str, int]]] = [[] for _ in projects]
        for n in range(args.warm + args.turns):
            for i, project in enumerate(projects):
                written = project.turn(n)
                if n >= args.warm:
                    figures[i].append(written)
    print(f"python {sys.version.split()[0]}, {args.turns} turns after {args.warm}, "
          "bytes written per bridge turn (median)\n")
    print(f"{'tree':<40} | {'WAL':>9} | {'database':>9} | {'shm':>7} | {'total':>9}")
    print("-" * 86)
    for tree, turns in zip(trees, figures, strict=True):
        def median(key: str, turns: list[dict[str, int]] = turns) -> float:
            return statistics.median(t.get(key, 0) for t in turns)
        total = statistics.median(sum(t.values()) for t in turns)
        print(f"{str(tree)[-40:]:<40} | {median('wal') / 1024:7.1f} K | "
              f"{median('db') / 1024:7.1f} K | {median('shm') / 1024:5.1f} K | "
              f"{total / 1024:7.1f} K")
    return 0


if __name__ == "__main__":
    sys.exit(main())
