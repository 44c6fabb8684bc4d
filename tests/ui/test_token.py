"""The access token: never sent to another port, never on a command line, usable by
scripts; a browser without it sees no data."""

from __future__ import annotations

import html
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from playwright.sync_api import BrowserContext, expect

from nonoka.ui.security import CODE_SECONDS, TokenGuard
from tests.ui.harness import UiServer, open_page, run_async, stored_session

KEY = "nonoka-ui-token"


@dataclass
class Heard:
    """What a program listening on another local port was sent."""

    port: int = 0
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)


@contextmanager
def listener() -> Iterator[Heard]:
    """A real HTTP server on another port of 127.0.0.1 that writes down every request."""
    heard = Heard()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.requests.append((self.path, dict(self.headers.items())))
            body = b"<!doctype html><title>elsewhere</title><p>another program</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    heard.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield heard
    finally:
        server.shutdown()
        server.server_close()


def test_a_link_to_another_local_port_carries_no_token(browser: BrowserContext,
                                                        project: Path) -> None:
    """Cookies ignore ports: a cookie holding the token went to whatever listened on the
    port a model's link named. The token now lives where only this origin can read it."""
    with listener() as heard:
        sid = stored_session(project, "Where are the docs?",
                             f"See [the docs](http://127.0.0.1:{heard.port}/docs).")
        ui = UiServer(project)
        try:
            page = open_page(browser, ui, f"s/{sid}")
            link = page.locator("#conversation a[href$='/docs']")
            with browser.expect_page() as opened:
                link.click()
            other = opened.value
            expect(other.locator("p")).to_have_text("another program")
            assert [path for path, _ in heard.requests][:1] == ["/docs"]
            for _, headers in heard.requests:
                assert ui.token not in repr(headers), headers
            assert ui.token not in other.evaluate("document.cookie")
            assert other.evaluate(f"localStorage.getItem('{KEY}')") is None
            # The ui's own origin keeps it, and its pages go on working with it.
            assert page.evaluate(f"localStorage.getItem('{KEY}')") == ui.token
            page.goto(ui.base)
            expect(page.locator(f"tr[data-session='{sid}']")).to_have_count(1)
            # A path that reads as a host (//127.0.0.1:port/) is asked of the ui, which
            # has no such page, and never of the program on that port.
            before = len(heard.requests)
            page.goto(f"{ui.base}/127.0.0.1:{heard.port}/docs")
            expect(page.locator("#boot-message")).to_have_text("Not Found")
            assert len(heard.requests) == before
            other.close()
            page.close()
        finally:
            ui.stop()


def test_a_browser_without_the_token_sees_no_data(browser: BrowserContext,
                                                   project: Path) -> None:
    sid = stored_session(project, "a private question", "a private answer")
    ui = UiServer(project)
    try:
        page = browser.new_page()
        page.goto(ui.url)
        page.evaluate(f"localStorage.removeItem('{KEY}')")
        page.goto(ui.base + f"s/{sid}")
        expect(page.locator("#boot-message")).to_contain_text("needs the access token")
        assert "private" not in page.content()
        # A token kept from an earlier run of `nonoka ui` is dropped, and says the same.
        page.evaluate(f"localStorage.setItem('{KEY}', 'from-an-earlier-run')")
        page.goto(ui.base + f"s/{sid}")
        expect(page.locator("#boot-message")).to_contain_text("needs the access token")
        assert page.evaluate(f"localStorage.getItem('{KEY}')") is None
        assert "private" not in page.content()
        page.close()
    finally:
        ui.stop()


def test_scripts_send_a_bearer_token_or_the_printed_address(project: Path) -> None:
    sid = stored_session(project, "from a script", "an answer for curl")
    ui = UiServer(project)
    try:
        status, _, body = ui.request(f"/s/{sid}/entries", token=True)
        assert status == 200 and b"an answer for curl" in body
        status, _, body = ui.request("/", headers={"Authorization": f"bearer  {ui.token} "})
        assert status == 200 and b"from a script" in body
        # The printed address is served as it is (was an empty 303 for a cookie), and the
        # page it answers with never repeats the token.
        status, headers, body = ui.request(f"/?token={ui.token}&n=25")
        assert status == 200 and b"from a script" in body and ui.token.encode() not in body
        assert "set-cookie" not in headers
        status, _, body = ui.request(f"/s/{sid}/revision?token={ui.token}")
        assert status == 200 and body.startswith(b'{"revision"')
        # Without the token, the refusal says how to send it.
        status, headers, body = ui.request(f"/s/{sid}/entries")
        assert status == 403 and headers["content-type"].startswith("text/plain")
        assert body.startswith(b"nonoka: ") and b"Authorization: Bearer <token>" in body
        # The ui's own script and styles hold no data and are served to anyone.
        status, _, body = ui.request("/static/ui.js")
        assert status == 200 and b"Authorization" in body
    finally:
        ui.stop()


