"""Images in ``nonoka ui``: served by digest (allowed image types only, never sniffed,
behind the token) and shown as ``<img>`` under the page's content security policy."""

from __future__ import annotations

import base64
import html
import re
import struct
import zlib
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, expect

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState, SessionStatus
from nonoka.store.media import digest_of
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from tests.ui.harness import UiServer, open_page, run_async

SID = "1a6e0000-0000-4000-8000-000000000001"


def png(width: int, height: int) -> bytes:
    """A real PNG: opaque red pixels."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


IMAGE = png(40, 30)
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
PDF = b"%PDF-1.4 not really"


def part(data: bytes, media_type: str, name: str) -> dict[str, Any]:
    return {"type": "file", "media_type": media_type, "data": base64.b64encode(data).decode(),
            "filename": name}


def project_with_files(path: Path) -> Path:
    path.mkdir()
    look = MemoryEntry.make("user", "what is wrong here?", parts=[
        {"type": "text", "text": "what is wrong here?"},
        part(IMAGE, "image/png", 'red "<b>shot</b>".png'), part(SVG, "image/svg+xml", "logo.svg"),
        part(PDF, "application/pdf", "spec.pdf")])

    async def save() -> None:
        async with open_project_stores(path) as stores:
            await stores.checkpoints.save_session(SessionState(
                session_id=SID, status=SessionStatus.COMPLETED,
                memory_entries=[look, MemoryEntry.assistant("it is all red")]))
            await stores.index.upsert_session(SessionRecord(
                session_id=SID, title="a red screenshot", status="completed",
                message_count=2))

    run_async(save())
    return path


def test_an_image_is_served_by_digest_and_nothing_else_is(tmp_path: Path) -> None:
    ui = UiServer(project_with_files(tmp_path / "project"))
    try:
        path = f"/media/{digest_of(IMAGE)}"
        status, headers, _ = ui.request(path)
        assert status == 403  # the token, as for every other route
        status, headers, body = ui.request(path, token=True)
        assert status == 200 and body == IMAGE
        assert headers["content-type"] == "image/png"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["content-disposition"].startswith("inline; filename=")
        assert "default-src 'none'" in headers["content-security-policy"]
        for refused in (digest_of(SVG), digest_of(PDF), digest_of(b"never stored"),
                        "sha256:../../etc/passwd", "not-a-digest"):
            status, headers, body = ui.request(f"/media/{refused}", token=True)
            assert status == 404, refused
            assert headers["content-type"].startswith("text/plain")
        status, _, page = ui.request(f"/s/{SID}", token=True)
        html = page.decode()
        assert status == 200
        assert f'<img data-media="/media/{digest_of(IMAGE)}?type=image%2Fpng"' in html
        assert "[image red &#34;&lt;b&gt;shot&lt;/b&gt;&#34;.png, image/png, " in html
        assert "[image logo.svg, image/svg+xml," in html and "<script>alert" not in html
        assert "[file spec.pdf, application/pdf, 19 B]" in html
        assert base64.b64encode(IMAGE).decode()[:40] not in html
    finally:
        ui.stop()


def test_the_page_shows_the_image_under_its_policy(browser: BrowserContext,
                                                    tmp_path: Path) -> None:
    ui = UiServer(project_with_files(tmp_path / "project"))
    try:
        page = browser.new_page()
        blocked: list[str] = []
        page.on("console", lambda message: blocked.append(message.text)
                if "Content Security Policy" in message.text else None)
        page.goto(ui.url)
        page.goto(ui.base + f"s/{SID}")
        image = page.locator("#conversation figure.file img")
        expect(image).to_have_count(1)
        image.scroll_into_view_if_needed()
        page.wait_for_function("() => { const img = document.querySelector("
                               "'#conversation figure.file img'); return img.complete && "
                               "img.src.startsWith('blob:') && img.naturalWidth > 0; }")
        assert image.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [40, 30]
        expect(page.locator("#conversation .file-named")).to_have_count(2)
        assert blocked == []
        page.close()
    finally:
        ui.stop()


def test_the_same_bytes_under_two_media_types_show_as_the_image(browser: BrowserContext,
                                                                tmp_path: Path) -> None:
    """The bytes are stored once, with the first media type they came with: a screenshot
    first attached as ``application/octet-stream``, then sent as ``image/png``, was
    served under the first (refused: a broken image). The page asks for the part's type."""
    path = tmp_path / "project"
    path.mkdir()
    entries = [MemoryEntry.make("user", "the raw file", parts=[
                   {"type": "text", "text": "the raw file"},
                   part(IMAGE, "application/octet-stream", "shot.bin")]),
               MemoryEntry.assistant("got it"),
               MemoryEntry.make("user", "and as a picture", parts=[
                   {"type": "text", "text": "and as a picture"},
                   part(IMAGE, "image/png", "shot.png")]),
               MemoryEntry.assistant("it is all red")]

    async def save() -> None:  # two turns: the first stores the file
        async with open_project_stores(path) as stores:
            await stores.checkpoints.save_session(SessionState(
                session_id=SID, status=SessionStatus.COMPLETED, memory_entries=entries[:2]))
            first = await stores.checkpoints.load_session(SID)
            assert first is not None
            await stores.checkpoints.save_session(first.model_copy(
                update={"memory_entries": entries}))
            await stores.index.upsert_session(SessionRecord(
                session_id=SID, title="one file, two types", status="completed",
                message_count=len(entries)))

    run_async(save())
    ui = UiServer(path)
    try:
        status, _, page = ui.request(f"/s/{SID}", token=True)
        assert status == 200
        shown = re.findall(r'<img data-media="([^"]+)"', page.decode())
        assert len(shown) == 1 and shown[0].startswith(f"/media/{digest_of(IMAGE)}")
        status, headers, body = ui.request(html.unescape(shown[0]), token=True)
        assert (status, headers["content-type"], body) == (200, "image/png", IMAGE)
        status, _, _ = ui.request(f"/media/{digest_of(IMAGE)}", token=True)
        assert status == 404  # as stored: not an image type
        status, _, _ = ui.request(f"/media/{digest_of(IMAGE)}?type=image/svg%2Bxml",
                                  token=True)
        assert status == 404  # never a type a browser would run
        tab = open_page(browser, ui, f"s/{SID}")
        expect(tab.locator("#conversation figure.file img")).to_have_count(1)
        tab.locator("#conversation figure.file img").scroll_into_view_if_needed()
        tab.wait_for_function("() => { const img = document.querySelector("
                              "'#conversation figure.file img'); return img.complete && "
                              "img.src.startsWith('blob:') && img.naturalWidth > 0; }")
        tab.close()
    finally:
        ui.stop()
