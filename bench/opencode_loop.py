"""A tool loop with the real OpenCode, directly and through nonoka, side by side.

For each adapter (``openai:``, ``anthropic:``, ``openai-responses:``) one project holds two
providers pointing at the same scripted endpoint, which answers at once: ``scripted``,
OpenCode's own AI SDK provider for that API (``@ai-sdk/openai-compatible``,
``@ai-sdk/anthropic``, ``@ai-sdk/openai``, all bundled with OpenCode), and ``nonoka``, as
``nonoka opencode init`` writes it, with nonoka's model for that API. The endpoint asks for
OpenCode's ``read`` tool ``--steps`` times (a different file each time, so OpenCode's
repeated-call guard never stops the loop), then answers ``LOOP-DONE``: one ``opencode
run`` is ``--steps`` + 1 model steps (and a title request).

Each run times ``opencode run`` from spawn to exit, directly and through nonoka in turn
(each side leads in turn from one run to the next), after one untimed run of each
(OpenCode installs the provider package on first use). The verdict is the median of the
paired ratios (nonoka / direct): PASS at most 1.1. Also printed: the median wall times,
the median paired ratio of the loop alone (``loop x``: from the first chat request's
arrival at the endpoint to the last's, without OpenCode's start and exit, which are the
same on both paths and vary the most), the extra time a step costs through nonoka (the
median loops' difference over ``--steps``), the median CPU seconds of a run (OpenCode and
every process it started, a warm bridge that outlives it included: this process adopts
orphans as a subreaper and waits for them after each run), and how many ``nonoka bridge``
processes served the last run's steps (each ``request`` entry of the session's timeline
names its process).

Exit status 1 if an adapter's verdict fails or a run did not end with the model's
answer. Run::

    .venv/bin/python bench/opencode_loop.py [--runs 5] [--steps 30] [--adapters openai,responses]

``--per-step`` adds a third side in the same runs: nonoka with one bridge process per step
(the provider's ``warm: false``, a second provider block ``nonoka-steps``), i.e. the
provider before warm bridges. ``--provider-option NAME=JSON`` sets an option of the
``nonoka`` block.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
GOAL = 1.1
DONE = "LOOP-DONE"
ADAPTERS = ("openai", "anthropic", "responses")


# -- the scripted endpoint: tool calls until --steps results came back --------------------


def _openai_script(project: Path, steps: int) -> Callable[[dict[str, Any]], Any]:
    from nonoka.testing import call, text

    def step(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return text("loop title")
        done = sum(1 for m in body.get("messages") or () if m.get("role") == "tool")
        if done >= steps:
            return text(DONE)
        return call("read", {"filePath": str(_file(project, done))}, id=f"call_{done}")
    return step


def _anthropic_script(project: Path, steps: int) -> Callable[[dict[str, Any]], Any]:
    from nonoka.state.messages import ToolCall
    from nonoka.testing.server import AnthropicReply

    def step(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return AnthropicReply(text="loop title")
        done = sum(1 for m in body.get("messages") or () if isinstance(m.get("content"), list)
                   for b in m["content"] if b.get("type") == "tool_result")
        if done >= steps:
            return AnthropicReply(text=DONE)
        args = json.dumps({"filePath": str(_file(project, done))})
        return AnthropicReply(tool_calls=(ToolCall(id=f"toolu_{done}", name="read",
                                                   arguments=args),))
    return step


def _responses_script(project: Path, steps: int) -> Callable[[dict[str, Any]], Any]:
    from nonoka.state.messages import ToolCall
    from nonoka.testing.server import ResponsesReply

    def step(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return ResponsesReply(output=("loop title",))
        done = sum(1 for i in body.get("input") or ()
                   if isinstance(i, dict) and i.get("type") == "function_call_output")
        if done >= steps:
            return ResponsesReply(output=(DONE,))
        args = json.dumps({"filePath": str(_file(project, done))})
        return ResponsesReply(output=(ToolCall(id=f"call_{done}", name="read", arguments=args),))
    return step


def _file(project: Path, n: int) -> Path:
    return project / "files" / f"f{n:03d}.txt"


@dataclass(frozen=True)
class Adapter:
    name: str
    spec: str
    """nonoka's model for this API."""
    npm: str
    """OpenCode's own provider package for it."""
    model: str

    def server(self, project: Path, steps: int, arrivals: list[float]) -> Any:
        """The scripted endpoint; each chat request's arrival goes to ``arrivals``."""
        from nonoka.testing.server import (
            ScriptedAnthropicServer,
            ScriptedOpenAIServer,
            ScriptedResponsesServer,
        )

        make = {"anthropic": _anthropic_script, "responses": _responses_script}.get(
            self.name, _openai_script)
        script = make(project, steps)

        def timed(body: dict[str, Any]) -> Any:
            if body.get("tools"):
                arrivals.append(time.perf_counter())
            return script(body)

        if self.name == "anthropic":
            return ScriptedAnthropicServer(timed)
        if self.name == "responses":
            return ScriptedResponsesServer(timed)
        return ScriptedOpenAIServer(timed)

    def direct_base(self, server: Any) -> str:
        """The base URL OpenCode's own provider takes (the Anthropic SDK's ends in /v1)."""
        return f"{server.base_url}/v1" if self.name == "anthropic" else str(server.base_url)

    def nonoka_env(self, server: Any) -> dict[str, str]:
        if self.name == "anthropic":
            return {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-bench"}
        return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-bench"}


ALL = {
    "openai": Adapter("openai", "openai:m", "@ai-sdk/openai-compatible", "m"),
    "anthropic": Adapter("anthropic", "anthropic:claude-sonnet-4-5", "@ai-sdk/anthropic",
                         "claude-sonnet-4-5"),
    "responses": Adapter("responses", "openai-responses:gpt-5", "@ai-sdk/openai", "gpt-5"),
}


# -- one project per adapter ------------------------------------------------------------


class Project:
    """A git project with both providers, and ``opencode run`` in it."""

    def __init__(self, root: Path, binary: str, adapter: Adapter, steps: int,
                 options: dict[str, Any]) -> None:
        self.root = root
        self.path = root / "project"
        self.home = root / "home"
        self.binary = binary
        self.adapter = adapter
        self.path.mkdir(parents=True)
        self.home.mkdir()
        (self.path / "files").mkdir()
        for n in range(steps):
            _file(self.path, n).write_text(f"file {n}\nsecond line\n", encoding="utf-8")
        self.arrivals: list[float] = []
        self.server = adapter.server(self.path, steps, self.arrivals)
        self.server.start()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENCODE", "OPENAI_", "ANTHROPIC_", "NONOKA_", "XDG_"))}
        env.update({
            "PWD": str(self.path), "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "npm_config_cache": str(Path(tempfile.gettempdir()) / "nonoka-e2e-npm-cache"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1", "NO_COLOR": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
        })
        self.env = env
        self._configure(options)

    def _configure(self, options: dict[str, Any]) -> None:
        subprocess.run(["git", "init", "-q", "."], cwd=self.path, check=True)
        init = subprocess.run(
            [sys.executable, "-m", "nonoka", "opencode", "init", "--model", self.adapter.spec],
            cwd=self.path, env=self.env, capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise SystemExit(f"nonoka opencode init failed:\n{init.stderr}")
        path = self.path / "opencode.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        nonoka = config["provider"]["nonoka"]
        nonoka["options"]["env"] = self.adapter.nonoka_env(self.server)
        steps = json.loads(json.dumps(nonoka))
        nonoka["options"].update(options)
        steps["options"]["warm"] = False
        config["provider"]["nonoka-steps"] = steps
        limit = nonoka["models"]["default"].get("limit") or {"context": 200000, "output": 32000}
        config["provider"]["scripted"] = {
            "npm": self.adapter.npm, "name": "scripted",
            "options": {"baseURL": self.adapter.direct_base(self.server),
                        "apiKey": "sk-bench"},
            "models": {self.adapter.model: {"name": self.adapter.model, "limit": limit}},
        }
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")

    def run(self, side: str) -> Run:
        """One ``opencode run`` of the loop."""
        model = {"direct": f"scripted/{self.adapter.model}", "nonoka": "nonoka/default",
                 "per-step": "nonoka-steps/default"}[side]
        before = len(self.server.requests)
        self.arrivals.clear()
        used = _cpu_of_children()
        started = time.perf_counter()
        done = subprocess.run(
            [self.binary, "run", "--model", model, "Read the files one by one, please."],
            cwd=self.path, env=self.env, capture_output=True, text=True, timeout=900,
            check=False)
        wall = time.perf_counter() - started
        _reap_orphans()  # a warm bridge exits once OpenCode has: count it, and wait for it
        loop = self.arrivals[-1] - self.arrivals[0] if self.arrivals else 0.0
        return Run(wall, loop, _cpu_of_children() - used, done,
                   len(self.server.requests) - before)

    def bridge_pids(self) -> int:
        """How many bridge processes served the latest chat session's requests (run a
        nonoka side last)."""
        done = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "list", "--all",
                               "--json"], cwd=self.path, env=self.env, capture_output=True,
                              text=True, timeout=120, check=False)
        rows = [r for r in json.loads(done.stdout or "[]")
                if (r.get("metadata") or {}).get("purpose", "chat") == "chat"]
        if not rows:
            return 0
        latest = max(rows, key=lambda r: str(r.get("updated_at") or ""))
        shown = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "show",
                                latest["session_id"], "--json", "--limit", "100000"],
                               cwd=self.path, env=self.env, capture_output=True, text=True,
                               timeout=120, check=False)
        events = json.loads(shown.stdout or "{}").get("events") or []
        processes = {(e.get("data") or {}).get("process") for e in events
                     if e.get("kind") == "request"}
        return len(processes - {None})

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class Run:
    """One ``opencode run`` of the loop."""

    wall: float
    """Spawn to exit."""
    loop: float
    """From the first chat request's arrival at the endpoint to the last's."""
    cpu: float
    """User and system seconds of OpenCode and every process it started (bridges too)."""
    done: subprocess.CompletedProcess[str]
    requests: int
    """Model requests the endpoint received."""

    def problem(self, steps: int, what: str) -> str | None:
        done = self.done
        if done.returncode != 0 or DONE not in done.stdout:
            return (f"{what}: exit {done.returncode}, no {DONE} in its output\n"
                    f"{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
        if self.requests < steps + 1:
            return (f"{what}: the endpoint saw {self.requests} requests, expected at least "
                    f"{steps + 1}")
        return None


def _adopt_orphans() -> bool:
    """Make this process the one that reaps its descendants when their parent exits (Linux:
    ``PR_SET_CHILD_SUBREAPER``), so a warm bridge, which outlives OpenCode, is counted."""
    try:
        done: int = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
        return done == 0
    except (OSError, AttributeError):
        return False


def _reap_orphans() -> None:
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def _cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def bench(adapter: Adapter, binary: str, runs: int, steps: int, options: dict[str, Any],
          sides: tuple[str, ...]) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"nonoka-loop-{adapter.name}-"))
    project = Project(root, binary, adapter, steps, options)
    problems: list[str] = []
    runs_of: dict[str, list[Run]] = {side: [] for side in sides}
    ratios: dict[str, list[float]] = {side: [] for side in sides}
    loops: dict[str, list[float]] = {side: [] for side in sides}
    processes = 0
    try:
        for side in sides:  # untimed: OpenCode installs the provider
            if (problem := project.run(side).problem(steps, f"warm-up {side}")) is not None:
                problems.append(problem)
        for n in range(runs):
            order = sides[n % len(sides):] + sides[:n % len(sides)]  # each side leads in turn
            this: dict[str, Run] = {}
            for side in order:
                run = this[side] = project.run(side)
                if (problem := run.problem(steps, f"run {n + 1} {side}")) is not None:
                    problems.append(problem)
                if side == "nonoka":
                    processes = project.bridge_pids()
                runs_of[side].append(run)
            for side in sides:
                ratios[side].append(this[side].wall / this["direct"].wall)
                loops[side].append(this[side].loop / this["direct"].loop)
            print(f"  {adapter.name} run {n + 1}: " + ", ".join(
                f"{side} {this[side].wall:.2f} s" + ("" if side == "direct" else
                                                     f" ({ratios[side][-1]:.2f}x, "
                                                     f"loop {loops[side][-1]:.2f}x)")
                for side in sides), flush=True)
    finally:
        project.close()
        shutil.rmtree(root, ignore_errors=True)

    def median(side: str, field: str) -> float:
        return statistics.median(float(getattr(run, field)) for run in runs_of[side])

    return {"adapter": adapter, "direct": median("direct", "wall"),
            "direct_cpu": median("direct", "cpu"), "processes": processes,
            "problems": problems, "sides": {
                side: {"wall": median(side, "wall"), "cpu": median(side, "cpu"),
                       "ratio": statistics.median(ratios[side]),
                       "loop": statistics.median(loops[side]),
                       "per_step": (median(side, "loop") - median("direct", "loop")) / steps}
                for side in sides if side != "direct"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--adapters", default=",".join(ADAPTERS))
    parser.add_argument("--opencode", default=shutil.which("opencode") or "opencode")
    parser.add_argument("--per-step", action="store_true",
                        help="also time nonoka with one bridge process per step")
    parser.add_argument("--provider-option", action="append", default=[],
                        metavar="NAME=JSON", help="set provider.nonoka.options.NAME")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {}
    for item in args.provider_option:
        name, _, value = item.partition("=")
        try:
            options[name] = json.loads(value)
        except ValueError:
            options[name] = value
    version = subprocess.run([args.opencode, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    if not _adopt_orphans():
        print("(cpu: a warm bridge outlives OpenCode and is not counted on this system)")
    print(f"OpenCode {version}, {args.steps} tool steps a run, {args.runs} runs a side, "
          f"{os.cpu_count()} cores" + (f", provider options {options}" if options else ""))
    sides = ("direct", "nonoka", "per-step") if args.per_step else ("direct", "nonoka")
    results = []
    for name in args.adapters.split(","):
        results.append(bench(ALL[name.strip()], args.opencode, args.runs, args.steps, options,
                             sides))
    print()
    print(f"{'adapter':<10} | {'side':<8} | {'wall':>8} | {'x direct':>8} | "
          f"{'loop x':>6} | {'+ per step':>10} | {'cpu':>7} | {'bridges':>7}")
    for r in results:
        print(f"{r['adapter'].name:<10} | {'direct':<8} | {r['direct']:>6.2f} s | "
              f"{'':>8} | {'':>6} | {'':>10} | {r['direct_cpu']:>5.2f} s | {'':>7}")
        for side, got in r["sides"].items():
            bridges = str(r["processes"]) if side == "nonoka" else ""
            print(f"{'':<10} | {side:<8} | {got['wall']:>6.2f} s | {got['ratio']:>7.2f}x | "
                  f"{got['loop']:>5.2f}x | {got['per_step'] * 1e3:>7.1f} ms | "
                  f"{got['cpu']:>5.2f} s | {bridges:>7}")
    print()
    failed = False
    for r in results:
        ratio = r["sides"]["nonoka"]["ratio"]
        ok = ratio <= GOAL and not r["problems"]
        failed |= not ok
        print(f"{'PASS' if ok else 'FAIL'}  {r['adapter'].spec}: through nonoka "
              f"<= {GOAL}x direct: {ratio:.2f}x (median of paired runs)")
        for problem in r["problems"]:
            print(f"      {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
