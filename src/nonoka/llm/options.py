"""Which of a call's provider-specific options (``CallOptions.extra``) reach the request
body, shared by every adapter. Standard library only.

A host hands over options by the names it knows them by: OpenCode puts a model's
``options`` from ``opencode.json`` into ``extra`` as written there, camelCase included
(``parallelToolCalls``, ``thinking: {type, budgetTokens}``). Each adapter knows its API's
body fields (``known``); an option is sent when its name, or its snake_case form, is one
of them, under the API's name. Anything else is not sent (the real APIs refuse unknown
fields with a 400) and is named in a ``model_option_dropped`` warning, unless the user
names it in the ``passthrough`` option: ``{"passthrough": ["guided_json"], "guided_json":
{...}}`` sends ``guided_json`` exactly as given (``passthrough`` itself is never sent).

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

TYPE_CHECKING = False  # stdlib only when loaded: the base module (pydantic) comes lazily
if TYPE_CHECKING:
    from nonoka.llm.base import ModelWarning

PASSTHROUGH = "passthrough"
"""The option that names options to send as given (a list of names, or one name)."""

_HUMP = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake(name: str) -> str:
    """``budgetTokens`` → ``budget_tokens``; a snake_case name stays as it is."""
    return _HUMP.sub(r"_\1", name).lower() if any(c.isupper() for c in name) else name


def snake_keys(value: Any) -> Any:
    """A mapping with its keys (and its nested mappings' keys) in snake_case."""
    if isinstance(value, Mapping):
        return {snake(str(k)): snake_keys(v) for k, v in value.items()}
    return value


def passthrough_names(extra: Mapping[str, Any]) -> frozenset[str]:
    """The names the ``passthrough`` option lists."""
    named = extra.get(PASSTHROUGH)
    if isinstance(named, str):
        return frozenset({named})
    if isinstance(named, list | tuple):
        return frozenset(str(n) for n in named)
    return frozenset()


def sorted_extra(extra: Mapping[str, Any], known: Collection[str], *,
                 own: Collection[str] = (), reserved: Collection[str] = ()
                 ) -> tuple[dict[str, Any], list[str]]:
    """``extra`` split into the fields to send (by the API's names, in their order) and
    the names of the options not sent. ``own``: options the adapter reads itself (never
    sent, never warned of); ``reserved``: body fields the adapter writes itself, which
    no option replaces (a passthrough one included)."""
    through = passthrough_names(extra)
    sent: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in extra.items():
        if name == PASSTHROUGH or name in own:
            continue
        wire = name if name in through or name in known else snake(name)
        if wire in reserved:
            dropped.append(name)
        elif name in through or wire in known:
            sent.setdefault(wire, value)
        else:
            dropped.append(name)
    return sent, dropped


def dropped_warning(dropped: Collection[str] | Mapping[str, str], api: str) -> ModelWarning:
    """The warning naming the options not sent (or not sent as given) to ``api``: a
    collection of names the API has no field for, or a mapping from each name to why."""
    from nonoka.llm.base import OPTION_DROPPED, ModelWarning

    reasons = dict(dropped) if isinstance(dropped, Mapping) else dict.fromkeys(dropped, "")
    unknown = sorted(n for n, why in reasons.items() if not why)
    said = [f"{n} ({why})" for n, why in sorted(reasons.items()) if why]
    if unknown:
        said.insert(0, f"{', '.join(unknown)} ({api} has no such field that nonoka knows, "
                       "and the API refuses fields it does not know)")
    return ModelWarning(OPTION_DROPPED, (
        f"call options not sent as given: {'; '.join(said)}; to send an option exactly as "
        f'given, name it in the model\'s options, e.g. "{PASSTHROUGH}": '
        f'["{sorted(reasons)[0]}"]'), {"options": sorted(reasons), "api": api})
