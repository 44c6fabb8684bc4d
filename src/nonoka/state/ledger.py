"""The runtime ledger: limits, what has been used, and why a run ended.

The ledger is part of the checkpoint. A resumed session restores it and never starts a
fresh one, so a budget cannot be dodged by killing the process.

``wall_timeout_seconds`` bounds the time the session spent *running* (summed across every
process that ran it, so a session paused while a host runs tools does not age);
``deadline_at`` (from ``deadline_seconds``) is an absolute point in time after which
nothing more runs.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

TerminationReason = Literal["completed", "limit", "cancelled", "error"]


class RuntimeLimits(BaseModel):
    """What a session may spend. ``None`` means unlimited."""

    model_config = ConfigDict(frozen=True)

    max_model_turns: int | None = None
    max_tool_calls: int | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    wall_timeout_seconds: float | None = None
    deadline_seconds: float | None = None
    """Lifetime from the session's start; sets the ledger's absolute ``deadline_at``."""
    max_context_tokens: int | None = None
    """Working-memory budget; above it the conversation is compacted."""
    summarize_on_compaction: bool = False
    """Compact by asking the model for a summary instead of trimming the oldest turns."""

    def merged(self, override: RuntimeLimits | None) -> RuntimeLimits:
        """These limits with every field the override sets replacing ours."""
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_unset=True))


class RuntimeUsage(BaseModel):
    """What a session has spent so far, across every process that ran it."""

    model_config = ConfigDict(frozen=True)

    model_turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    """Every input token, cached ones included."""
    output_tokens: int = 0
    """Every output token, reasoning ones included."""
    cost_usd: float = 0.0
    wall_seconds: float = 0.0
    cache_read_tokens: int = 0
    """The part of ``input_tokens`` read from a provider's prompt cache."""
    cache_write_tokens: int = 0
    """The part of ``input_tokens`` written to a provider's prompt cache."""
    reasoning_tokens: int = 0
    """The part of ``output_tokens`` spent reasoning."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @field_serializer("wall_seconds")
    def _to_the_millisecond(self, seconds: float) -> float:
        """Stored to the millisecond: a float's full digits change length from one save
        to the next about twice as often, and each change moves the rest of the
        snapshot, so SQLite writes its overflow pages again (bench/README.md,
        ``store_size.py``)."""
        return round(seconds, 3)


class Termination(BaseModel):
    """Why a run stopped; ``detail`` is written for a person."""

    model_config = ConfigDict(frozen=True)

    reason: TerminationReason
    detail: str = ""
    limit: str | None = None
    at: float = Field(default_factory=time.time)


class SessionRuntimeState(BaseModel):
    """Checkpoint-owned runtime state. Resumes restore it; they never recreate it."""

    model_config = ConfigDict(frozen=True)

    limits: RuntimeLimits = Field(default_factory=RuntimeLimits)
    usage: RuntimeUsage = Field(default_factory=RuntimeUsage)
    started_at: float = Field(default_factory=time.time)
    deadline_at: float | None = None
    cancelled_at: float | None = None
    termination: Termination | None = None


def exceeded_limit(
    limits: RuntimeLimits, usage: RuntimeUsage, deadline_at: float | None, now: float
) -> Termination | None:
    """The first limit that the usage has reached, as a termination, or ``None``."""
    checks: list[tuple[str, float | None, float, str]] = [
        ("max_model_turns", limits.max_model_turns, usage.model_turns, "model turns"),
        ("max_tool_calls", limits.max_tool_calls, usage.tool_calls, "tool calls"),
        ("max_total_tokens", limits.max_total_tokens, usage.total_tokens, "tokens"),
        ("max_cost_usd", limits.max_cost_usd, usage.cost_usd, "USD spent"),
        ("wall_timeout_seconds", limits.wall_timeout_seconds, usage.wall_seconds,
         "seconds of running time"),
    ]
    for name, limit, used, unit in checks:
        if limit is not None and used >= limit:
            return Termination(reason="limit", limit=name,
                               detail=f"{name} reached: {used:g} of {limit:g} {unit} used")
    if deadline_at is not None and now >= deadline_at:
        return Termination(reason="limit", limit="deadline_at",
                           detail="the session's deadline has passed")
    return None
