"""A ``nonoka serve`` in front of the scripted OpenAI-compatible server, and the
official ``openai`` client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.codex_client import Outside
from tests.serve.harness import Served

MODEL = "openai:scripted-model"
UPSTREAM_KEY = "sk-upstream-key-that-never-leaves-0123456789"


@pytest.fixture
def upstream_env(server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment a server needs to reach the scripted upstream."""
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": UPSTREAM_KEY,
           "NONOKA_DATABASE_URL": ""}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NONOKA_MODEL", raising=False)
    return env


@pytest.fixture
def served(project: Path, upstream_env: dict[str, str]) -> Iterator[Served]:
    running = Served(project, MODEL)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(served: Served) -> OpenAI:
    return served.client()  # closed when ``served`` stops


@pytest.fixture
def outside() -> Iterator[Outside]:
    """Where Codex's connections to anything but the local server end (refused)."""
    gate = Outside()
    try:
        yield gate
    finally:
        gate.close()
    assert gate.asked == [], f"Codex tried to reach beyond the local server: {gate.asked}"
