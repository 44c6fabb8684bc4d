"""Fixtures for the fault tests.

The exhaustive crash campaign is marked ``slow`` and deselected by default (pyproject's
``-m "not slow"``); ``pytest -m slow`` runs every fault point. The default run keeps a
sample of the campaign.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka.testing.server import ScriptedOpenAIServer
from tests.bridge.conftest import Bridge


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def bridge(project: Path, server: ScriptedOpenAIServer) -> Bridge:
    """Spawns real bridge processes in ``project`` against the scripted model server."""
    return Bridge(project, server)
