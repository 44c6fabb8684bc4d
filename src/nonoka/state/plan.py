"""Plans: a DAG of steps whose dependency layers are computed once, at construction.

A step runs a tool with arguments, or asks the model a prompt. An argument (or a part of
the prompt) may refer to another step's output with ``Ref("step_id")``; a reference is a
dependency even when ``depends_on`` does not list it.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nonoka.errors import ConfigurationError

_PROMPT_REF = re.compile(r"\{\{\s*([A-Za-z0-9_.-]+?)(?:\.([A-Za-z0-9_.]+))?\s*\}\}")


class Ref(BaseModel):
    """A reference to another step's output, optionally to a path inside it (``a.b.0``)."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    ref: str = Field(alias="$ref")
    path: str | None = None

    def __init__(self, step_id: str | None = None, /, path: str | None = None, **data: Any):
        if step_id is not None:
            data["$ref"] = step_id
        super().__init__(path=path, **data)

    def resolve(self, outputs: dict[str, Any]) -> Any:
        value = outputs[self.ref]
        for part in (self.path or "").split("."):
            if not part:
                continue
            value = value[int(part)] if isinstance(value, list) else value[part]
        return value


class Step(BaseModel):
    """One node of a plan: run ``tool`` with ``args``, or ask the model ``prompt``.

    In a prompt, ``{{step_id}}`` or ``{{step_id.path}}`` is replaced by that output.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    prompt: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    max_attempts: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        if (self.tool is None) == (self.prompt is None):
            raise ValueError(f"step {self.id!r} needs exactly one of 'tool' or 'prompt'")
        return self

    def references(self) -> set[str]:
        """Every step this one reads from: explicit dependencies and references."""
        found = set(self.depends_on)
        _collect_refs(self.args, found)
        if self.prompt:
            found.update(m.group(1) for m in _PROMPT_REF.finditer(self.prompt))
        return found

    def resolved_args(self, outputs: dict[str, Any]) -> dict[str, Any]:
        resolved = _resolve(self.args, outputs)
        assert isinstance(resolved, dict)
        return resolved

    def resolved_prompt(self, outputs: dict[str, Any]) -> str:
        def substitute(match: re.Match[str]) -> str:
            value = Ref(match.group(1), path=match.group(2)).resolve(outputs)
            return value if isinstance(value, str) else repr(value)

        return _PROMPT_REF.sub(substitute, self.prompt or "")


def _is_ref(value: Any) -> bool:
    return isinstance(value, Ref) or (isinstance(value, dict) and "$ref" in value)


def _collect_refs(value: Any, found: set[str]) -> None:
    if isinstance(value, Ref):
        found.add(value.ref)
    elif isinstance(value, dict):
        if "$ref" in value:
            found.add(str(value["$ref"]))
        for item in value.values():
            _collect_refs(item, found)
    elif isinstance(value, list):
        for item in value:
            _collect_refs(item, found)


def _resolve(value: Any, outputs: dict[str, Any]) -> Any:
    if _is_ref(value):
        ref = value if isinstance(value, Ref) else Ref.model_validate(value)
        return ref.resolve(outputs)
    if isinstance(value, dict):
        return {k: _resolve(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, outputs) for v in value]
    return value


class Plan(BaseModel):
    """Steps plus their dependency layers; steps of one layer may run concurrently."""

    model_config = ConfigDict(frozen=True)

    steps: list[Step]
    layers: list[list[str]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _compute_layers(self) -> Plan:
        if not self.layers:
            object.__setattr__(self, "layers", compute_layers(self.steps))
        return self

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)


def compute_layers(steps: list[Step]) -> list[list[str]]:
    """Kahn's algorithm by levels; raises on unknown references, duplicates and cycles."""
    ids = [s.id for s in steps]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise ConfigurationError(f"plan has duplicate step ids: {', '.join(dupes)}")
    deps = {s.id: s.references() for s in steps}
    for step_id, refs in deps.items():
        unknown = refs - set(ids)
        if unknown:
            raise ConfigurationError(
                f"step {step_id!r} depends on unknown step(s): {', '.join(sorted(unknown))}"
            )
    layers: list[list[str]] = []
    done: set[str] = set()
    remaining = list(ids)
    while remaining:
        layer = [i for i in remaining if deps[i] <= done]
        if not layer:
            raise ConfigurationError(
                f"plan has a dependency cycle among: {', '.join(sorted(remaining))}"
            )
        layers.append(layer)
        done.update(layer)
        remaining = [i for i in remaining if i not in done]
    return layers
