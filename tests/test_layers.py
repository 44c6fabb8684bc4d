"""Every module belongs to a layer, and imports only from the layers its own may use.

The table below is the whole rule: a layer, the module prefixes it holds, and the layers
it may import (its own always). Every ``import`` and ``from ... import`` of a ``nonoka``
module anywhere in a module counts — lazy ones inside functions and ``TYPE_CHECKING``
blocks included. ``from nonoka import Name`` counts as an import of the module that
defines ``Name`` (the package root only re-exports lazily), so a low layer cannot reach
the runtime through the root. Inside a layer, no module may import itself through
others: a circle of imports (counted the same way) fails too. From the bottom up::

    errors        the exception tree; imports nothing of nonoka
    support       faults, redact, signals, config: small helpers used across the layers
    state         the data a session is made of (messages, entries, plans, the ledger)
    store         the storage engines           } three peers that never
    llm           the model adapters            } import one another
    protocol      the NDJSON protocol's frames and models }
    events        what a run reports
    runtime       agents, tools, Runner, paradigms, Session; the extension hooks
    turn          one turn for any front end (stores, lease, journal)
    api           the package root, which re-exports the public names lazily
    ops           search, export, import, copy, prune
    provider      the Python client of the bridge (and the OpenCode provider's files)
    testing       scripted models and the scripted server
    conformance   the storage conformance suite (public names only: tests/test_public_api)
    bridge        ``nonoka bridge``
    ui            ``nonoka ui``
    serve         ``nonoka serve`` (over the bridge's decision chain for Chat Completions)
    handoff       a session handed to another coding agent (its transcript, its branch)
    cli           the ``nonoka`` command
    main          ``python -m nonoka``
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nonoka"

LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # layer: (the modules it holds, the layers it may import besides its own)
    "errors": (("nonoka.errors",), ()),
    "support": (("nonoka.faults", "nonoka.redact", "nonoka.signals", "nonoka.config"),
                ("errors",)),
    "state": (("nonoka.state",), ("errors", "support")),
    "store": (("nonoka.store",), ("errors", "support", "state")),
    "llm": (("nonoka.llm",), ("errors", "support", "state")),
    "protocol": (("nonoka.protocol",), ("errors", "support", "state")),
    "events": (("nonoka.events",), ("errors", "support", "state", "llm")),
    "runtime": (("nonoka.runtime", "nonoka.extensions"),
                ("errors", "support", "state", "store", "llm", "events")),
    "turn": (("nonoka.turn",),
             ("errors", "support", "state", "store", "llm", "protocol", "events", "runtime")),
    "api": (("nonoka",), ("errors", "support", "state", "llm", "runtime")),
    "ops": (("nonoka.ops",), ("errors", "support", "state", "store", "turn", "api")),
    "provider": (("nonoka.provider", "nonoka.opencode"),
                 ("errors", "support", "state", "protocol", "api")),
    "testing": (("nonoka.testing",), ("errors", "support", "state", "llm", "api")),
    "conformance": (("nonoka.testing.conformance",),
                    ("errors", "state", "store", "runtime", "api")),
    "bridge": (("nonoka.bridge",),
               ("errors", "support", "state", "store", "llm", "protocol", "events",
                "runtime", "turn", "api")),
    "ui": (("nonoka.ui",),
           ("errors", "support", "state", "store", "runtime", "turn", "ops", "api")),
    "serve": (("nonoka.serve",),
              ("errors", "support", "state", "store", "llm", "protocol", "events", "runtime",
               "turn", "api", "bridge")),
    "handoff": (("nonoka.handoff",),
                ("errors", "support", "state", "store", "llm", "turn", "bridge", "serve")),
    "cli": (("nonoka.cli",),
            ("errors", "support", "state", "store", "llm", "protocol", "events", "runtime",
             "turn", "api", "ops", "provider", "testing", "bridge", "ui", "serve",
             "handoff")),
    "main": (("nonoka.__main__",), ("cli", "bridge", "api")),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _root_exports() -> dict[str, str]:
    """``nonoka``'s lazily exported names and the modules that define them."""
    import nonoka

    return dict(nonoka._EXPORTS)


def _imports(source: str, module: str, is_package: bool,
             modules: frozenset[str] = frozenset()) -> set[str]:
    """The ``nonoka`` names ``source`` imports; ``from package import name`` gives
    ``package.name`` when that is one of ``modules`` (a submodule), else ``package``."""
    tree = ast.parse(source)
    package = module if is_package else module.rsplit(".", 1)[0]
    exports = _root_exports()
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
            if name == "nonoka":
                for alias in node.names:  # a re-exported name is its defining module
                    found.add(exports.get(alias.name, f"nonoka.{alias.name}"))
                continue
            submodules = {f"{name}.{alias.name}" for alias in node.names} & modules
            found.update(submodules or {name})
    return {name for name in found if name == "nonoka" or name.startswith("nonoka.")}


def layer_of(module: str) -> str | None:
    """The layer whose most specific prefix holds ``module``."""
    best: tuple[int, str] | None = None
    for layer, (prefixes, _) in LAYERS.items():
        for prefix in prefixes:
            hit = module == prefix or (prefix != "nonoka" and module.startswith(prefix + "."))
            if hit and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def _target_layer(name: str) -> str | None:
    if name == "nonoka.__version__":
        return "api"
    layer = layer_of(name)
    while layer is None and "." in name:  # ``nonoka.x.Name``: the module it is from
        name = name.rsplit(".", 1)[0]
        layer = layer_of(name)
    return layer


