"""The ``nonoka`` command as a real subprocess, and the environment pointing it at a model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NONOKA = [sys.executable, "-m", "nonoka"]


def model_env(base_url: str, *, api_key: str = "sk-test") -> dict[str, str]:
    """The variables that point nonoka at a (scripted) OpenAI-compatible server."""
    return {"NONOKA_MODEL": "openai:test-model", "OPENAI_API_KEY": api_key,
            "OPENAI_BASE_URL": base_url}


def run_nonoka(cwd: Path, *args: str, env: dict[str, str] | None = None,
               input: str | None = None, timeout: float = 60,
               ) -> subprocess.CompletedProcess[str]:
    """``python -m nonoka ARGS`` in ``cwd``, output captured as text; never raises on exit."""
    return subprocess.run([*NONOKA, *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True, timeout=timeout, check=False)
