"""An answer a turn streamed but never stored shows at the end of the session page's
conversation, labelled as cut short, escaped and redacted as conversation text is; one
a stored answer followed does not."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import BrowserContext, expect

from nonoka.store.project import open_project_stores
from tests.ui.harness import UiServer, open_page, run_async, stored_session


def log(project: Path, sid: str, *events: tuple[str, dict[str, object]]) -> None:
    async def write() -> None:
        async with open_project_stores(project) as stores:
            for kind, data in events:
                await stores.events.append_event(sid, kind, data)

    run_async(write())


def piece(text: str) -> tuple[str, dict[str, object]]:
    return "partial_answer", {"text": text}


def test_the_session_page_ends_with_an_answer_cut_short(project: Path) -> None:
    cut = stored_session(project, "tell me a story", "a stored answer")
    log(project, cut, ("request", {"messages": 1}), piece("a copy of a stored answer"),
        ("model_call", {"model": "m"}), ("finish", {"finish_reason": "stop"}),
        ("request", {"messages": 3}), piece("Once upon a <script>alert(1)</script> **time**, "),
        piece("the key was Bearer abcd"), piece("efgh12345678 and"))  # then killed
    whole = stored_session(project, "tell me another", "a stored answer")
    log(project, whole, ("request", {"messages": 1}), piece("streamed, then stored whole"),
        ("model_call", {"model": "m"}), ("finish", {"finish_reason": "stop"}))
    ui = UiServer(project)
    try:
        status, _, body = ui.request(f"/s/{cut}", token=True)
        page = body.decode()
        assert status == 200
        block = page[page.index('<article class="entry entry-assistant interrupted'):]
        assert page.index("a stored answer") < page.index(block[:60])
        assert "interrupted: the process ended mid-answer" in block
        assert "Once upon a &lt;script&gt;alert(1)&lt;/script&gt; <strong>time</strong>" in block
        assert "the key was Bearer [redacted] and" in block  # a secret split across pieces
        assert "<script>alert" not in page and "efgh12345678" not in page
        assert "a copy of a stored answer" not in block

        status, _, body = ui.request(f"/s/{cut}/parts", token=True)  # a live page's refresh
        assert status == 200 and "the key was Bearer [redacted] and" in json.loads(
            body)["cut_short"]

        for path in (f"/s/{whole}", f"/s/{whole}/parts"):
            status, _, body = ui.request(path, token=True)
            assert status == 200 and b"interrupted" not in body.replace(
                b"interrupted</span>", b"") and b"entry-assistant interrupted" not in body
    finally:
        ui.stop()


def test_a_live_page_drops_the_block_once_the_answer_is_stored(
        browser: BrowserContext, project: Path) -> None:
    sid = stored_session(project, "tell me a story")
    log(project, sid, ("request", {"messages": 1}), piece("Once upon a time"))
    ui = UiServer(project)
    try:
        page = open_page(browser, ui, f"s/{sid}")
        expect(page.locator("#live")).to_have_class("live on")
        block = page.locator("#part-cut-short .entry.interrupted")
        expect(block).to_contain_text("Once upon a time")
        expect(block).to_contain_text("interrupted: the process ended mid-answer")
        log(project, sid, piece(", the end."), ("model_call", {"model": "m"}))
        expect(block).to_have_count(0, timeout=60_000)
        page.close()
    finally:
        ui.stop()
