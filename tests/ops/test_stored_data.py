"""No traceback from any command on any stored data: rows edited by hand (SQLite keeps
any value in any column) or left by an older nonoka are a one-line ``nonoka: ...; ...``
error naming the session and what to do, or a readable degraded output. Real commands,
real files; the full disk is a real (small) tmpfs."""

from __future__ import annotations

import asyncio
import errno
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from tests.cli.conftest import Project
from tests.conformance.ops_suite import add_session


@pytest.fixture
def stored(project: Project) -> tuple[Project, str, Path]:
    """A project holding one session (with events and an index row); the session's id
    and the database file."""
    async def make() -> str:
        (project.path / ".nonoka").mkdir()
        async with open_project_stores(project.path) as stores:
            return await add_session(stores, title="kept", words="okapi")

    sid = asyncio.run(make())
    return project, sid, project.path / ".nonoka/sessions.db"


def edit(database: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(database) as db:
        db.execute(sql, args)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The command failed with exactly one ``nonoka: ...`` line on stderr."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nonoka: "), done.stderr
    return lines[0]


def test_export_of_an_index_row_without_a_checkpoint(
        stored: tuple[Project, str, Path]) -> None:
    project, _, _ = stored

    async def ghost() -> None:
        async with open_project_stores(project.path) as stores:
            await stores.index.upsert_session(SessionRecord(session_id="ghost-1",
                                                            title="never saved"))

    asyncio.run(ghost())
    error = one_line_error(project.nonoka("sessions", "export", "ghost-1"))
    assert error.startswith("nonoka: no conversation is stored for ghost-1 (")
    assert error.endswith("remove the row with `nonoka sessions delete ghost-1`")
    assert project.nonoka("sessions", "export", "--all").returncode == 0  # left out


@pytest.mark.parametrize(("column", "value", "says"), [
    ("revision", "abc", "its stored revision is 'abc', not an integer"),
    ("updated_at", float("inf"), "its stored updated_at is inf, not a finite number"),
    ("entry_count", 99, "8 entry rows are stored where its checkpoint counts 99"),
])
def test_export_of_a_damaged_checkpoint(stored: tuple[Project, str, Path], column: str,
                                        value: object, says: str) -> None:
    project, sid, database = stored
    edit(database, f"UPDATE checkpoints SET {column} = ? WHERE session_id = ?", value, sid)
    for command in (("sessions", "export", sid), ("sessions", "export", "--all", "-o",
                                                  str(project.path / "out.jsonl"))):
        error = one_line_error(project.nonoka(*command))
        assert error.startswith(f"nonoka: session {sid}: {says}; nothing was changed. Fix "
                                "or delete that row (`nonoka db check` lists")
    assert not list(project.path.glob("out.jsonl*"))
    checked = project.nonoka("db", "check", "--json")
    assert checked.returncode == 1
    assert ("unexportable", sid) in {(f["kind"], f["session_id"])
                                     for f in json.loads(checked.stdout)}
    copied = project.nonoka("db", "copy", "--to", f"sqlite:///{project.path}/copy.db")
    assert copied.returncode == 1 and "Traceback" not in copied.stderr
    assert f"damaged: {sid}: session {sid}: {says}" in copied.stderr


def test_show_with_damaged_events_and_times(stored: tuple[Project, str, Path]) -> None:
    project, sid, database = stored
    edit(database, "UPDATE events SET data_json = '[1]' WHERE session_id = ? AND seq = 1", sid)
    edit(database, "UPDATE events SET at = 'noon', data_json = '{\"cost_usd\": \"lots\"}' "
         "WHERE session_id = ? AND seq = 2", sid)
    edit(database, "UPDATE cli_sessions SET last_active = 1e300, created_at = -1e300 "
         "WHERE session_id = ?", sid)
    shown = project.nonoka("sessions", "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert "damaged" in shown.stdout and '"stored": "[1]"' in shown.stdout
    assert '{"cost_usd": "lots"}' in shown.stdout and "(not a time)" in shown.stdout
    events = json.loads(project.nonoka("sessions", "show", sid, "--json").stdout)["events"]
    assert events[0]["kind"] == "damaged" and events[0]["data"] == {"kind": "request",
                                                                    "stored": "[1]"}
    assert events[1]["at"] == 0.0
    assert project.nonoka("sessions", "list").returncode == 0
    markdown = project.nonoka("sessions", "export", sid, "--format", "markdown")
    assert markdown.returncode == 0 and "(not a time)" in markdown.stdout


def test_a_loop_of_parents_is_listed(stored: tuple[Project, str, Path]) -> None:
    project, sid, _ = stored

    async def loop() -> str:
        async with open_project_stores(project.path) as stores:
            other = await add_session(stores, title="other", metadata={"forked_from": sid})
            record = await stores.index.get_session(sid)
            assert record is not None
            await stores.index.upsert_session(record.model_copy(update={
                "metadata": {**record.metadata, "forked_from": other}}))
            return other

    other = asyncio.run(loop())
    tree = project.nonoka("sessions", "list", "--tree")
    assert tree.returncode == 0, tree.stderr
    assert [line.replace("└─", "").split()[0] for line in tree.stdout.splitlines()] == [
        other[:8], sid[:8]]


def test_a_damaged_entry_shows_in_markdown(stored: tuple[Project, str, Path]) -> None:
    project, sid, database = stored
    edit(database, "UPDATE session_entries SET entry_json = 'not json' WHERE session_id = ? "
         "AND seq = 1", sid)
    markdown = project.nonoka("sessions", "export", sid, "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert "## Entry 1 (stored damaged, shown as stored)\n\n```\nnot json\n```" in \
        markdown.stdout
    assert "## User\n\nsearch the repo" in markdown.stdout


def fill(path: Path) -> None:
    """Write to ``path`` until the disk is full."""
    with path.open("wb", buffering=0) as out:
        for _ in range(1024):
            try:
                out.write(b"x" * 1024)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    raise AssertionError(f"{path} never filled its disk")


def test_export_onto_a_full_disk(stored: tuple[Project, str, Path], tmp_path: Path) -> None:
    project, _, _ = stored
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        fill(disk / "filler")
        target = disk / "backup.jsonl"
        error = one_line_error(project.nonoka("sessions", "export", "--all", "-o",
                                              str(target)))
        assert error == (f"nonoka: writing {target} failed: No space left on device; it was "
                         "not written (free some space, or give another path with -o)")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)
