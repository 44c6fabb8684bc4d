"""``.nonoka/`` stays out of git, and so out of a host's git-based snapshots (OpenCode's undo)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nonoka.store.project import open_project_stores
from nonoka.store.statedir import GITIGNORE_TEXT


def _git(project: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True,
                          check=True)
    return done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed: OpenCode's snapshots are git")
    _git(tmp_path, "init", "-q", ".")
    return tmp_path


async def test_opening_the_project_writes_a_gitignore_that_keeps_the_store_out(
        project: Path) -> None:
    stores = open_project_stores(project)
    await stores.close()
    state = project / ".nonoka"
    assert (state / ".gitignore").read_text(encoding="utf-8") == GITIGNORE_TEXT
    assert (state / "sessions.db").is_file()
    assert os.stat(state).st_mode & 0o777 == 0o700
    assert os.stat(state / ".gitignore").st_mode & 0o777 == 0o600
    # What OpenCode's snapshot asks git (check-ignore --no-index): every file is ignored.
    (project / "notes.txt").write_text("mine\n", encoding="utf-8")
    _git(project, "add", "--all")
    staged = _git(project, "diff", "--cached", "--name-only").split()
    assert staged == ["notes.txt"], staged
    ignored = _git(project, "check-ignore", "--no-index", ".nonoka/sessions.db").strip()
    assert ignored == ".nonoka/sessions.db"


async def test_an_existing_folder_gets_the_gitignore_on_the_next_open(project: Path) -> None:
    state = project / ".nonoka"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    stores = open_project_stores(project)
    await stores.close()
    assert (state / ".gitignore").read_text(encoding="utf-8") == GITIGNORE_TEXT
    assert os.stat(state).st_mode & 0o777 == 0o755  # an existing folder keeps its mode
    (state / ".gitignore").write_text("sessions.db\n", encoding="utf-8")
    stores = open_project_stores(project)
    await stores.close()
    assert (state / ".gitignore").read_text(encoding="utf-8") == "sessions.db\n"  # never replaced
