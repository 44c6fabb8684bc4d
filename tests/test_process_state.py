"""No module keeps mutable state: what a process remembers between calls belongs to the
objects its entry point creates and passes down (``nonoka.bridge.reuse``,
``nonoka.store.reuse``, ``nonoka.state.prefix_memo.ConversationPasses``).

A module-level name is state when code changes it after import: an item or attribute
assigned (``CACHE[key] = ...``, ``Holder.value = ...``), a mutating method called on it
(``CACHE.clear()``, ``KEPT.append(...)``), or a ``global`` rebinding it; so is a
module-level function memoised by its arguments (``@cache`` on a function that takes
any). Constant tables (read-only dicts, frozensets) and lazily made constants
(``@cache`` on a function of no arguments) are not. The few that must stay module state are
listed in ``ALLOWED``, each with its reason; a new one fails this test until it is
either given an owner or listed here with a reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nonoka"

MUTATORS = frozenset({
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update",
    "setdefault", "add", "discard", "move_to_end", "appendleft", "extendleft", "keep",
    "forget", "__setitem__", "__delitem__", "sort", "reverse",
})

ALLOWED: dict[str, str] = {
    "nonoka.llm.inflight:_ADOPTED": "a class made once, on first use (the early path does "
                                    "not import http.client before it must): a constant",
    "nonoka.redact:_env_secrets": "the process environment's secret values, read once: "
                                  "the environment is fixed for the process's life",
    "nonoka.state.frozen:_FIELDS": "each model class's field names, derived from code "
                                   "once per class: a constant per class",
    "nonoka.store.lease_terms:_host": "this machine's host name, looked up once",
}
"""``module:name`` → why it stays module state."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
        for target in targets:
            if isinstance(target, ast.Name):
                names.add(target.id)
    return names


def _root(node: ast.expr) -> str | None:
    """The name an expression such as ``A.b[c].d`` starts from."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def mutated_module_state(source: str) -> set[str]:
    """The module-level names ``source`` changes after import (see the module docstring)."""
    tree = ast.parse(source)
    top = _top_level_names(tree)
    found: set[str] = {node.name for node in tree.body
                       if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                       and _memoised(node) and _takes_arguments(node)}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            found |= _changed_by(function, top)
    return found


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = function.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                            *([args.vararg] if args.vararg else []),
                            *([args.kwarg] if args.kwarg else [])]}


def _changed_by(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
                top: set[str]) -> set[str]:
    """The module-level names ``function`` assigns into, mutates or rebinds."""
    local = _parameters(function)
    declared = {name for node in ast.walk(function) if isinstance(node, ast.Global)
                for name in node.names}
    found: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Delete):
            targets = (node.targets if isinstance(node, ast.Assign | ast.Delete)
                       else [node.target])
            for target in targets:
                if isinstance(target, ast.Name):
                    found |= {target.id} & declared
                    local.add(target.id)
                else:
                    found |= {_root(target) or ""} & (top - local)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS):
            found |= {_root(node.func.value) or ""} & (top - local)
    return found


def _memoised(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else (
            target.id if isinstance(target, ast.Name) else "")
        if name in ("cache", "lru_cache"):
            return True
    return False


def _takes_arguments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = function.args
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg
                or args.kwarg)


def _violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        for name in sorted(mutated_module_state(path.read_text(encoding="utf-8"))):
            if f"{module}:{name}" not in ALLOWED:
                found.append(f"{module}:{name}")
    return found


def test_no_module_keeps_mutable_state() -> None:
    assert _violations() == []


def test_every_allowance_still_exists() -> None:
    """An entry for state that is gone is removed, so the list stays the truth."""
    present = {f"{_module_name(p)}:{n}" for p in SRC.rglob("*.py")
               for n in mutated_module_state(p.read_text(encoding="utf-8"))}
    assert sorted(set(ALLOWED) - present) == []


def test_the_check_sees_each_kind_of_module_state() -> None:
    """Probes: each way of keeping state in a module is reported (the check is not
    vacuous), and what is local or constant is not."""
    probes = {
        "_CACHE: dict[str, int] = {}\ndef f(k):\n    _CACHE[k] = 1\n": {"_CACHE"},
        "_SEEN = []\ndef f(x):\n    _SEEN.append(x)\n": {"_SEEN"},
        "class _Holder:\n    last = None\ndef f(x):\n    _Holder.last = x\n": {"_Holder"},
        "_N = 0\ndef f():\n    global _N\n    _N += 1\n": {"_N"},
        "_M = {}\ndef f():\n    _M.clear()\n": {"_M"},
        "TABLE = {'a': 1}\ndef f(k):\n    return TABLE[k]\n": set(),
        "def f():\n    cache = {}\n    cache['a'] = 1\n    return cache\n": set(),
        "class C:\n    def f(self, x):\n        self.x = x\n": set(),
        "X = []\ndef f(X):\n    X.append(1)\n": set(),
        "@cache\ndef lookup(key):\n    return key\n": {"lookup"},
        "@functools.lru_cache(8)\ndef lookup(key):\n    return key\n": {"lookup"},
        "@cache\ndef pattern():\n    return 1\n": set(),
    }
    for source, expected in probes.items():
        assert mutated_module_state(source) == expected, source
