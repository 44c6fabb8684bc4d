"""Storage faults through a real bridge: a clear error, a clean exit, no data destroyed.

Each test damages the project database (or the disk under it) the way the world does —
a corrupt row, a truncated file, a file from a newer nonoka, a read-only directory, a
full disk — sends a turn through a real ``nonoka bridge`` process, and checks: one
``error`` event with a code and a message that says what to do, a ``finish``, exit 0 with
no traceback, and the session stored before still loads once the damage is undone.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from tests.support.bridge import BRIDGE, Bridge, assistant, chat, first_turn, one, user
from tests.support.stores import load_stored


def run_bridge(bridge: Bridge, request: dict[str, Any], *, prefix: Sequence[str] = (),
               preexec: Callable[[], None] | None = None) -> tuple[list[dict[str, Any]], str]:
    """One turn in a real bridge process (optionally under ``prefix``, or with limits)."""
    line = json.dumps({"cwd": str(bridge.project), **request}).encode() + b"\n"
    done = subprocess.run([*prefix, *BRIDGE], input=line, capture_output=True,
                          cwd=bridge.project, env=bridge.env, timeout=60, check=False,
                          preexec_fn=preexec)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    events = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
    assert events[-1]["type"] == "finish", events
    return events, stderr


def failed_with(events: list[dict[str, Any]], code: str, *advice: str) -> str:
    error = one(events, "error")
    assert error["code"] == code, error
    assert events[-1]["finish_reason"] == "error"
    message = str(error["message"])
    for word in advice:
        assert word in message, f"{word!r} not in {message!r}"
    return message


@pytest.fixture
def seeded(bridge: Bridge, scripted: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """A stored session and the history that continues it."""
    sid = str(first_turn(bridge, scripted)[0])
    return sid, [user("keep me"), assistant("stored answer"), user("next")]


def test_a_corrupt_snapshot_is_reported_and_left_alone(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]]) -> None:
    sid, history = seeded
    with sqlite3.connect(bridge.db) as db:
        db.execute("UPDATE checkpoints SET state_json = ? WHERE session_id = ?",
                   ('{"schema_version": 2, "status": {broken', sid))
    db.close()
    events, _ = run_bridge(bridge, chat(history, session_id=sid))
    message = failed_with(events, "session_corrupt", sid)
    assert "new conversation" in message or "backup" in message, message
    with sqlite3.connect(bridge.db) as db:
        (row,) = db.execute("SELECT state_json FROM checkpoints WHERE session_id = ?",
                            (sid,)).fetchone()
    db.close()
    assert row == '{"schema_version": 2, "status": {broken', "the corrupt row was rewritten"


def test_a_truncated_database_is_refused_untouched(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    sid, history = seeded
    backup = tmp_path / "backup.db"
    shutil.copy(bridge.db, backup)
    size = bridge.db.stat().st_size
    with bridge.db.open("r+b") as handle:
        handle.truncate(size // 2)
    truncated = bridge.db.read_bytes()
    events, _ = run_bridge(bridge, chat(history, session_id=sid))
    failed_with(events, "store_error", "truncated", "backup")
    assert bridge.db.read_bytes() == truncated, "the truncated file was written to"
    assert not Path(f"{bridge.db}-wal").exists()
    shutil.copy(backup, bridge.db)
    restored = load_stored(bridge.db, sid)
    assert restored is not None and restored.memory_entries[-1].content == "stored answer"


def test_a_database_from_a_newer_nonoka_is_refused_untouched(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]]) -> None:
    sid, history = seeded
    with sqlite3.connect(bridge.db) as db:
        db.execute("INSERT INTO nonoka_migrations (name, applied_at) VALUES (?, 0)",
                   ("m999_from_the_future",))
    db.close()
    before = bridge.db_digest()
    events, _ = run_bridge(bridge, chat(history, session_id=sid))
    failed_with(events, "store_error", "newer nonoka", "m999_from_the_future", "Upgrade")
    assert bridge.db_digest() == before, "a newer database was written to"
    with sqlite3.connect(bridge.db) as db:
        db.execute("DELETE FROM nonoka_migrations WHERE name = 'm999_from_the_future'")
    db.close()
    state = load_stored(bridge.db, sid)
    assert state is not None and state.memory_entries[-1].content == "stored answer"


def without_root_powers() -> list[str]:
    """A command prefix under which permissions apply: root ignores them otherwise."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        reason = "running as root and setpriv is missing: permissions cannot apply"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run this test; install util-linux)")
        pytest.skip(reason)
    caps = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, "--inh-caps=-all", f"--bounding-set={caps}", "--"]


