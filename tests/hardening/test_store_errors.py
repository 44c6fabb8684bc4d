"""Store failures after the database opened: one line that says what to do, no traceback,
a non-zero exit status, and nothing stored changed.

Real ``nonoka run`` / ``nonoka sessions`` subprocesses against a real SQLite file, the
real PostgreSQL (a login it refuses) and a port where none listens.
"""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.faults.test_storage_faults import without_root_powers
from tests.pg import PG_URL
from tests.support.processes import NONOKA

INT64_MAX = 2**63 - 1


def nonoka(project: Project, *args: str, env: dict[str, str] | None = None,
           prefix: Sequence[str] = (), preexec: Callable[[], None] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *NONOKA, *args], cwd=project.path, env=env or project.env,
                          capture_output=True, text=True, timeout=90, check=False,
                          preexec_fn=preexec)


def one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("nonoka: ")]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], errors[0]


STORED = ("SELECT * FROM checkpoints", "SELECT * FROM session_entries",
          "SELECT * FROM cli_sessions", "SELECT * FROM session_leases WHERE expires_at <> 0")
"""Every stored row but the timeline (a failed turn may log its error there) and the
rows of released leases (expiry 0: kept for the next turn's lease, whoever held it)."""


def stored(project: Project) -> list[Any]:
    db = sqlite3.connect(f"file:{project.path / '.nonoka' / 'sessions.db'}?mode=ro", uri=True)
    try:
        return [sorted(map(repr, db.execute(query))) for query in STORED]
    finally:
        db.close()


def edit(project: Project, statement: str, *params: object) -> None:
    db = sqlite3.connect(project.path / ".nonoka" / "sessions.db")
    with db:
        db.execute(statement, params)
    db.close()


@pytest.fixture
def seeded(project: Project, scripted: list[ScriptItem]) -> str:
    scripted.append(text("first answer"))
    done = project.nonoka("run", "first")
    assert done.returncode == 0, done.stderr
    return project.records()[0].session_id


@pytest.mark.parametrize(("url", "words"), [
    ("postgresql://127.0.0.1:1/test", ("connection failed", "server is running")),
    (PG_URL.replace("postgres@", "no_such_role_here@"), ("no_such_role_here", "check the user")),
], ids=["down", "login-refused"])
def test_postgres_unreachable_or_refusing(project: Project, url: str,
                                          words: tuple[str, ...]) -> None:
    env = {**project.env, "NONOKA_DATABASE_URL": url}
    for args in (("run", "hello"), ("sessions", "list"), ("sessions", "show", "abc")):
        one_line(nonoka(project, *args, env=env), *words)


def test_a_database_locked_past_the_busy_timeout(project: Project, seeded: str) -> None:
    before = stored(project)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(30)",
         str(project.path / ".nonoka" / "sessions.db")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # A short busy timeout: the wait, not its length, is what is tested here.
        short = {**project.env, "NONOKA_SQLITE_BUSY_TIMEOUT": "0.5"}
        one_line(nonoka(project, "run", "-c", "more", env=short), "locked", "try again")
    finally:
        holder.kill()
        holder.communicate()
    assert stored(project) == before


def test_a_read_only_database_file(project: Project, seeded: str) -> None:
    path = project.path / ".nonoka" / "sessions.db"
    before = stored(project)
    os.chmod(path, 0o400)
    try:
        one_line(nonoka(project, "run", "-c", "more", prefix=without_root_powers()),
                 "read-only", "writable")
    finally:
        os.chmod(path, 0o600)
    assert stored(project) == before


def test_a_read_only_state_directory(project: Project, seeded: str) -> None:
    folder = project.path / ".nonoka"
    before = stored(project)
    for suffix in ("-wal", "-shm"):  # as the last writer leaves it
        Path(f"{folder}/sessions.db{suffix}").unlink(missing_ok=True)
    os.chmod(folder, 0o500)
    try:
        for args in (("sessions", "list"), ("sessions", "show", seeded[:8]),
                     ("run", "-c", "more")):
            one_line(nonoka(project, *args, prefix=without_root_powers()), "writable")
    finally:
        os.chmod(folder, 0o700)
    assert stored(project) == before


def test_a_full_disk(project: Project, seeded: str, scripted: list[ScriptItem]) -> None:
    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    scripted.append(text("never stored"))
    done = nonoka(project, "run", "-c", "more", preexec=small_files)
    one_line(done, "free some space")
    scripted.clear()


@pytest.mark.parametrize(("owner", "expires_at"), [("someone", "not a number"),
                                                   (b"\x01\x02", 1e300)])
def test_a_lease_row_of_the_wrong_type(project: Project, seeded: str, owner: object,
                                      expires_at: object) -> None:
    edit(project, "INSERT OR REPLACE INTO session_leases VALUES (?, ?, ?, 0)", seeded, owner,
         expires_at)
    before = stored(project)
    one_line(nonoka(project, "run", "-c", "more"), "lease", "damaged", "DELETE FROM")
    assert stored(project) == before


def test_a_token_count_of_the_wrong_type(project: Project, seeded: str) -> None:
    edit(project, "UPDATE cli_sessions SET input_tokens = 'lots'")
    before = stored(project)
    for args in (("sessions", "list"), ("sessions", "show", seeded[:8]),
                 ("run", "-c", "more")):
        one_line(nonoka(project, *args), "damaged", "input_tokens")
    assert stored(project) == before


def test_a_revision_at_int64_max(project: Project, seeded: str) -> None:
    edit(project, "UPDATE checkpoints SET revision = ?", INT64_MAX)
    before = stored(project)
    one_line(nonoka(project, "run", "-c", "more"), "revision", "Start a new session")
    assert stored(project) == before


def test_everything_still_works_afterwards(project: Project, seeded: str,
                                           scripted: list[ScriptItem]) -> None:
    scripted.append(text("second answer"))
    assert nonoka(project, "run", "-c", "more").returncode == 0
    assert nonoka(project, "sessions", "list").returncode == 0
