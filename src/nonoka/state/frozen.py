"""Building frozen Pydantic models from values that are already valid, cheaply.

``Session.to_state()`` runs twice a turn and builds a ``SessionState`` of ~20 fields from
values the session already holds typed; ``model_construct`` spends ~8 µs on that (default
handling, alias lookups), ``model_copy(update=...)`` ~3 µs a copy. These helpers set the
instance's dict directly (~1 µs), which is only right for models without private
attributes or extra fields, so they check the class and fall back otherwise.

Internal: this module's layout may change.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_set = object.__setattr__


_FIELDS: dict[type[BaseModel], frozenset[str] | None] = {}


def _fields(cls: type[BaseModel]) -> frozenset[str] | None:
    """The field names, when instances hold nothing but their fields (what the fast
    paths write); else ``None``. Kept per class: ``model_fields`` is slow to read."""
    try:
        return _FIELDS[cls]
    except KeyError:
        plain = (not cls.__private_attributes__ and cls.model_config.get("extra") != "allow"
                 and not cls.__pydantic_post_init__)
        names = _FIELDS[cls] = frozenset(cls.model_fields) if plain else None
        return names


def construct(cls: type[M], values: dict[str, Any]) -> M:
    """``cls.model_construct(**values)`` for ``values`` naming every field, already
    valid (``values`` becomes the instance's dict: pass a fresh one)."""
    names = _fields(cls)
    if names is None or values.keys() != names:
        return cls.model_construct(**values)
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", set(values))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


def replace(model: M, **changes: Any) -> M:
    """``model.model_copy(update=changes)``: a shallow copy with ``changes`` (valid
    values of existing fields) applied, without validation."""
    cls = type(model)
    names = _fields(cls)
    if names is None or not changes.keys() <= names:
        return model.model_copy(update=changes)
    copy = cls.__new__(cls)
    _set(copy, "__dict__", {**model.__dict__, **changes})
    _set(copy, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    _set(copy, "__pydantic_extra__", None)
    _set(copy, "__pydantic_private__", None)
    return copy
