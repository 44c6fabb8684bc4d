"""The provider's session id file: what is read, what is ignored, and how it is written."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from nonoka.errors import ConfigurationError
from nonoka.provider import (
    ID_FILE_NAME,
    NonokaProvider,
    clear_session_id,
    id_file_path,
    is_plausible_session_id,
    read_session_id,
    write_session_id,
)
from tests.support.files import mode

SID = "6f1c2a9e-3b7d-4e55-9d0a-2c8b1f4e7a10"


def test_the_file_lives_in_the_workspace_state_dir(tmp_path: Path) -> None:
    assert id_file_path(tmp_path) == tmp_path / ".nonoka" / ID_FILE_NAME
    assert ID_FILE_NAME == "provider-session.id"


def test_a_missing_file_means_no_id(tmp_path: Path) -> None:
    assert read_session_id(id_file_path(tmp_path)) is None


def test_write_then_read_round_trips_as_plain_text(tmp_path: Path) -> None:
    path = id_file_path(tmp_path)
    write_session_id(path, SID)
    assert path.read_bytes() == SID.encode() + b"\n"
    assert read_session_id(path) == SID


@pytest.mark.parametrize("content", [SID, SID + "\n", SID + "\r\n", f"  {SID}\n\n"])
def test_surrounding_whitespace_is_allowed(tmp_path: Path, content: str) -> None:
    path = tmp_path / "id"
    path.write_text(content)
    assert read_session_id(path) == SID


def test_an_empty_file_means_no_id_without_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "id"
    path.write_text("\n")
    assert read_session_id(path) is None
    assert not caplog.records


@pytest.mark.parametrize("content", [
    b"../../etc/passwd",
    b"two ids\n",
    SID.encode() + b"\n" + SID.encode(),
    b"-starts-with-a-dash",
    b"a" * 129,
    b"x" * 5000,
    b"\xff\xfe\x00binary",
    b'{"session_id": "abc"}',
])
def test_implausible_content_is_ignored_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes) -> None:
    path = tmp_path / "id"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="nonoka.provider"):
        assert read_session_id(path) is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert str(path) in caplog.records[0].getMessage()


def test_an_unreadable_path_is_ignored_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "id"
    path.mkdir()  # a directory where the file should be: reading fails
    assert read_session_id(path) is None
    assert "cannot read" in caplog.text


def test_plausible_ids_follow_the_session_id_pattern() -> None:
    assert is_plausible_session_id(SID)
    assert is_plausible_session_id("a")
    assert is_plausible_session_id("a" * 128)
    assert not is_plausible_session_id("a" * 129)
    assert not is_plausible_session_id(SID + "\n")
    assert not is_plausible_session_id("")
    assert not is_plausible_session_id(None)


def test_writing_an_implausible_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a session id"):
        write_session_id(id_file_path(tmp_path), "bad id\n")
    assert not (tmp_path / ".nonoka").exists()


def test_the_file_is_owner_only_and_its_new_dir_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive umask must not loosen the modes
    try:
        write_session_id(id_file_path(tmp_path), SID)
    finally:
        os.umask(old)
    assert mode(tmp_path / ".nonoka") == 0o700
    assert mode(id_file_path(tmp_path)) == 0o600


def test_an_existing_state_dir_is_left_as_it_is(tmp_path: Path) -> None:
    """The bridge shares ``.nonoka/``; the provider does not change its mode."""
    (tmp_path / ".nonoka").mkdir(mode=0o755)
    os.chmod(tmp_path / ".nonoka", 0o755)
    write_session_id(id_file_path(tmp_path), SID)
    assert mode(tmp_path / ".nonoka") == 0o755
    assert mode(id_file_path(tmp_path)) == 0o600


def test_overwriting_replaces_the_file_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = id_file_path(tmp_path)
    write_session_id(path, "first")
    before = path.stat().st_ino
    write_session_id(path, SID)
    assert path.read_text() == SID + "\n"
    assert path.stat().st_ino != before  # a new file renamed in, not rewritten in place
    assert sorted(p.name for p in path.parent.iterdir()) == [ID_FILE_NAME]


def test_a_failed_write_keeps_the_old_id_and_cleans_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: the rename fails, as after a crash between write and rename."""
    path = id_file_path(tmp_path)
    write_session_id(path, "old-id")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_session_id(path, SID)
    monkeypatch.undo()
    assert read_session_id(path) == "old-id"
    assert sorted(p.name for p in path.parent.iterdir()) == [ID_FILE_NAME]


def test_clear_removes_the_file_and_tolerates_its_absence(tmp_path: Path) -> None:
    path = id_file_path(tmp_path)
    write_session_id(path, SID)
    clear_session_id(path)
    assert not path.exists()
    clear_session_id(path)


def test_the_provider_reads_the_file_when_constructed(tmp_path: Path) -> None:
    write_session_id(id_file_path(tmp_path), SID)
    assert NonokaProvider(tmp_path).session_id == SID


def test_the_provider_ignores_a_damaged_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    id_file_path(tmp_path).parent.mkdir()
    id_file_path(tmp_path).write_text("not a session id at all\n")
    assert NonokaProvider(tmp_path).session_id is None
    assert "not a plausible session id" in caplog.text
