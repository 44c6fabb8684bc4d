"""The fast builders of frozen models give what Pydantic's own would."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.frozen import construct, replace
from nonoka.state.ledger import RuntimeUsage, SessionRuntimeState
from nonoka.state.session_state import SessionState, TraceEvent


def _same(a: BaseModel, b: BaseModel) -> None:
    assert type(a) is type(b)
    assert a == b
    assert a.model_fields_set == b.model_fields_set
    assert a.model_dump_json() == b.model_dump_json()


def test_to_state_builds_what_model_construct_builds() -> None:
    session = Session("frozen")
    session.memory.append(MemoryEntry.make("user", "hi"))
    session.add_trace("turn", "one")
    state = session.to_state()
    values = {name: getattr(state, name) for name in SessionState.model_fields}
    _same(state, SessionState.model_construct(**values))
    _same(state, SessionState.model_validate(state.model_dump()))
    with pytest.raises(ValidationError, match="frozen"):
        state.turn_count = 3  # type: ignore[misc]


def test_replace_is_model_copy_with_an_update() -> None:
    usage = RuntimeUsage(model_turns=2)
    runtime = SessionRuntimeState(usage=usage)
    changed = replace(runtime, usage=replace(usage, wall_seconds=1.5))
    _same(changed, runtime.model_copy(
        update={"usage": usage.model_copy(update={"wall_seconds": 1.5})}))
    assert runtime.usage.wall_seconds == 0.0  # the original is untouched
    assert changed.usage.model_fields_set == {"model_turns", "wall_seconds"}


class _Private(BaseModel):
    model_config = ConfigDict(frozen=True)
    a: int = 0
    _seen: list[int] = PrivateAttr(default_factory=list)


def test_models_with_more_than_fields_fall_back_to_pydantic() -> None:
    """Private attributes, or values that do not name every field: Pydantic's own
    builders, which fill in what the fast path does not."""
    built = construct(_Private, {"a": 1})
    assert built._seen == []
    assert replace(built, a=2)._seen == []
    partial: dict[str, Any] = {"kind": "k"}
    event = construct(TraceEvent, partial)
    assert event.model_fields_set == {"kind"} and event.detail == ""
