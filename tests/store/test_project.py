"""Opening a project's stores from a database URL: the forms, the modes, the cost."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nonoka.errors import ConfigurationError, StoreError
from nonoka.state.session_state import SessionState
from nonoka.store.memory import MemoryCheckpointStore
from nonoka.store.memory.records import MemoryRecordStore
from nonoka.store.project import (
    ProjectStores,
    database_url_from_env,
    open_project_stores,
)
from nonoka.store.records import SessionRecord
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.records import SQLiteRecordStore


def _listing(folder: Path) -> list[Path]:
    return list(folder.iterdir())


async def _use(stores: ProjectStores) -> None:
    """Write through all three stores and read it back."""
    await stores.checkpoints.save_session(SessionState(session_id="s1"))
    await stores.index.upsert_session(SessionRecord(session_id="s1", title="t"))
    await stores.events.append_event("s1", "request", {"n": 1})
    assert await stores.checkpoints.load_session("s1") is not None
    assert [r.session_id for r in await stores.index.list_sessions()] == ["s1"]
    assert [e.seq for e in await stores.events.list_events("s1")] == [1]
    assert await stores.leases.acquire_lease("s1", "me", 5)
    assert not await stores.leases.acquire_lease("s1", "you", 5)
    assert await stores.leases.release_lease("s1", "me")


@pytest.mark.usefixtures("open_umask")
async def test_default_is_a_private_file_in_the_project(tmp_path: Path) -> None:
    stores = open_project_stores(tmp_path)
    try:
        path = tmp_path / ".nonoka" / "sessions.db"
        assert stores.url == f"sqlite://{path}"
        assert isinstance(stores.checkpoints, SQLiteCheckpointStore)
        assert isinstance(stores.index, SQLiteRecordStore)
        assert stores.events is stores.index  # one object, one connection for the file
        assert stores.index.connection is stores.checkpoints.connection
        await _use(stores)
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    finally:
        await stores.close()
    await stores.close()  # idempotent
    async with open_project_stores(tmp_path) as again:  # the same file, reopened
        assert await again.checkpoints.load_session("s1") is not None
        assert (await again.index.get_session("s1")) is not None


async def test_existing_project_folder_mode_is_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / ".nonoka"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "provider-session.id").write_text("abc\n")
    async with open_project_stores(tmp_path) as stores:
        await _use(stores)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert (folder / "provider-session.id").read_text() == "abc\n"


def test_missing_project_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        open_project_stores(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize(
    ("url", "relative"),
    [
        ("sqlite://{abs}/a.db", "a.db"),  # {abs} starts with "/": sqlite:///tmp/...
        ("sqlite:///{abs}/b.db", "b.db"),
        ("//{abs}/k.db", "k.db"),
        ("sqlite:{abs}/c.db", "c.db"),
        ("sqlite:rel/d.db", "project/rel/d.db"),
        ("SQLite:e.db", "project/e.db"),
        ("{abs}/f.db", "f.db"),
        ("g.db", "project/g.db"),
        ("./dir:with:colons/h.db", "project/dir:with:colons/h.db"),
        ("  sqlite:i.db  ", "project/i.db"),
        ("project/../j.db", "project/j.db"),
    ],
)
async def test_sqlite_url_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, relative: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # relative means relative to the project, not to us
    stores = open_project_stores(project, url.format(abs=tmp_path))
    try:
        await _use(stores)
    finally:
        await stores.close()
    expected = tmp_path / relative
    assert expected.is_file()
    assert stores.url == f"sqlite://{expected}"
    assert _listing(elsewhere) == []
    # The reported URL opens the same file.
    async with open_project_stores(elsewhere, stores.url) as again:
        assert await again.checkpoints.load_session("s1") is not None


async def test_memory_url(tmp_path: Path) -> None:
    async with open_project_stores(tmp_path, "memory:") as stores:
        assert stores.url == "memory:"
        assert isinstance(stores.checkpoints, MemoryCheckpointStore)
        assert isinstance(stores.index, MemoryRecordStore)
        assert stores.events is stores.index
        await _use(stores)
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("url", ["postgresql://me:s3cret@db.example/nonoka",
                                 "postgres://me:s3cret@db.example/nonoka"])
def test_postgresql_needs_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    for name in [m for m in sys.modules if m.startswith(("psycopg", "nonoka.store.postgres"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were not installed
    with pytest.raises(ConfigurationError, match=r"pip install '\.\[postgres\]'") as info:
        open_project_stores(tmp_path, url)
    assert "s3cret" not in str(info.value)
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("url", ["postgresql://me:s3cret@db.example/nonoka",
                                 "postgres://me:s3cret@db.example:6543/nonoka"])
async def test_postgresql_opens_lazily(tmp_path: Path, url: str) -> None:
    """Opening does no I/O (the server does not even exist); closing unused is fine."""
    stores = open_project_stores(tmp_path, url)
    await stores.close()
    assert stores.url.startswith("postgresql://me@db.example")
    assert "s3cret" not in stores.url
    assert _listing(tmp_path) == []


async def test_postgresql_url(tmp_path: Path) -> None:
    from nonoka.store.postgres import PostgresCheckpointStore
    from nonoka.store.postgres.records import PostgresRecordStore
    from tests import pg

    with pg.temp_schema() as schema:
        async with open_project_stores(tmp_path, pg.schema_url(schema)) as stores:
            assert isinstance(stores.checkpoints, PostgresCheckpointStore)
            assert isinstance(stores.index, PostgresRecordStore)
            assert stores.events is stores.index
            assert stores.index.database is stores.checkpoints.database  # one pool
            await _use(stores)
        async with open_project_stores(tmp_path, pg.schema_url(schema)) as again:
            assert await again.checkpoints.load_session("s1") is not None
        with pg.connect(schema) as raw:
            (count,) = raw.execute("SELECT count(*) FROM checkpoints").fetchone() or (0,)
        assert count == 1
    assert _listing(tmp_path) == []


async def test_postgresql_server_down_is_a_store_error(tmp_path: Path) -> None:
    stores = open_project_stores(tmp_path, "postgresql://me:s3cret@127.0.0.1:1/nonoka")
    try:
        with pytest.raises(StoreError, match=r"postgresql://me@127.0.0.1:1/nonoka") as info:
            await stores.checkpoints.load_session("s1")
        assert "s3cret" not in str(info.value)
    finally:
        await stores.close()


@pytest.mark.parametrize(
    "url",
    ["mysql://me:s3cret@db/x", "memory:named", "memory://", "sqlite://relative.db", "sqlite:",
     "sqlite://", "", "   ", "file:x.db"],
)
def test_unknown_or_malformed_urls_name_the_accepted_forms(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"sqlite:///") as info:
        open_project_stores(tmp_path, url)
    assert "s3cret" not in str(info.value)
    assert _listing(tmp_path) == []


def test_database_url_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NONOKA_DATABASE_URL", raising=False)
    assert database_url_from_env() is None
    monkeypatch.setenv("NONOKA_DATABASE_URL", "   ")
    assert database_url_from_env() is None
    monkeypatch.setenv("NONOKA_DATABASE_URL", " sqlite:x.db\n")
    assert database_url_from_env() == "sqlite:x.db"


LAZY = """
import sys
import nonoka.store.project as project
heavy = ("sqlite3", "_sqlite3", "nonoka.store.sqlite", "nonoka.store.sqlite.database",
         "nonoka.store.sqlite.migrations", "nonoka.store.sqlite.records", "nonoka.store.memory",
         "nonoka.store.memory.records", "nonoka.store.records", "psycopg")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, f"importing nonoka.store.project loaded {loaded}"
import asyncio
async def main():
    async with project.open_project_stores(project.Path(sys.argv[1]), "memory:"):
        pass
asyncio.run(main())
assert "sqlite3" not in sys.modules, "the memory engine loaded sqlite3"
"""


def test_importing_opens_no_engine(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", LAZY, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