def _check(module: str, source: str, is_package: bool = False) -> list[str]:
    layer = layer_of(module)
    if layer is None:
        return [f"{module} belongs to no layer (add it to LAYERS in tests/test_layers.py)"]
    allowed = {layer, *LAYERS[layer][1]}
    bad = []
    for name in sorted(_imports(source, module, is_package)):
        target = _target_layer(name)
        if target not in allowed:
            bad.append(f"{module} ({layer}) imports {name} ({target})")
    return bad


@functools.cache
def _modules() -> tuple[tuple[str, Path], ...]:
    """Every module of ``src/nonoka`` and its file (read once: ~480 probes ask)."""
    return tuple((_module_name(path), path) for path in sorted(SRC.rglob("*.py")))


Graph = dict[str, set[str]]


@functools.cache
def _graph() -> Graph:
    """Each module and the modules it imports (submodules named as such)."""
    names = frozenset(m for m, _ in _modules())
    return {m: _imports(path.read_text(encoding="utf-8"), m, path.name == "__init__.py",
                        names) & names
            for m, path in _modules()}


def _circles(graph: Graph) -> list[str]:
    """Every circle of imports: each set of modules that reach one another (Tarjan's
    strongly connected components; the graph's depth stays far below the recursion
    limit), as one line naming its layer and modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(members) > 1:
                layers = sorted({str(layer_of(m)) for m in members})
                found.append(f"a circle of imports in {', '.join(layers)}: "
                             f"{' <-> '.join(sorted(members))}")

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_belongs_to_a_layer() -> None:
    assert [m for m, _ in _modules() if layer_of(m) is None] == []


def test_imports_point_down_only() -> None:
    assert [v for m, path in _modules()
            for v in _check(m, path.read_text(encoding="utf-8"), path.name == "__init__.py")
            ] == []


def test_the_table_is_a_hierarchy() -> None:
    """A layer uses only layers listed before it, so no two layers may import each other."""
    order = list(LAYERS)
    for layer, (_, uses) in LAYERS.items():
        assert all(order.index(u) < order.index(layer) for u in uses), layer


def test_the_docstring_names_every_layer() -> None:
    table = (__doc__ or "").split("::", 1)[1]
    assert re.findall(r"^    ([a-z]+) ", table, flags=re.M) == list(LAYERS)


def _forbidden_target(layer: str) -> str:
    """A module of a layer ``layer`` may not import (the highest such layer's)."""
    allowed = {layer, *LAYERS[layer][1]}
    above = [name for name in reversed(LAYERS) if name not in allowed]
    return LAYERS[above[0]][0][0] + ".probe" if LAYERS[above[0]][0][0] != "nonoka" \
        else "nonoka.probe"


@pytest.mark.parametrize("module", [m for m, _ in _modules()])
def test_an_upward_import_added_to_any_module_is_caught(module: str) -> None:
    """Probes: for every module, an import of a layer it may not use fails the check,
    written lazily in a function or under ``TYPE_CHECKING`` alike."""
    layer = layer_of(module)
    assert layer is not None
    target = _forbidden_target(layer)
    lazy = f"def f():\n    import {target}\n"
    typing_only = f"if TYPE_CHECKING:\n    from {target} import Thing\n"
    assert _check(module, lazy) != []
    assert _check(module, typing_only) != []


def test_no_module_imports_itself_through_others() -> None:
    """A circle inside a layer (``cli.common`` importing ``cli.voice``, which imported
    ``cli.common`` back in a function) makes neither module the one to read first."""
    assert _circles(_graph()) == []


@pytest.mark.parametrize("module", [m for m, _ in _modules()])
def test_a_circle_added_to_any_module_is_caught(module: str) -> None:
    """Probes: for every module, a module of its own layer that imports it, imported back
    by it lazily in a function or under ``TYPE_CHECKING``, is a circle the check finds."""
    layer = layer_of(module)
    assert layer is not None
    probe = LAYERS[layer][0][0] + ".probe"  # the api layer's (the root alone): no layer's
    path = next(p for m, p in _modules() if m == module)
    names = frozenset([*_graph(), probe])
    for back in (f"def f():\n    import {probe}\n",
                 f"if TYPE_CHECKING:\n    from {probe} import Thing\n"):
        # The module's imports with the lines added at its end: what it imported already
        # (``_graph``: each import counts wherever it stands), and the added lines'.
        added = _imports(back, module, path.name == "__init__.py", names)
        graph = {**_graph(), probe: {module}, module: _graph()[module] | added}
        circles = _circles(graph)
        assert len(circles) == 1 and module in circles[0] and probe in circles[0], circles


def test_a_re_exported_name_counts_as_its_defining_module() -> None:
    assert _check("nonoka.store.probe", "from nonoka import Runner\n") == [
        "nonoka.store.probe (store) imports nonoka.runtime.runner (runtime)"]
    assert _check("nonoka.store.probe", "from nonoka import faults\n") == []


def test_a_relative_upward_import_is_caught() -> None:
    assert _check("nonoka.store.probe", "from ..runtime.runner import Runner\n") != []


def test_a_module_outside_every_layer_is_reported() -> None:
    assert _check("nonoka.newcomer", "") == [
        "nonoka.newcomer belongs to no layer (add it to LAYERS in tests/test_layers.py)"]
