"""Fixtures of the hardening tests: the human commands' ``project`` against the scripted server."""

from __future__ import annotations

from tests.cli.conftest import project

__all__ = ["project"]
