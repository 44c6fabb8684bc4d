"""A first open on a full disk leaves no empty database behind: the error says to free
space and try again, and trying again then works."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nonoka.errors import NonokaError
from nonoka.store.sqlite import SQLiteCheckpointStore


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def _fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError:
        pass  # the disk is full
    finally:
        os.close(fd)


async def test_a_first_open_on_a_full_disk_leaves_no_empty_file(small_disk: Path) -> None:
    (small_disk / ".nonoka").mkdir()
    filler = small_disk / "filler"
    _fill(filler)
    db = small_disk / ".nonoka" / "sessions.db"
    with pytest.raises((NonokaError, OSError)):
        SQLiteCheckpointStore(db)
    assert not db.exists(), "an empty database was left behind"
    filler.unlink()
    store = SQLiteCheckpointStore(db)  # with room again, it simply works
    try:
        assert await store.load_session("nothing-yet") is None
    finally:
        await store.close()
