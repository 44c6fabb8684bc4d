"""The wheel carries everything an installed nonoka needs, not just the Python files.

The wheel is built from a clean copy of the sources (``pyproject.toml``, ``README.md``,
``src/``), so a stale ``build/`` directory in the checkout cannot hide a missing file. Two
probe files are added to the copy, in folders that hold no data today, to show that a
new SQL or JSON file anywhere under ``src/nonoka`` ships without touching the globs.
``.ci/wheel-check`` installs such a wheel and runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import nonoka

ROOT = Path(__file__).resolve().parents[1]
PROBES = ("nonoka/store/migrations/0001_probe.sql", "nonoka/llm/schemas/probe.schema.json")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for probe in PROBES:
        path = source / "src" / probe
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n" if probe.endswith(".json") else "SELECT 1;\n")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                           "--quiet", "--wheel-dir", str(out)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    [built] = out.glob("nonoka-*.whl")
    return zipfile.ZipFile(built)


def shipped(wheel: zipfile.ZipFile) -> set[str]:
    return set(wheel.namelist())


def test_the_wheel_is_named_for_the_package_version(wheel: zipfile.ZipFile) -> None:
    assert Path(str(wheel.filename)).name == f"nonoka-{nonoka.__version__}-py3-none-any.whl"
    metadata = wheel.read(f"nonoka-{nonoka.__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {nonoka.__version__}\n" in metadata


def test_the_wheel_ships_every_data_file_of_the_source_tree(wheel: zipfile.ZipFile) -> None:
    package = ROOT / "src" / "nonoka"
    data = {f"nonoka/{p.relative_to(package).as_posix()}"
            for pattern in ("py.typed", "**/*.js", "**/*.json", "**/*.sql")
            for p in package.glob(pattern)}
    assert "nonoka/py.typed" in data and "nonoka/opencode/provider/package.json" in data
    assert data <= shipped(wheel), sorted(data - shipped(wheel))


def test_the_wheel_ships_the_compiled_opencode_provider(wheel: zipfile.ZipFile) -> None:
    sources = {p.stem for p in (ROOT / "packages" / "nonoka-opencode-provider" / "src")
               .glob("*.ts")}
    provider = {Path(n).stem for n in shipped(wheel)
                if n.startswith("nonoka/opencode/provider/") and n.endswith(".js")}
    assert sources and provider == sources


def test_new_data_files_anywhere_under_the_package_ship(wheel: zipfile.ZipFile) -> None:
    assert set(PROBES) <= shipped(wheel)


def test_the_wheel_ships_every_python_module(wheel: zipfile.ZipFile) -> None:
    package = ROOT / "src" / "nonoka"
    modules = {f"nonoka/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")}
    assert modules <= shipped(wheel), sorted(modules - shipped(wheel))


def test_the_wheel_declares_the_console_script(wheel: zipfile.ZipFile) -> None:
    entry_points = wheel.read(f"nonoka-{nonoka.__version__}.dist-info/entry_points.txt")
    lines = [line.strip() for line in entry_points.decode().splitlines()]
    section = lines.index("[console_scripts]")
    assert "nonoka = nonoka.cli.main:main" in lines[section + 1:]
