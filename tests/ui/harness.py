"""A real ``nonoka ui`` process and a real headless Chromium (Debian's), for the ui tests.

Playwright drives the system's ``/usr/bin/chromium`` (``executable_path``); its own
browser download is never used. Each browser gets a fresh profile directory.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from playwright.sync_api import BrowserContext, Page, sync_playwright

CHROMIUM = os.environ.get("NONOKA_TEST_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
T = TypeVar("T")
URL = re.compile(r"(http://[^/\s]+:(\d+)/)\?token=(\S+)")


class UiServer:
    """``nonoka ui --port 0`` in ``project``; ``url`` carries the token, ``base`` does not."""

    def __init__(self, project: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.project = project
        command = [sys.executable, "-m", "nonoka", "ui", "--port", "0", *args]
        environment = {**os.environ, "NONOKA_DATABASE_URL": "", **(env or {})}
        self.process = subprocess.Popen(command, cwd=project, env=environment,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.output = ""
        self.errors = ""
        deadline = time.monotonic() + 30
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.output += line
            found = URL.search(line)
            if found:
                self.base, self.port, self.token = found.group(1), int(found.group(2)), \
                    found.group(3)
                self.url = f"{self.base}?token={self.token}"
                return
        errors = self.stop()
        raise AssertionError(f"nonoka ui printed no address: {self.output}{errors}")

    def request(self, path: str, *, method: str = "GET", token: bool = False,
                headers: dict[str, str] | None = None, timeout: float = 10
                ) -> tuple[int, dict[str, str], bytes]:
        """One plain HTTP request (no browser); ``token`` sends it as a bearer token."""
        sent = {**({"Authorization": f"Bearer {self.token}"} if token else {}),
                **(headers or {})}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, headers=sent)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, \
                response.read()
        finally:
            connection.close()

    def stop(self) -> str:
        """Stop it as Ctrl+C would; returns what it wrote on stderr."""
        if self.process.returncode is None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
            try:
                out, self.errors = self.process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                out, self.errors = self.process.communicate()
            self.output += out
        return self.errors


def open_page(browser: BrowserContext, ui: UiServer, path: str = "") -> Page:
    """A new tab that entered with the token, then went to ``path``."""
    page = browser.new_page()
    page.goto(ui.url)
    if path:
        page.goto(ui.base + path.lstrip("/"))
    return page


@contextmanager
def chromium(width: int = 1440, height: int = 900) -> Iterator[BrowserContext]:
    """A headless Chromium context with a fresh profile, removed afterwards."""
    assert Path(CHROMIUM).exists(), f"Chromium is not installed at {CHROMIUM}"
    profile = tempfile.mkdtemp(prefix="nonoka-ui-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": width, "height": height}, device_scale_factor=1)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def stored_session(project: Path, *contents: str) -> str:
    """A completed session of ``contents`` (user and assistant in turn), written straight
    to ``project``'s store with its index row; its id."""
    from nonoka.state.entries import MemoryEntry
    from nonoka.state.session_state import SessionState, SessionStatus
    from nonoka.store.project import open_project_stores
    from nonoka.store.records import SessionRecord

    sid = str(uuid.uuid4())
    entries = [MemoryEntry.make("user" if i % 2 == 0 else "assistant", content)
               for i, content in enumerate(contents)]

    async def write() -> None:
        async with open_project_stores(project) as stores:
            await stores.checkpoints.save_session(SessionState(
                session_id=sid, status=SessionStatus.COMPLETED, memory_entries=entries))
            now = time.time()
            await stores.index.upsert_session(SessionRecord(
                session_id=sid, title=contents[0][:60], model="openai:test-model",
                status="completed", created_at=now, last_active=now,
                message_count=len(entries), metadata={"purpose": "chat"}))

    run_async(write())
    return sid


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to the end on a loop of its own, in a worker thread.

    Playwright's sync API keeps an event loop running on the test's thread, so
    ``asyncio.run`` cannot be called there while a browser is open.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