def test_a_read_only_state_directory_is_a_clear_error(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]]) -> None:
    sid, history = seeded
    state_dir = bridge.db.parent
    os.chmod(state_dir, 0o500)
    try:
        before = bridge.db_digest()
        events, _ = run_bridge(bridge, chat(history, session_id=sid),
                               prefix=without_root_powers())
        failed_with(events, "store_error", "writable")
        assert bridge.db_digest() == before
    finally:
        os.chmod(state_dir, 0o700)
    state = load_stored(bridge.db, sid)
    assert state is not None and state.memory_entries[-1].content == "stored answer"


def test_a_read_only_workspace_is_a_clear_error(bridge: Bridge) -> None:
    """No ``.nonoka/`` yet and none can be made: ``invalid_cwd``, saying what to do."""
    os.chmod(bridge.project, 0o500)
    try:
        events, _ = run_bridge(bridge, chat([user("hi")]), prefix=without_root_powers())
        failed_with(events, "invalid_cwd", str(bridge.project), "writable")
    finally:
        os.chmod(bridge.project, 0o700)
    assert not bridge.db.parent.exists()


@pytest.mark.parametrize("limit", [4096, 32768], ids=["at-open", "mid-turn"])
def test_a_full_disk_is_a_clear_error_and_loses_nothing(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]], scripted: list[Any],
        limit: int) -> None:
    """``RLIMIT_FSIZE`` in the bridge process: every write that would grow a file past
    ``limit`` fails (EFBIG), as on a full disk — when the database is opened (4 KiB) or
    part way through the turn's writes (32 KiB)."""
    sid, history = seeded

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    scripted.append(text("stored now"))
    events, _ = run_bridge(bridge, chat(history, session_id=sid), preexec=small_files)
    failed_with(events, "store_error", "disk", "free some space")
    assert_retry_completes(bridge, sid, history, scripted)


def assert_retry_completes(bridge: Bridge, sid: str, history: list[dict[str, Any]],
                           scripted: list[Any]) -> None:
    """What was stored before still loads; the host's retry finishes the turn, once."""
    state = load_stored(bridge.db, sid)
    assert state is not None
    assert [e.content for e in state.memory_entries][:2] == ["keep me", "stored answer"]
    if not scripted:
        scripted.append(text("stored now"))
    events, _ = run_bridge(bridge, chat(history, session_id=sid))
    assert events[-1]["finish_reason"] == "stop", events
    final = load_stored(bridge.db, sid)
    assert final is not None
    assert [e.content for e in final.memory_entries] == [
        "keep me", "stored answer", "next", "stored now"]
    with sqlite3.connect(bridge.db) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root and mount); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here: {done.stderr.decode().strip()}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI runs as root and must run the full-disk test)")
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_really_full_disk_is_a_clear_error_and_loses_nothing(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]], scripted: list[Any],
        small_disk: Path) -> None:
    """A tmpfs filled to the last block: SQLite's own ENOSPC path ("disk is full")."""
    sid, history = seeded
    state_dir = bridge.db.parent
    shutil.copytree(state_dir, small_disk / "state")
    shutil.rmtree(state_dir)
    state_dir.mkdir()
    # Bound over the project's own .nonoka/ (a link there is refused, as it should be).
    mounted = subprocess.run(["mount", "--bind", str(small_disk / "state"), str(state_dir)],
                             capture_output=True, text=True, check=False)
    assert mounted.returncode == 0, mounted.stderr
    try:
        filler = small_disk / "filler"
        with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 512)
        scripted.append(text("stored now"))
        events, _ = run_bridge(bridge, chat(history, session_id=sid))
        failed_with(events, "store_error", "free some space")
        filler.unlink()
        assert_retry_completes(bridge, sid, history, scripted)
    finally:
        subprocess.run(["umount", "-l", str(state_dir)], check=False)


def test_the_cli_reports_broken_storage_without_a_traceback(
        bridge: Bridge, seeded: tuple[str, list[dict[str, Any]]]) -> None:
    """``nonoka run`` and ``sessions`` open the same database: the same faults, one line."""
    with sqlite3.connect(bridge.db) as db:
        db.execute("INSERT INTO nonoka_migrations (name, applied_at) VALUES ('m999_x', 0)")
    db.close()
    newer = bridge.db_digest()
    for args in (["run", "hello"], ["sessions", "list"]):
        done = subprocess.run([*BRIDGE[:-1], *args], cwd=bridge.project, env=bridge.env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 1, done.stderr
        assert "newer nonoka" in done.stderr and "Traceback" not in done.stderr
    assert bridge.db_digest() == newer
    with bridge.db.open("r+b") as handle:
        handle.truncate(bridge.db.stat().st_size // 2)
    done = subprocess.run([*BRIDGE[:-1], "run", "hello"], cwd=bridge.project, env=bridge.env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "truncated" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
