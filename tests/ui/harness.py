"""A real ``nonoka ui`` process and a real headless Chromium (Debian's), for the ui tests.

Playwright drives the system's ``/usr/bin/chromium`` (``executable_path``); its own
browser download is never used. Each browser gets a fresh profile directory.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import BrowserContext, sync_playwright

CHROMIUM = os.environ.get("NONOKA_TEST_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
URL = re.compile(r"(http://127\.0\.0\.1:(\d+)/)\?token=(\S+)")


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
        self.stop()
        raise AssertionError(f"nonoka ui printed no address: {self.output}"
                             f"{self.process.stderr.read() if self.process.stderr else ''}")

    def stop(self) -> str:
        """Stop it as Ctrl+C would; returns what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.stderr.read() if self.process.stderr else ""


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
