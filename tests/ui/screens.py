"""The pictures of ``nonoka ui`` that docs/ shows (``docs/ui-sessions.png``,
``docs/ui-session.png``).

The browser test takes them into a scratch directory and checks them, so a test run never
changes the checkout. Refreshing the copies in docs/ is a separate command, run from the
checkout's root with the ui extra and Debian's Chromium::

    .venv/bin/python -m tests.ui.screens

It fills a scratch project with real bridge turns, as the tests do, and photographs the
same two pages into docs/.
"""

from __future__ import annotations

import shutil
import struct
import sys
import tempfile
import zlib
from pathlib import Path

from playwright.sync_api import BrowserContext, expect

from tests.ui.fill import Filled, fill
from tests.ui.harness import UiServer, chromium

SHOTS = {"ui-sessions.png": (1360, 760), "ui-session.png": (1360, 1000)}
"""Each picture's file name and viewport (width, height)."""
MIN_BYTES = 20_000
"""Smaller than this, a page of sessions or a plan graph did not render."""
SIGNATURE = b"\x89PNG\r\n\x1a\n"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def take_screenshots(browser: BrowserContext, ui: UiServer, filled: Filled,
                     directory: Path) -> list[Path]:
    """The sessions page and the plan session's page, as PNG files in ``directory``."""
    page = browser.new_page()
    try:
        page.goto(ui.url)
        width, height = SHOTS["ui-sessions.png"]
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(directory / "ui-sessions.png"))
        page.goto(ui.base + f"s/{filled.ids['plan']}#plan")
        expect(page.locator("#plan-graph")).to_be_visible()
        width, height = SHOTS["ui-session.png"]
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(directory / "ui-session.png"))
    finally:
        page.close()
    return [directory / name for name in SHOTS]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a complete PNG file; ``AssertionError`` naming what is wrong
    when it is not one (bad signature, a chunk whose CRC fails, no image data, no end)."""
    data = path.read_bytes()
    assert data.startswith(SIGNATURE), f"{path.name} is not a PNG file"
    at, size = len(SIGNATURE), (0, 0)
    kinds: list[bytes] = []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4].rjust(4, b"\0"))
        assert at + 12 + length <= len(data), f"{path.name} is cut short"
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path.name}: chunk {kind!r} is damaged"
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            size = (width, height)
        kinds.append(kind)
        at += 12 + length
    assert kinds[:1] == [b"IHDR"] and b"IDAT" in kinds and kinds[-1:] == [b"IEND"], (
        f"{path.name}: chunks {kinds!r} do not make an image")
    return size


def check_screenshot(path: Path) -> None:
    """``path`` is a whole PNG of its page's viewport, big enough to show the page."""
    assert png_size(path) == SHOTS[path.name], f"{path.name}: not the page's viewport"
    assert path.stat().st_size > MIN_BYTES, f"{path.name} looks empty"


def main() -> None:
    """Refresh the pictures in docs/ from a freshly filled scratch project; docs/ is only
    written once both pictures are taken and checked."""
    with tempfile.TemporaryDirectory(prefix="nonoka-screenshots-") as scratch:
        try:
            filled = fill(Path(scratch) / "project")
            server = UiServer(filled.project)
            try:
                with chromium() as browser:
                    shots = take_screenshots(browser, server, filled, Path(scratch))
            finally:
                server.stop()
            for shot in shots:
                check_screenshot(shot)
        except AssertionError as exc:
            sys.exit(f"screenshots: {exc}; docs/ was left as it was")
        for shot in shots:
            shutil.copyfile(shot, DOCS / shot.name)
            print(f"wrote docs/{shot.name} ({shot.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
