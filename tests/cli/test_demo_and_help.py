"""``nonoka demo`` on a fresh directory, and ``--help`` on every command."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nonoka.cli.commands import cli
from tests.cli.conftest import no_ansi
from tests.support.processes import NONOKA

COMMANDS = [[], ["run"], ["sessions"], ["sessions", "list"], ["sessions", "show"], ["demo"],
            ["bridge"]]


def test_demo_passes_every_check_and_shows_the_recovery(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NONOKA_", "OPENAI_"))}
    started = time.monotonic()
    done = subprocess.run([*NONOKA, "demo", "--dir", str(tmp_path / "demo")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "no API key needed" in out
    assert "killed with SIGKILL" in out
    assert "recovered: true (reason: session_id_missing)" in out
    assert "$ nonoka sessions list" in out and "$ nonoka sessions show" in out
    assert "interrupted" in out  # the killed request, as sessions show marks it
    assert "demo OK" in out and "FAILED" not in out
    assert no_ansi(out, done.stderr)
    assert done.stderr == ""
    assert (tmp_path / "demo" / ".nonoka" / "sessions.db").is_file()
    assert elapsed < 30
    # The closing hint is a command a shell runs even when the virtualenv is not on PATH.
    hint = out.split("Look around: cd ", 1)[1].split("\n", 1)[0]
    where, command = hint.split(" && ", 1)
    listed = subprocess.run(command, shell=True, cwd=where, capture_output=True, text=True,
                            timeout=60, check=False, env={**env, "PATH": "/usr/bin:/bin"})
    assert listed.returncode == 0 and "What's the weather" in listed.stdout, (command, listed)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "nonoka")
def test_help_works_for_every_command(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")
    docstring_first_line = result.output.split("\n\n")[1].strip()
    assert len(docstring_first_line) > 20  # a sentence, not a bare name


def test_help_through_the_real_entry_point() -> None:
    for command in (["--help"], ["bridge", "--help"], ["run", "-h"]):
        done = subprocess.run([*NONOKA, *command], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0 and done.stdout.startswith("Usage: nonoka"), done.stderr
