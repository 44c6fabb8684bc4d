"""What ``nonoka run``'s tools may read: races, FIFOs, huge files, ``.env`` and ``.nonoka/``.

Real files, a real FIFO, a real symlink flipped by another thread, real subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nonoka.cli.tools import builtin_tools
from nonoka.errors import ToolError
from nonoka.runtime.tools import RunContext, Tool
from nonoka.testing import call, text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem

OUTSIDE = "OUTSIDE-THE-PROJECT"


def use(tool: Tool, **arguments: object) -> tuple[str, bool]:
    ctx: RunContext[None] = RunContext(deps=None, session_id="s")
    try:
        return asyncio.run(tool.run(json.dumps(arguments), ctx)), False
    except ToolError as exc:
        return str(exc), True


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "outside.txt").write_text(f"{OUTSIDE} needle\n")
    return project


def tools_of(root: Path) -> dict[str, Tool]:
    return {t.name: t for t in builtin_tools(root)}


READS = 2000
"""Tool calls made while the file flips (ten times as many under ``-m slow``)."""

FLIPPER = """
import os, sys
from pathlib import Path
root, outside, stop = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
target, link, regular = root / "flip.txt", root / "link.tmp", root / "regular.tmp"
flips = 0
while not stop.exists():
    link.unlink(missing_ok=True)
    link.symlink_to(outside)
    os.replace(link, target)  # now a symlink out of the project
    regular.write_text("inside needle\\n")
    os.replace(regular, target)  # a regular file again
    flips += 1
    if flips == 1:
        print("flipping", flush=True)
