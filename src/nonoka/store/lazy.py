"""The lazy exports every package of ``nonoka.store`` makes: a name is imported from its
module when it is first used, so importing a package imports nothing else.

Standard library only, and nothing at import (not even ``typing``): the bridge's early
path loads ``nonoka.store`` and ``nonoka.store.sqlite`` before pydantic, and a package
whose engine needs an extra (``postgres``) must import without it.
Internal: used by the packages' ``__init__`` only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's early path loads this module
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: each name of ``where`` is read from the
    module ``where`` gives it (relative to ``package``), imported then; any other name is
    an ``AttributeError``, as for a plain module."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        from importlib import import_module

        return getattr(import_module(f"{package}.{module}"), name)

    return __getattr__