def test_open_hands_the_browser_a_page_only_this_user_can_read(
        browser: BrowserContext, project: Path, tmp_path: Path) -> None:
    """``--open`` put the token, then a one-time code, on the browser's command line,
    which every local user can read (``ps``, ``/proc/*/cmdline``): another user redeemed
    the code first. The browser is now given the path of a page in a directory only this
    user may enter, which sends it on with the code; the command line holds neither."""
    sid = stored_session(project, "opened by --open")
    called = tmp_path / "browser-argv.txt"
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {called}.part\n"
                    f"mv {called}.part {called}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    ui = UiServer(project, "--open", env={"BROWSER": str(fake)})
    try:
        deadline = time.monotonic() + 120  # only so that a broken --open cannot hang
        while not called.exists() and ui.process.poll() is None \
                and time.monotonic() < deadline:  # the file appears whole (mv)
            time.sleep(0.02)
        argv = called.read_text().strip()
        assert ui.token not in argv and "code=" not in argv and "token=" not in argv
        opened = urlsplit(argv)
        assert opened.scheme == "file" and "\n" not in argv
        page = Path(unquote(opened.path))
        assert page.stat().st_uid == os.getuid()
        assert stat.S_IMODE(page.stat().st_mode) == 0o600
        assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
        found = re.search(r'content="0; url=([^"]+)"', page.read_text())
        assert found is not None
        target = urlsplit(html.unescape(found.group(1)))
        assert (target.hostname, target.port, target.path) == ("127.0.0.1", ui.port, "/")
        assert target.query.startswith("code=") and target.query[5:] not in argv
        # A real browser given that path reaches the sessions, the token handed over.
        tab = browser.new_page()
        tab.goto(argv)
        expect(tab.locator(f"tr[data-session='{sid}']")).to_have_count(1)
        assert tab.url.startswith(ui.base) and "code=" not in tab.url
        assert tab.evaluate(f"localStorage.getItem('{KEY}')") == ui.token
        tab.close()
        # The code is spent: the page cannot be used again.
        status, _, body = ui.request(f"/?{target.query}", headers={"Accept": "text/html"})
        assert status == 403 and ui.token.encode() not in body
    finally:
        ui.stop()
    assert not page.parent.exists()  # removed when the server stops


def test_the_one_time_code_expires() -> None:
    """Run through the guard itself with a clock the test moves: the code is good for
    ``CODE_SECONDS`` and only once."""
    now = [1000.0]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"the page"})

    def visit(guard: TokenGuard, query: str) -> tuple[int, bytes]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            sent.append(dict(message))

        scope = {"type": "http", "method": "GET", "path": "/", "query_string": query.encode(),
                 "headers": [(b"accept", b"text/html")]}
        run_async(guard(scope, receive, send))
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    late = TokenGuard(app, "the-token", None, code="one-time", clock=lambda: now[0])
    now[0] += CODE_SECONDS + 1
    status, body = visit(late, "code=one-time")
    assert status == 403 and b"the-token" not in body
    now[0] = 1000.0
    guard = TokenGuard(app, "the-token", None, code="one-time", clock=lambda: now[0])
    assert visit(guard, "code=wrong")[0] == 403
    now[0] += CODE_SECONDS - 1
    status, body = visit(guard, "code=one-time")
    assert status == 200 and b'content="the-token"' in body
    assert visit(guard, "code=one-time")[0] == 403
    assert visit(guard, "token=the-token") == (200, b"the page")


def test_links_forms_back_and_forward_work_with_the_token_in_the_page(
        browser: BrowserContext, project: Path) -> None:
    """A navigation carries no header: each is answered with the small page whose script
    fetches the real one with the token, so links, the filters, history and a new tab
    behave as with any web page."""
    first = stored_session(project, "the first conversation", "an answer")
    second = stored_session(project, "the second conversation", "another answer")
    ui = UiServer(project)
    try:
        page = open_page(browser, ui)
        assert "token" not in page.url
        page.click(f"tr[data-session='{first}'] a.row-link")
        expect(page.locator("h1")).to_have_text("the first conversation")
        assert page.url == f"{ui.base}s/{first}"
        page.go_back()
        expect(page.locator("#sessions tbody tr")).to_have_count(2)
        page.go_forward()
        expect(page.locator("h1")).to_have_text("the first conversation")
        page.goto(ui.base + f"s/{second[:8]}#timeline")  # a prefix redirects to the full id
        expect(page.locator("h1")).to_have_text("the second conversation")
        expect(page.locator("#session")).to_have_attribute("data-tab", "timeline")
        assert page.url == f"{ui.base}s/{second}#timeline"
        page.goto(ui.base)
        page.fill("#q", "second")
        page.press("#q", "Enter")
        expect(page.locator("#sessions tbody tr")).to_have_count(1)
        other = browser.new_page()  # another tab of the same browser
        other.goto(ui.base + f"s/{first}")
        expect(other.locator("h1")).to_have_text("the first conversation")
        other.close()
        page.close()
    finally:
        ui.stop()
