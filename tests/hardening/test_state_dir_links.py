"""``.nonoka/`` is nonoka's own directory, and nothing in it is followed out of it.

A repository decides what a checkout holds: ``.nonoka -> ../elsewhere`` committed in it
had nonoka write the conversations and a ``.gitignore`` into the link's target, and a
dangling ``.nonoka/retention.stamp`` link had ``sessions list`` create the file it
pointed at. Real git checkouts, real ``nonoka`` and ``nonoka bridge`` processes; every
refusal is one ``nonoka:`` line, and the link's target is left exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nonoka.errors import WorkspaceError
from nonoka.store.statedir import check_state_dir, ensure_state_dir, open_private
from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.support.bridge import Bridge, chat, user

DAY = 86400.0


def _git(cwd: Path, *args: str) -> None:
    assert shutil.which("git"), "git is needed: the attack is a committed link"
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
                        "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"})


def _tree(folder: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else b"")
                  for p in folder.rglob("*"))


def refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("nonoka:")]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def linked(project: Project, tmp_path: Path) -> Path:
    """A checkout of a repository that commits ``.nonoka -> ../elsewhere``; the target,
    which holds a file of the user's."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("the user's own file\n")
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", ".")
    (origin / ".nonoka").symlink_to("../elsewhere")
    (origin / "README").write_text("hello\n")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "a project")
    shutil.rmtree(project.path)
    _git(tmp_path, "clone", "-q", str(origin), str(project.path))
    assert (project.path / ".nonoka").is_symlink()
    return elsewhere


def test_a_committed_nonoka_link_is_refused_by_every_command(
        project: Project, linked: Path, scripted: list[ScriptItem]) -> None:
    before = _tree(linked)
    scripted.append(text("never asked"))
    for args in (("run", "hello"), ("sessions", "list"), ("sessions", "show", "abc"),
                 ("sessions", "search", "hello"), ("sessions", "export", "--all"),
                 ("opencode", "init", "--model", "openai:m")):
        refused(project.nonoka(*args, timeout=30), ".nonoka is a symbolic link",
                "../elsewhere", "remove the link")
    assert project.server.requests == []
    assert _tree(linked) == before  # no database, no .gitignore, nothing


def test_the_bridge_refuses_a_nonoka_link(project: Project, linked: Path) -> None:
    before = _tree(linked)
    bridge = Bridge(project.path, project.server)
    events = bridge.run(chat([user("hello")]))
    [error] = [e for e in events if e["type"] == "error"]
    assert error["code"] == "invalid_cwd" and "symbolic link" in error["message"], error
    assert _tree(linked) == before


@pytest.mark.parametrize("age", [0.0, 2 * DAY])
def test_a_dangling_retention_stamp_link_creates_nothing(
        project: Project, scripted: list[ScriptItem], tmp_path: Path, age: float) -> None:
    scripted.append(text("hi"))
    assert project.nonoka("run", "hello").returncode == 0
    state = project.path / ".nonoka"
    (state / "config.toml").write_text('[retention]\nolder_than = "30d"\n')
    target = tmp_path / "victim" / "created-by-nonoka"
    target.parent.mkdir()
    (state / "retention.stamp").symlink_to(target)
    then = time.time() - age
    os.utime(state / "retention.stamp", (then, then), follow_symlinks=False)
    done = project.nonoka("sessions", "list")
    assert done.returncode == 0 and "hello" in done.stdout, done.stderr
    assert not target.exists() and list(target.parent.iterdir()) == []
    assert (state / "retention.stamp").is_symlink()
    if age:  # due: the prune runs, the stamp is refused and said so
        assert "retention.stamp is a symbolic link" in done.stderr, done.stderr


def test_a_linked_config_is_refused_not_read(project: Project, tmp_path: Path) -> None:
    secret = tmp_path / "secret.toml"
    secret.write_text('model = "openai:from-elsewhere"\n')
    (project.path / ".nonoka").mkdir()
    (project.path / ".nonoka" / "config.toml").symlink_to(secret)
    env = {k: v for k, v in project.env.items() if k != "NONOKA_MODEL"}
    refused(project.nonoka("run", "hello", env=env), "config.toml is a symbolic link")
    assert project.server.requests == []


def test_links_inside_are_never_followed(tmp_path: Path) -> None:
    state = tmp_path / ".nonoka"
    state.mkdir()
    (state / "stamp").symlink_to(tmp_path / "victim")
    with pytest.raises(WorkspaceError, match="stamp is a symbolic link"):
        open_private(state, "stamp", os.O_WRONLY | os.O_CREAT)
    assert not (tmp_path / "victim").exists()
    (state / ".gitignore").symlink_to(tmp_path / "victim")
    ensure_state_dir(state)  # a .gitignore is there: left as it is, never written through
    assert not (tmp_path / "victim").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkspaceError, match="is not a directory"):
        ensure_state_dir(tmp_path / "file")


def test_another_users_directory_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        theirs = tmp_path / ".nonoka"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
    else:
        theirs = Path("/")  # root's, whoever runs the tests
    with pytest.raises(WorkspaceError, match="belongs to another user"):
        check_state_dir(theirs)
