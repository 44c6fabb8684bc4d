"""One version, everywhere: the package, the installed metadata, the command, the bridge.

``nonoka/_version.py`` holds the literal; ``pyproject.toml`` reads it (setuptools
``attr``), so a release bumps one line and nothing can drift.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import nonoka
from nonoka._version import __version__


def test_the_package_exposes_the_version_module_literal() -> None:
    assert nonoka.__version__ == __version__
    parts = __version__.split(".")
    assert len(parts) >= 3 and all(p.isdigit() for p in parts[:3]), __version__


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
