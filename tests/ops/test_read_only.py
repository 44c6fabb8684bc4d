"""Reading a project whose database this process may not write.

The tests run as root, which file modes do not stop, so the read-only condition is made
with ``chattr +i`` (immutable: even root cannot create, change or remove a file in the
directory); each test first proves the condition holds. The ``nonoka`` commands run as
real processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nonoka.errors import StoreError
from nonoka.ops.export import export_jsonl
from nonoka.ops.maintenance import check, stats
from nonoka.ops.model import SearchQuery
from nonoka.ops.search import search
from nonoka.store.project import open_project_stores
from nonoka.store.sqlite.database import connect_read_only, open_read_only, writable
from tests.conformance.ops_suite import add_session
from tests.support.processes import run_nonoka


@contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """``chattr +i`` on ``paths`` for the block; proven to stop root from writing."""
    subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
    try:
        directory = next(p for p in paths if p.is_dir())
        with pytest.raises(PermissionError):
            (directory / "probe").write_text("x")
        assert not writable(directory / "sessions.db")
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=True)


def _project(tmp_path: Path) -> tuple[Path, list[str]]:
    """A project with two sessions whose entries were never indexed (no search ran)."""
    async def make() -> list[str]:
        async with open_project_stores(tmp_path) as stores:
            return [await add_session(stores, title="first", words="okapi stripes"),
                    await add_session(stores, title="second", words="zebra stripes")]

    ids = asyncio.run(make())
    return tmp_path / ".nonoka", ids


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_a_read_only_project_is_read_through_the_library(tmp_path: Path) -> None:
    state, ids = _project(tmp_path)
    db = state / "sessions.db"
    before = _listing(state)
    assert set(before) == {"sessions.db", ".gitignore"}  # no -wal: closed cleanly

    async def read() -> None:
        async with open_project_stores(tmp_path, read_only=True) as stores:
            hits = await search(stores, SearchQuery("stripes"))
            assert sorted(h.session_id for h in hits) == sorted(ids)
            assert [h.session_id for h in await search(stores, SearchQuery("okapi"))] == [
                ids[0]]
            assert len(await stores.index.list_sessions(10)) == 2
            out = tmp_path / "out.jsonl"
            with out.open("w") as handle:
                assert await export_jsonl(stores, None, handle) == 2
            assert await check(stores) == []
            assert (await stats(stores)).sessions == 2
            with pytest.raises(StoreError):
                await stores.index.delete_session_record(ids[0])

    with immutable(state, db):
        asyncio.run(read())
        assert _listing(state) == before


def test_the_commands_read_a_read_only_project(tmp_path: Path) -> None:
    state, ids = _project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "NONOKA_DATABASE_URL"}
    with immutable(state, state / "sessions.db"):
        listed = run_nonoka(tmp_path, "sessions", "list", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        assert {r["session_id"] for r in json.loads(listed.stdout)} == set(ids)
        shown = run_nonoka(tmp_path, "sessions", "show", ids[0][:8], "--json", env=env)
        assert shown.returncode == 0 and json.loads(shown.stdout)["session"]["title"] == "first"
        found = run_nonoka(tmp_path, "sessions", "search", "zebra", "--json", env=env)
        assert found.returncode == 0, found.stderr
        assert [h["session_id"] for h in json.loads(found.stdout)] == [ids[1]]
        exported = run_nonoka(tmp_path, "sessions", "export", ids[1], env=env)
        assert exported.returncode == 0 and '"type":"end_session"' in exported.stdout
        assert run_nonoka(tmp_path, "db", "stats", "--json", env=env).returncode == 0
        checked = run_nonoka(tmp_path, "db", "check", "--json", env=env)
        assert checked.returncode == 0 and json.loads(checked.stdout) == []
        deleted = run_nonoka(tmp_path, "sessions", "delete", ids[0], env=env)
        assert deleted.returncode == 1 and "nonoka:" in deleted.stderr
    after = run_nonoka(tmp_path, "sessions", "list", "--json", env=env)
    assert {r["session_id"] for r in json.loads(after.stdout)} == set(ids)


def _crashed_copy(tmp_path: Path, *, shm: bool = False) -> Path:
    """A database whose last commits are still in its ``-wal`` (copied while open), with
    or without its ``-shm``."""
    source = tmp_path / "live"
    source.mkdir()
    db = sqlite3.connect(source / "sessions.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    state = tmp_path / "copy"
    state.mkdir()
    for name in ("sessions.db", "sessions.db-wal", *(["sessions.db-shm"] if shm else [])):
        shutil.copy(source / name, state / name)
    db.close()
    return state


def test_commits_left_in_the_wal_are_never_silently_skipped(tmp_path: Path) -> None:
    state = _crashed_copy(tmp_path)
    with immutable(state, *state.iterdir()), pytest.raises(StoreError) as error:
        open_read_only(state / "sessions.db")
    assert "sessions.db-wal" in str(error.value) and "read-only" in str(error.value)


def test_commits_in_the_wal_are_read_when_the_shm_exists(tmp_path: Path) -> None:
    state = _crashed_copy(tmp_path, shm=True)
    with immutable(state, *state.iterdir()):
        db = connect_read_only(state / "sessions.db")
        assert db.execute("SELECT x FROM t").fetchall() == [(1,)]
        db.close()


def test_read_only_changes_nothing_and_refuses_an_old_schema(tmp_path: Path) -> None:
    """Without chattr: the read-only open itself neither migrates nor writes."""
    old = tmp_path / "old.db"
    db = sqlite3.connect(old)
    db.execute("CREATE TABLE nonoka_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    db.execute("INSERT INTO nonoka_migrations VALUES ('m001_checkpoint_tables', 0)")
    db.commit()
    db.close()
    content = old.read_bytes()
    with pytest.raises(StoreError, match="older nonoka and needs upgrading"):
        open_read_only(old)
    assert old.read_bytes() == content
