"""The built-in tools of ``nonoka run``: read-only, and confined to the project."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from nonoka.cli.tools import builtin_tools
from nonoka.runtime.tools import RunContext, Tool


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("# Guide\nInstall with pip.\n")
    (root / "main.py").write_text("\n".join(f"line {i}" for i in range(1, 1001)))
    (root / "blob.bin").write_bytes(b"\0\1\2pip")
    (root / ".nonoka").mkdir()
    (root / ".nonoka" / "notes").write_text("pip inside the database folder")
    (tmp_path / "outside.txt").write_text("secret pip")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    (root / "linkdir").symlink_to(tmp_path)
    return {t.name: t for t in builtin_tools(root)}


def use(tool: Tool, **arguments: object) -> tuple[str, bool]:
    """``(result, is_error)`` as the ReAct loop would record them."""
    from nonoka.errors import ToolError

    ctx: RunContext[None] = RunContext(deps=None, session_id="s")
    try:
        return asyncio.run(tool.run(json.dumps(arguments), ctx)), False
    except ToolError as exc:
        return str(exc), True


def test_every_tool_is_idempotent_and_run_by_nonoka(tools: dict[str, Tool]) -> None:
    assert set(tools) == {"read_file", "list_dir", "search_text"}
    assert all(t.idempotent and t.executed_by == "nonoka" for t in tools.values())
    assert tools["read_file"].parameters["required"] == ["path"]


def test_read_file_reads_windows_of_lines(tools: dict[str, Tool]) -> None:
    assert use(tools["read_file"], path="docs/guide.md") == ("# Guide\nInstall with pip.", False)
    text, error = use(tools["read_file"], path="main.py", offset=10, limit=2)
    assert not error and text.startswith("line 11\nline 12\n[lines 11-12 of 1000")
    assert use(tools["read_file"], path="blob.bin")[1]
    assert "is a directory" in use(tools["read_file"], path="docs")[0]
    assert "does not exist" in use(tools["read_file"], path="nope.txt")[0]


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "link.txt",
                                  "linkdir/outside.txt", "docs/../../outside.txt"])
def test_paths_that_leave_the_project_are_refused(tools: dict[str, Tool], path: str) -> None:
    text, error = use(tools["read_file"], path=path)
    assert error and "outside the project directory" in text
    assert "secret" not in text
    assert use(tools["list_dir"], path="linkdir")[1]
    assert use(tools["search_text"], text="pip", path="..")[1]


def test_list_dir_and_search_text(tools: dict[str, Tool]) -> None:
    listing, error = use(tools["list_dir"])
    assert not error
    assert listing.splitlines()[:2] == [".nonoka/", "docs/"]
    assert "main.py (" in listing
    found, error = use(tools["search_text"], text="PIP")
    assert not error
    assert found.splitlines() == ["docs/guide.md:2: Install with pip."]  # no binary, no
    # .nonoka, no file reached through a symlink out of the project
    assert use(tools["search_text"], text="line 9", max_results=3)[0].endswith(
        "[stopped at 3 matches]")
    assert "no line contains" in use(tools["search_text"], text="zzz")[0]
