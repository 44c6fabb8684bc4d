"""The allowed directions of imports between nonoka's packages, checked on the source.

Every ``import`` and ``from ... import`` of a ``nonoka`` module anywhere in a module
(lazy ones inside functions and ``TYPE_CHECKING`` blocks included) must point down:

    cli, ui            → turn, bridge (cli only: the bridge command), runtime, store, llm
    bridge             → protocol, turn, runtime, store, llm
    provider           → protocol
    turn               → runtime, store, llm
    runtime            → store, llm (the core: agent, runner, session, paradigms, ...)
    store, llm         → the data they keep (state, messages, ...), never the runtime above
    protocol           → nothing of nonoka but itself and the message model
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nonoka"

FRONT = ("nonoka.cli", "nonoka.ui", "nonoka.bridge", "nonoka.provider", "nonoka.opencode")
ABOVE_RUNTIME = (*FRONT, "nonoka.turn")
RUNTIME = ("nonoka.runner", "nonoka.paradigms", "nonoka.agent", "nonoka.extensions",
           "nonoka.session")

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "nonoka.protocol": (*ABOVE_RUNTIME, *RUNTIME, "nonoka.store", "nonoka.llm",
                        "nonoka.testing"),
    "nonoka.provider": ("nonoka.bridge", "nonoka.cli", "nonoka.ui", "nonoka.turn",
                        "nonoka.store", "nonoka.runner", "nonoka.paradigms"),
    "nonoka.bridge": ("nonoka.provider", "nonoka.cli", "nonoka.ui", "nonoka.opencode"),
    "nonoka.turn": FRONT,
    "nonoka.ui": ("nonoka.bridge", "nonoka.provider", "nonoka.cli"),
    "nonoka.store": (*ABOVE_RUNTIME, *RUNTIME, "nonoka.protocol"),
    "nonoka.llm": (*ABOVE_RUNTIME, *RUNTIME, "nonoka.protocol", "nonoka.store"),
    "nonoka.runner": (*ABOVE_RUNTIME, "nonoka.protocol"),
    "nonoka.paradigms": (*ABOVE_RUNTIME, "nonoka.protocol"),
    "nonoka.session": (*ABOVE_RUNTIME, "nonoka.protocol"),
    "nonoka.state": (*ABOVE_RUNTIME, *RUNTIME, "nonoka.protocol", "nonoka.store"),
    "nonoka.messages": (*ABOVE_RUNTIME, *RUNTIME, "nonoka.protocol", "nonoka.store"),
    "nonoka.errors": ("nonoka.",),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    tree = ast.parse(source)
    package = module if is_package else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "nonoka" or name.startswith("nonoka.")}


def _owner(module: str) -> str | None:
    for layer in sorted(FORBIDDEN, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _check(module: str, source: str, is_package: bool = False) -> list[str]:
    layer = _owner(module)
    if layer is None:
        return []
    bad = []
    for name in sorted(_imports(source, module, is_package)):
        if name == layer or name.startswith(layer + "."):
            continue
        if any(name.startswith(f) if f.endswith(".") else (name == f or name.startswith(f + "."))
               for f in FORBIDDEN[layer]):
            bad.append(f"{module} imports {name} ({layer} must not import it)")
    return bad


def _violations() -> list[str]:
    return [v for path in sorted(SRC.rglob("*.py"))
            for v in _check(_module_name(path), path.read_text(encoding="utf-8"),
                            path.name == "__init__.py")]


def test_imports_point_down_only() -> None:
    assert _violations() == []


@pytest.mark.parametrize(("module", "upward"), [
    ("nonoka.store.sqlite.probe", "nonoka.runner"),
    ("nonoka.provider.probe", "nonoka.bridge.server"),
    ("nonoka.turn.probe", "nonoka.bridge.handler"),
    ("nonoka.protocol.probe", "nonoka.store.base"),
    ("nonoka.errors", "nonoka.messages")])
def test_the_check_catches_an_upward_import(module: str, upward: str) -> None:
    """A module that imports upward, even lazily, is reported (the check is not vacuous)."""
    source = f"def f():\n    import {upward}\n"
    assert _check(module, source) == [
        f"{module} imports {upward} ({_owner(module)} must not import it)"]
    relative = "from ..runner import Runner\n"
    assert _check("nonoka.store.probe", relative) != []
