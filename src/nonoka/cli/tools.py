"""The tools ``nonoka run`` gives the model: read-only looks at the project directory.

They run in-process, so they are deliberately harmless: they only read, they are
idempotent (crash repair may re-run them), and every path is resolved (symlinks too) and
refused when it leaves the project directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from nonoka.errors import ToolError
from nonoka.tools import Tool, make_tool

MAX_LINES = 400
MAX_LINE_CHARS = 2000
MAX_ENTRIES = 500
MAX_MATCHES = 200
MAX_FILE_BYTES = 2_000_000
MAX_FILES_SEARCHED = 5000
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".nonoka", ".venv", "venv", "node_modules",
                          "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"})
"""Directories ``search_text`` does not descend into (tooling, caches, nonoka's database)."""


def inside(root: Path, path: str) -> Path:
    """``path`` (relative to ``root``, or absolute) resolved; a ``ToolError`` if it escapes."""
    if not path.strip():
        path = "."
    target = (root / path).resolve()
    if target != root and not target.is_relative_to(root):
        raise ToolError(f"{path!r} is outside the project directory; "
                        "only paths inside it can be read")
    return target


def _shown(root: Path, target: Path) -> str:
    return "." if target == root else target.relative_to(root).as_posix()


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def builtin_tools(project: Path) -> list[Tool]:
    """``read_file``, ``list_dir`` and ``search_text`` confined to ``project``."""
    root = project.resolve()

    def read_file(path: str, offset: int = 0, limit: int = MAX_LINES) -> str:
        """Read a text file of the project, a window of lines at a time.

        Args:
            path: the file, relative to the project directory
            offset: the first line to return (0 is the first line of the file)
            limit: how many lines to return at most
        """
        return _read_file(root, path, offset, limit)

    def list_dir(path: str = ".") -> str:
        """List a directory of the project: sub-directories end with "/", files show sizes.

        Args:
            path: the directory, relative to the project directory
        """
        return _list_dir(root, path)

    def search_text(text: str, path: str = ".", max_results: int = 50) -> str:
        """Find lines containing a text (case-insensitive) in the project's files.

        Args:
            text: the text to look for (plain text, not a pattern)
            path: a directory (or file) of the project to search, relative to it
            max_results: how many matching lines to return at most
        """
        return _search_text(root, text, path, max_results)

    return [make_tool(function, idempotent=True)
            for function in (read_file, list_dir, search_text)]


def _read_file(root: Path, path: str, offset: int, limit: int) -> str:
    target = inside(root, path)
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory; use list_dir")
    if not target.is_file():
        raise ToolError(f"{path!r} does not exist in the project")
    with target.open("rb") as handle:
        if _is_binary(handle.read(8192)):
            raise ToolError(f"{path!r} is a binary file")
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines:
        return "[empty file]"
    start, count = max(offset, 0), min(max(limit, 1), MAX_LINES)
    window = [line[:MAX_LINE_CHARS] for line in lines[start:start + count]]
    body = "\n".join(window)
    if start + count < len(lines):
        body += (f"\n[lines {start + 1}-{start + len(window)} of {len(lines)}; "
                 f"read on with offset={start + len(window)}]")
    return body


def _list_dir(root: Path, path: str) -> str:
    target = inside(root, path)
    if not target.is_dir():
        raise ToolError(f"{path!r} is not a directory of the project")
    entries = sorted(target.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    lines = []
    for entry in entries[:MAX_ENTRIES]:
        if entry.is_dir():
            lines.append(entry.name + "/")
        else:
            size = entry.stat().st_size if entry.exists() else 0
            lines.append(f"{entry.name} ({size} bytes)")
    if len(entries) > MAX_ENTRIES:
        lines.append(f"[{len(entries) - MAX_ENTRIES} more entries not shown]")
    return "\n".join(lines) if lines else f"[{_shown(root, target)} is empty]"


def _search_text(root: Path, text: str, path: str, max_results: int) -> str:
    if not text:
        raise ToolError("give the text to search for")
    target = inside(root, path)
    needle, limit = text.casefold(), min(max(max_results, 1), MAX_MATCHES)
    matches: list[str] = []
    for file in _files(root, target):
        for number, line in _matching_lines(file, needle):
            matches.append(f"{_shown(root, file)}:{number}: {line.strip()[:300]}")
            if len(matches) >= limit:
                return "\n".join(matches) + f"\n[stopped at {limit} matches]"
    return "\n".join(matches) if matches else f"no line contains {text!r}"


def _files(root: Path, target: Path) -> list[Path]:
    """Regular files under ``target`` that resolve inside ``root`` (symlinks checked)."""
    if target.is_file():
        return [target]
    found: list[Path] = []
    for folder, dirs, names in os.walk(target):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(names):
            file = Path(folder, name)
            if file.is_symlink() and not file.resolve().is_relative_to(root):
                continue
            found.append(file)
            if len(found) >= MAX_FILES_SEARCHED:
                return found
    return found


def _matching_lines(file: Path, needle: str) -> list[tuple[int, str]]:
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return []
        data = file.read_bytes()
    except OSError:
        return []
    if _is_binary(data[:8192]):
        return []
    text = data.decode("utf-8", errors="replace")
    return [(n, line) for n, line in enumerate(text.splitlines(), 1)
            if needle in line.casefold()]
