"""The TypeScript provider shipped inside the Python package is what its sources build.

The compiled copy in ``src/nonoka/opencode/provider/`` is committed, so ``pip install``
alone brings it (no Node toolchain at install time). This test rebuilds it from
``packages/nonoka-opencode-provider/src`` with the pinned TypeScript and fails when the
shipped copy differs: run ``bash packages/nonoka-opencode-provider/build.sh`` to refresh it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nonoka.cli.opencode_cmd import shipped_provider_dir

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "packages" / "nonoka-opencode-provider"


def test_shipped_provider_is_complete_and_dependency_free() -> None:
    shipped = shipped_provider_dir()
    manifest = json.loads((shipped / "package.json").read_text(encoding="utf-8"))
    # OpenCode installs the `file:` package; any dependency would send it to the registry.
    assert not manifest.get("dependencies")
    assert manifest["type"] == "module"
    assert (shipped / manifest["main"]).is_file()
    modules = {p.stem for p in (PACKAGE / "src").glob("*.ts")}
    assert {p.stem for p in shipped.glob("*.js")} == modules, "run build.sh: modules differ"
    # OpenCode calls the first export whose name starts with "create": keep it unique.
    index = (shipped / "index.js").read_text(encoding="utf-8")
    assert "createNonoka" in index


def test_shipped_provider_matches_a_fresh_build() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("CI"):
            pytest.fail("Node.js (node and npm) is required in CI to check the shipped provider")
        pytest.skip("Node.js is not installed: cannot rebuild the provider to compare")
    done = subprocess.run(["bash", str(PACKAGE / "build.sh"), "--check"], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
