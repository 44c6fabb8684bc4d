"""The documentation stands on its own: nothing in the sources or the docs cites a document
outside this repository, and every file the docs name is in it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROVIDER = ROOT / "packages" / "nonoka-opencode-provider"
SCANNED = [ROOT / "src", ROOT / "docs", ROOT / "bench", ROOT / "README.md",
           PROVIDER / "src", PROVIDER / "test", PROVIDER / "README.md", PROVIDER / "build.sh"]
"""Where a reader or a user meets nonoka's own words."""
SKIPPED_DIRS = {"__pycache__", "node_modules", "dist", "build-test", "results"}
OUTSIDE = re.compile(r"SPEC §|SPEC\.md|PROTOCOL\.md|/work/")
"""A section of a specification, or a path, that lives outside the repository."""
PENDING: set[str] = set()
"""Files whose citations are replaced with their next revision; each must still hold one,
so an entry is dropped here as soon as its file is clean."""

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
        PROVIDER / "README.md"]
PATH_CHECKED = [doc for doc in DOCS if doc.name != "architecture.md"]
"""docs/architecture.md is being redrawn for the package layout (nonoka.state,
nonoka.runtime); it joins the path check once its module names are the new ones."""
TOP = {"src", "docs", "tests", "bench", "packages", ".ci", "nonoka"}
"""First components that can only mean a place in this repository."""
SUFFIXES = (".py", ".md", ".ts", ".js", ".mjs", ".json", ".sh", ".toml", ".sql", ".png")
SPAN = re.compile(r"`([^`\n]+)`|\]\(([^)\s]+)\)")
DOC_LINK = re.compile(r"\bdocs/[\w.-]+\.md\b")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
BRACES = re.compile(r"\{([^{}]*)\}")


def text_files() -> Iterator[Path]:
    for place in SCANNED:
        found = [place] if place.is_file() else sorted(place.rglob("*"))
        for path in found:
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                data = path.read_bytes()
                if b"\0" not in data:
                    yield path


def citations() -> dict[str, list[str]]:
    """``{file: ["line N: text", ...]}`` for every line citing something outside."""
    found: dict[str, list[str]] = {}
    for path in text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = [f"line {n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                 if OUTSIDE.search(line)]
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    return found


def test_nothing_cites_a_document_outside_the_repository() -> None:
    found = citations()
    stray = {name: lines for name, lines in found.items() if name not in PENDING}
    assert not stray, "replace with what it means, or a section of docs/: " + repr(stray)
    clean = sorted(PENDING - set(found))
    assert not clean, f"no longer cites anything outside; drop it from PENDING: {clean}"


def expand(token: str) -> list[str]:
    """``a/{b,c}/d.py`` → ``a/b/d.py``, ``a/c/d.py``."""
    braces = BRACES.search(token)
    if braces is None:
        return [token]
    return [expanded for choice in braces.group(1).split(",")
            for expanded in expand(token[:braces.start()] + choice + token[braces.end():])]


def named_paths(text: str) -> Iterator[str]:
    """The repository paths a markdown text names: link targets, backticked paths (outside
    code blocks) and ``docs/*.md`` anywhere."""
    yield from DOC_LINK.findall(text)
    for span, link in SPAN.findall(FENCE.sub("", text)):
        if link:
            if not re.match(r"[a-z]+:|#", link):
                yield link.partition("#")[0]
            continue
        for word in span.split():
            word = word.removesuffix("'s").rstrip(".,;:)'\"").lstrip("('\"")
            if not word or word[0] in "/~-" or re.search(r"[<>:*=$#]", word):
                continue
            top = word.split("/")[0]
            if top == ".nonoka":
                continue
            if word.endswith(SUFFIXES) or ("/" in word and top in TOP):
                yield from expand(word)


def all_names() -> set[str]:
    names: set[str] = set()
    for place in ("src", "tests", "bench", "packages", "docs", ".ci"):
        for path in (ROOT / place).rglob("*"):
            if not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                names.add(path.name)
    return names


def exists(name: str, doc: Path, names: set[str]) -> bool:
    """A path is found from the root, from ``src/`` or ``src/nonoka/`` (module paths), or
    from the doc's own folder; a bare module name (``x.py``) anywhere in the tree. Other
    bare names are often the user's own files (``opencode.json``), so they pass."""
    name = name.rstrip("/")
    if "/" not in name:
        return name in names or not name.endswith(".py")
    bases = [ROOT, ROOT / "src", ROOT / "src" / "nonoka", doc.parent]
    return any((base / name).exists() for base in bases)


@pytest.mark.parametrize("doc", PATH_CHECKED, ids=lambda doc: doc.relative_to(ROOT).as_posix())
def test_every_file_the_docs_name_exists(doc: Path) -> None:
    names = all_names()
    missing = sorted({name for name in named_paths(doc.read_text(encoding="utf-8"))
                      if not exists(name, doc, names)})
    assert not missing, f"{doc.relative_to(ROOT)} names files that are not here: {missing}"