print(flips, flush=True)
"""
"""Another process that turns ``flip.txt`` into a symlink out of the project and back,
as fast as it can, until the stop file appears; it says when it began and how often it
flipped."""


def _flipped_reads(root: Path, wanted: int) -> None:
    """``wanted`` tool calls on a file that another process keeps flipping to a symlink
    out of the project: none returns the outside file."""
    (root / "flip.txt").write_text("inside needle\n")
    stop = root.parent / "stop"
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(root), str(root.parent / "outside.txt"), str(stop)],
        stdout=subprocess.PIPE, text=True)
    tools = tools_of(root)
    leaked, reads = 0, 0
    try:
        assert flipper.stdout is not None and flipper.stdout.readline() == "flipping\n"
        while reads < wanted:
            for tool, args in ((tools["read_file"], {"path": "flip.txt"}),
                               (tools["search_text"], {"text": "needle"})):
                result, _ = use(tool, **args)
                reads += 1
                leaked += OUTSIDE in result
    finally:
        stop.touch()
        flips = int(flipper.communicate(timeout=60)[0] or 0)
    assert flips > reads // 10, (flips, reads)  # the calls met a file that kept flipping
    assert leaked == 0, f"{leaked} of {reads} calls returned the outside file"


def test_a_file_flipping_to_an_outside_symlink_never_reads_outside(root: Path) -> None:
    _flipped_reads(root, READS)


@pytest.mark.slow
def test_a_long_race_with_a_flipping_symlink(root: Path) -> None:
    _flipped_reads(root, READS * 10)


def test_a_fifo_is_refused_at_once_and_search_goes_past_it(root: Path) -> None:
    os.mkfifo(root / "pipe")
    (root / "notes.txt").write_text("a needle here\n")
    tools = tools_of(root)
    started = time.monotonic()
    result, error = use(tools["read_file"], path="pipe")
    assert error and "not a regular file" in result
    assert use(tools["search_text"], text="needle")[0] == "notes.txt:1: a needle here"
    assert use(tools["search_text"], text="needle", path="pipe")[0].startswith("no line")
    assert time.monotonic() - started < 5


def test_run_with_a_fifo_in_the_project_finishes_and_continues(project: Project,
                                                              scripted: list[ScriptItem]) -> None:
    os.mkfifo(project.path / "pipe")
    scripted.extend([call("search_text", {"text": "launch"}), call("read_file",
                                                                   {"path": "pipe"}),
                     text("done"), text("again")])
    done = project.nonoka("run", "look around", timeout=30)
    assert done.returncode == 0, done.stderr
    assert "not a regular file" in done.stderr
    assert project.nonoka("run", "-c", "more", timeout=30).returncode == 0


def test_reading_a_window_of_a_huge_file_keeps_memory_small(root: Path) -> None:
    line = b"x" * 9 + b"\n"
    with (root / "huge.log").open("wb") as handle:
        for _ in range(60):
            handle.write(line * 100_000)  # 60 MB, 6 million lines
    script = (
        "import asyncio, json, sys\n"
        "from pathlib import Path\n"
        "from nonoka.cli.tools import builtin_tools\n"
        "from nonoka.runtime.tools import RunContext\n"
        "tool = {t.name: t for t in builtin_tools(Path(sys.argv[1]))}['read_file']\n"
        "ctx = RunContext(deps=None, session_id='s')\n"
        "out = asyncio.run(tool.run(json.dumps({'path': 'huge.log', 'offset': 5, "
        "'limit': 3}), ctx))\n"
        # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec,
        # so a child of a large pytest process would report pytest's memory.
        "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') "
        "if l.startswith('VmHWM:'))\n"
        "print(json.dumps({'out': out, 'rss_kb': hwm}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["out"].splitlines()[:3] == ["x" * 9] * 3
    assert "[lines 6-8 of " in report["out"]
    assert report["rss_kb"] < 150_000, report["rss_kb"]


def test_env_files_are_masked_and_nonoka_data_refused(root: Path) -> None:
    token = "-".join(("db", "pass", "Zq8Lw2Rt6Yu0"))
    (root / ".env").write_text(f"# settings\nDATABASE_HOST=db.internal\nDB_PASS={token}\n")
    (root / ".nonoka").mkdir()
    (root / ".nonoka" / "config.toml").write_text('model = "openai:x"\n')
    (root / "cfg").symlink_to(root / ".nonoka" / "config.toml")
    tools = tools_of(root)
    env, error = use(tools["read_file"], path=".env")
    assert not error
    assert env.splitlines() == ["# settings", "DATABASE_HOST=[redacted]", "DB_PASS=[redacted]"]
    found, _ = use(tools["search_text"], text="DB_")
    assert token not in found and ".env:3: DB_PASS=[redacted]" in found
    for path in (".nonoka/config.toml", "cfg", "docs/../.nonoka/config.toml", ".nonoka"):
        result, error = use(tools["read_file"], path=path)
        assert error and ".nonoka/" in result and "openai:x" not in result, (path, result)
    assert use(tools["list_dir"], path=".nonoka")[1]
    assert use(tools["search_text"], text="model", path=".nonoka")[1]


def test_a_tool_call_over_its_time_limit_is_stopped(root: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in range(40):
        (root / f"d{folder}").mkdir()
        for number in range(50):
            (root / f"d{folder}" / f"f{number}.txt").write_text("nothing to see\n")
    monkeypatch.setenv("NONOKA_TOOL_TIMEOUT", "0.001")
    started = time.monotonic()
    result, error = use(tools_of(root)["search_text"], text="needle")
    assert error and ("took longer" in result or "took too long" in result), result
    assert time.monotonic() - started < 5


def test_ctrl_c_ends_a_process_whose_tool_is_stuck(tmp_path: Path) -> None:
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    script = (
        "import asyncio, sys\n"
        "from nonoka.cli.tools import bounded\n"
        "def stuck(deadline):\n"
        "    print('ready', flush=True)  # the tool's thread runs: open() blocks next\n"
        "    return open(sys.argv[1]).read()\n"
        "async def main():\n"
        "    await bounded(stuck)\n"
        "try:\n"
        "    asyncio.run(main())\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n")
    process = subprocess.Popen([sys.executable, "-c", script, str(fifo)],
                               stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "NONOKA_TOOL_TIMEOUT": "600"})
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGINT)  # whether the open has blocked yet or is about to
    try:
        out, _ = process.communicate(timeout=60)  # a bound on a hang, not a timing claim
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError("Ctrl-C did not end the process while a tool was stuck") from None
    assert "interrupted" in out


def test_a_tools_thread_leaves_ctrl_c_to_the_main_thread() -> None:
    """The kernel gives a process's signal to any thread that does not block it; one
    taken by a tool's thread stuck in the kernel woke nobody, and the test above hung
    now and then on a busy machine. The tool's thread blocks both stop signals."""
    from nonoka.cli.tools import bounded

    blocked = asyncio.run(bounded(lambda deadline: signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    assert {signal.SIGINT, signal.SIGTERM} <= blocked
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
