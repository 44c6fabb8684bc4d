"""The project database is opened without following links, and only if it is nonoka's.

A repository can commit ``.nonoka/sessions.db`` as a symlink to any file of the user's,
or as something that is not a database. Real files, a real FIFO, real ``nonoka``
subprocesses; every refusal is one line, exit status non-zero, and nothing changed.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem


def foreign_database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        db.execute("INSERT INTO accounts VALUES ('alice', 100)")
    db.close()
    os.chmod(path, 0o644)


def fingerprint(path: Path) -> tuple[str, int, list[str]]:
    return (hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mode,
            sorted(p.name for p in path.parent.iterdir()))


def refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("nonoka:")]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def commands(project: Project) -> list[subprocess.CompletedProcess[str]]:
    return [project.nonoka("run", "hello", timeout=30),
            project.nonoka("sessions", "list", timeout=30),
            project.nonoka("sessions", "show", "abc", timeout=30)]


def test_a_symlinked_database_is_refused_and_its_target_untouched(project: Project,
                                                                  tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere" / "app.db"
    victim.parent.mkdir()
    foreign_database(victim)
    before = fingerprint(victim)
    (project.path / ".nonoka").mkdir()
    (project.path / ".nonoka" / "sessions.db").symlink_to(victim)
    for done in commands(project):
        refused(done, "symlink")
    assert fingerprint(victim) == before
    with sqlite3.connect(victim) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_dangling_symlink_creates_nothing_where_it_points(project: Project,
                                                           tmp_path: Path) -> None:
    target = tmp_path / "planted.db"
    (project.path / ".nonoka").mkdir()
    (project.path / ".nonoka" / "sessions.db").symlink_to(target)
    refused(project.nonoka("run", "hello"), "symlink")
    assert not target.exists()


def test_a_symlinked_write_ahead_log_is_refused(project: Project, tmp_path: Path,
                                                scripted: list[ScriptItem]) -> None:
    scripted.append(text("hi"))
    assert project.nonoka("run", "first").returncode == 0
    for suffix in ("-wal", "-shm"):
        Path(f"{project.path}/.nonoka/sessions.db{suffix}").unlink(missing_ok=True)
    (tmp_path / "victim").write_text("keep me")
    Path(f"{project.path}/.nonoka/sessions.db-wal").symlink_to(tmp_path / "victim")
    refused(project.nonoka("sessions", "list"), "sessions.db-wal")
    assert (tmp_path / "victim").read_text() == "keep me"


def test_a_sqlite_file_that_is_not_nonokas_is_refused_untouched(project: Project) -> None:
    (project.path / ".nonoka").mkdir()
    path = project.path / ".nonoka" / "sessions.db"
    foreign_database(path)
    before = fingerprint(path)
    for done in commands(project):
        refused(done, "not nonoka's")
    assert fingerprint(path) == before


def test_a_fifo_in_place_of_the_database_is_refused_without_hanging(project: Project) -> None:
    (project.path / ".nonoka").mkdir()
    os.mkfifo(project.path / ".nonoka" / "sessions.db")
    started = time.monotonic()
    for done in commands(project):
        refused(done, "not a regular file")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(("age", "accepted"), [(3600.0, False), (0.0, True)])
def test_an_empty_file_is_new_only_while_it_is_young(project: Project,
                                                     scripted: list[ScriptItem], age: float,
                                                     accepted: bool) -> None:
    (project.path / ".nonoka").mkdir()
    path = project.path / ".nonoka" / "sessions.db"
    path.write_bytes(b"")
    old = time.time() - age
    os.utime(path, (old, old))
    scripted.append(text("hi"))
    done = project.nonoka("run", "hello")
    if accepted:
        assert done.returncode == 0, done.stderr
    else:
        refused(done, "empty (0 bytes) but not new")
        assert path.stat().st_size == 0
        scripted.clear()
