"""Fixtures shared by every test that talks to a model over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import pytest

from nonoka.testing.server import ScriptedOpenAIServer, Step

ScriptItem: TypeAlias = "Step | Callable[[dict[str, Any]], Step]"
"""A step, or a function from the request body to a step (called when the request comes)."""


@pytest.fixture
def scripted() -> list[ScriptItem]:
    """The scripted model's answers; tests append steps before running."""
    return []


@pytest.fixture
def server(scripted: list[ScriptItem]) -> Iterator[ScriptedOpenAIServer]:
    """A local OpenAI-compatible server that answers from ``scripted``, in order."""

    def next_step(body: dict[str, Any]) -> Step:
        if not scripted:
            raise AssertionError("the model was called more often than scripted")
        step = scripted.pop(0)
        return step(body) if callable(step) else step

    with ScriptedOpenAIServer(next_step) as running:
        yield running
    assert not running.failures, running.failures
