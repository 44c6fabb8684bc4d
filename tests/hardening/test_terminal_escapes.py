"""Control sequences from the model, tools, files and titles never reach a terminal raw.

The commands run as real subprocesses on a real pseudo-terminal (``os.openpty``), where
rich renders tables and colours, and again with output piped: ``run``, ``sessions
list``/``show``/``search`` and both export formats (Markdown is read in terminals and
pagers too; JSONL stays lossless, its escapes decode to the very same text).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

from nonoka.testing import call, text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.support.processes import NONOKA

ESC, BEL = "\x1b", "\x07"
CLIPBOARD = f"{ESC}]52;c;SGVsbG8={BEL}"
CLEAR = f"{ESC}[2J"
C1_CLEAR = "\x9b2J"
TITLE = f"{ESC}]0;owned{BEL}"
RESET = f"{ESC}c"
HOSTILE = (CLIPBOARD, CLEAR, C1_CLEAR, TITLE, RESET, f"{ESC}]0;owned",
           "]52;c;SGVsbG8=" + BEL)


def on_terminal(project: Project, *args: str, timeout: float = 60) -> tuple[int, str]:
    """Run ``nonoka ARGS`` with stdout and stderr on a pseudo-terminal; its exit status and
    every byte it wrote there."""
    master, slave = os.openpty()
    env = {**project.env, "COLUMNS": "200", "LINES": "50", "TERM": "xterm-256color"}
    process = subprocess.Popen([*NONOKA, *args], cwd=project.path, env=env,
                               stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the other side closed: the process is gone
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        status = process.wait(timeout=10)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return status, b"".join(chunks).decode("utf-8", errors="replace")


def assert_clean(output: str) -> None:
    for sequence in HOSTILE:
        assert sequence not in output, (sequence, output)


def _hostile_session(project: Project, scripted: list[ScriptItem]) -> tuple[int, str]:
    (project.path / "evil.txt").write_text(f"line one {CLIPBOARD} and {CLEAR}\n{C1_CLEAR}\n")
    scripted.extend([call("read_file", {"path": "evil.txt"}),
                     text(f"Here {CLIPBOARD} it is {CLEAR}{C1_CLEAR}{TITLE}.")])
    return on_terminal(project, "run", f"read evil.txt {TITLE}{CLEAR}")


def test_run_on_a_terminal_escapes_model_output_and_tool_results(
        project: Project, scripted: list[ScriptItem]) -> None:
    status, output = _hostile_session(project, scripted)
    assert status == 0, output
    assert "Here \\x1b]52;c;SGVsbG8=\\x07 it is \\x1b[2J\\x9b2J" in output
    assert_clean(output)


def test_sessions_list_and_show_on_a_terminal_escape_titles_and_timeline(
        project: Project, scripted: list[ScriptItem]) -> None:
    assert _hostile_session(project, scripted)[0] == 0
    status, listed = on_terminal(project, "sessions", "list")
    assert status == 0 and "read evil.txt" in listed, listed
    assert_clean(listed)
    [record] = project.records()
    status, detail = on_terminal(project, "sessions", "show", record.session_id[:8])
    assert status == 0 and "read_file" in detail, detail
    assert_clean(detail)


def test_piped_output_escapes_every_control_not_only_csi(project: Project,
                                                         scripted: list[ScriptItem]) -> None:
    assert _hostile_session(project, scripted)[0] == 0
    [record] = project.records()
    for args in (("sessions", "list"), ("sessions", "show", record.session_id),
                 ("sessions", "show", record.session_id, "--json"),
                 ("sessions", "list", "--json")):
        done = project.nonoka(*args)
        assert done.returncode == 0, done.stderr
        assert_clean(done.stdout + done.stderr)
    scripted.append(text(f"again {CLIPBOARD}"))
    done = project.nonoka("run", "-c", "more")
    assert done.returncode == 0 and "again \\x1b]52" in done.stdout, done.stdout
    assert_clean(done.stdout + done.stderr)


def _stored_controls(project: Project, scripted: list[ScriptItem]) -> str:
    """A session whose prompt, tool result and answer hold raw control sequences; its id."""
    (project.path / "evil.txt").write_text(f"axolotl {RESET} and {CLIPBOARD}\n")
    scripted.extend([call("read_file", {"path": "evil.txt"}),
                     text(f"The axolotl {CLIPBOARD} is {RESET}{CLEAR}{C1_CLEAR}{TITLE} here.")])
    done = project.nonoka("run", f"find the axolotl {RESET}{TITLE}")
    assert done.returncode == 0, done.stderr
    [record] = project.records()
    return record.session_id


def test_sessions_search_escapes_stored_controls(project: Project,
                                                 scripted: list[ScriptItem]) -> None:
    _stored_controls(project, scripted)
    status, found = on_terminal(project, "sessions", "search", "axolotl")
    assert status == 0 and "\\x1bc" in found and "\\x1b]52;c;SGVsbG8=\\x07" in found, found
    assert "\x1b[1;33maxolotl\x1b[0m" in found  # the matches are still highlighted
    assert_clean(found)
    for args in (("sessions", "search", "axolotl"), ("sessions", "search", "axolotl", "--json")):
        done = project.nonoka(*args)
        assert done.returncode == 0 and "axolotl" in done.stdout, done.stderr
        assert_clean(done.stdout)


def test_the_exports_escape_stored_controls(project: Project, scripted: list[ScriptItem],
                                            tmp_path: Path) -> None:
    sid = _stored_controls(project, scripted)
    status, markdown = on_terminal(project, "sessions", "export", sid, "--format", "markdown")
    assert status == 0 and "## Assistant" in markdown and "\\x1b]52" in markdown, markdown
    assert_clean(markdown)
    out = tmp_path / "conversation.md"
    assert project.nonoka("sessions", "export", sid, "--format", "markdown",
                          "-o", str(out)).returncode == 0
    assert_clean(out.read_text(encoding="utf-8"))
    status, lines = on_terminal(project, "sessions", "export", sid)
    assert status == 0 and '"type":"end"' in lines, lines
    assert_clean(lines)
    piped = project.nonoka("sessions", "export", sid).stdout
    assert_clean(piped)
    entries = [json.loads(line)["entry"] for line in piped.splitlines()
               if json.loads(line).get("type") == "entry"]
    assert any(C1_CLEAR in json.loads(entry)["content"] for entry in entries)  # lossless
