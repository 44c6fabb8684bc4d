"""The check the screenshots must pass finds a damaged or cut PNG, on the pictures in docs/
(read only; copies are spoiled in a scratch directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.screens import DOCS, SHOTS, check_screenshot, png_size


@pytest.mark.parametrize("name", sorted(SHOTS))
def test_the_pictures_in_docs_pass(name: str) -> None:
    check_screenshot(DOCS / name)


def test_a_cut_picture_fails(tmp_path: Path) -> None:
    cut = tmp_path / "ui-sessions.png"
    cut.write_bytes((DOCS / "ui-sessions.png").read_bytes()[:-100])
    with pytest.raises(AssertionError, match="cut short"):
        png_size(cut)


def test_a_damaged_picture_fails(tmp_path: Path) -> None:
    data = bytearray((DOCS / "ui-session.png").read_bytes())
    data[26] ^= 0xFF  # inside the header chunk: its compression method
    spoiled = tmp_path / "ui-session.png"
    spoiled.write_bytes(bytes(data))
    with pytest.raises(AssertionError, match="damaged"):
        png_size(spoiled)


def test_another_size_or_no_picture_fails(tmp_path: Path) -> None:
    other = tmp_path / "ui-session.png"
    other.write_bytes((DOCS / "ui-sessions.png").read_bytes())
    with pytest.raises(AssertionError, match="viewport"):
        check_screenshot(other)
    text = tmp_path / "ui-sessions.png"
    text.write_text("not a picture")
    with pytest.raises(AssertionError, match="not a PNG"):
        png_size(text)
