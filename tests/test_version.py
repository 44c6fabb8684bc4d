"""One version, everywhere: the package, the installed metadata, the command, the bridge.

``nonoka/__init__.py`` holds the literal; ``pyproject.toml`` reads it (setuptools
``attr``), so a release bumps one line and nothing can drift.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import nonoka

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_takes_the_version_from_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nonoka.__version__"}
    parts = nonoka.__version__.split(".")
    assert len(parts) >= 3 and all(p.isdigit() for p in parts[:3]), nonoka.__version__


def test_the_installed_distribution_carries_the_same_version() -> None:
    assert version("nonoka") == nonoka.__version__


def test_the_command_prints_the_version() -> None:
    done = subprocess.run([sys.executable, "-m", "nonoka", "--version"], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == f"nonoka, version {nonoka.__version__}"


def test_the_bridge_acknowledges_with_the_version(tmp_path: Path) -> None:
    request = {"type": "chat", "protocol": {"version": "1"}, "cwd": str(tmp_path),
               "messages": [{"role": "user", "content": "hi"}]}
    env = {k: v for k, v in os.environ.items()
           if k not in ("NONOKA_MODEL", "NONOKA_DATABASE_URL")}
    done = subprocess.run([sys.executable, "-m", "nonoka", "bridge"], cwd=tmp_path, env=env,
                          input=json.dumps(request) + "\n", capture_output=True, text=True,
                          timeout=60, check=False)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert events and events[0]["type"] == "protocol_ack", done.stdout + done.stderr
    assert events[0]["server_version"] == nonoka.__version__
