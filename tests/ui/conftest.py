"""The ui's tests share one project filled by real bridge turns (read only), and make
their own small projects when they change something."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext

from tests.ui.fill import Filled, fill
from tests.ui.harness import UiServer, chromium


@pytest.fixture(scope="session")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Filled:
    return fill(tmp_path_factory.mktemp("ui") / "project")


@pytest.fixture(scope="session")
def ui(filled: Filled) -> Iterator[UiServer]:
    """``nonoka ui`` (read-only) over the filled project."""
    server = UiServer(filled.project)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    """Per module: Playwright keeps an event loop running on the test thread while a
    browser is open, and async tests elsewhere need that thread's loop free."""
    with chromium() as context:
        yield context


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path
