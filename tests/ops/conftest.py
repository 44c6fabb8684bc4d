"""A project directory for the real ``nonoka`` commands, its model a scripted server."""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka.testing.server import ScriptedOpenAIServer
from tests.cli.conftest import Project


@pytest.fixture
def project(tmp_path: Path, server: ScriptedOpenAIServer) -> Project:
    path = tmp_path / "project"
    path.mkdir()
    return Project(path, server)
