"""How a turn ended, in the finish reasons every front end reports.

The strings are the protocol's finish reasons (``docs/protocol.md``); the timeline's
``finish`` entries and ``nonoka run --json`` use the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nonoka.state.session_state import SessionStatus
from nonoka.turn.journal import TurnUsage

if TYPE_CHECKING:
    from nonoka.errors import Failure
    from nonoka.runtime.paradigms.env import RunResult

FINISH_STOP = "stop"
FINISH_TOOL_CALLS = "tool_calls"
FINISH_CANCELLED = "cancelled"
FINISH_ERROR = "error"
FINISH_LIMIT = "limit"
FINISH_REASONS = (FINISH_STOP, FINISH_TOOL_CALLS, FINISH_CANCELLED, FINISH_ERROR, FINISH_LIMIT)


def finish_reason_of(result: RunResult) -> str:
    """How a run ended, as a finish reason."""
    term = result.termination
    if result.status == SessionStatus.COMPLETED:
        return FINISH_STOP
    if result.status == SessionStatus.PAUSED:
        return FINISH_TOOL_CALLS if result.pending_tool_calls else FINISH_STOP
    if result.status == SessionStatus.CANCELLED:
        return FINISH_CANCELLED
    if term is not None and term.reason == "limit":
        return FINISH_LIMIT
    return FINISH_ERROR


@dataclass
class TurnOutcome:
    """What a turn came to; the front end reports it, then calls ``TurnService.finish``.

    ``result`` is ``None`` when the turn raised (``failure`` says what) or was cancelled;
    ``session_id`` is ``None`` when it ended before a session was chosen.
    """

    finish_reason: str
    session_id: str | None = None
    new: bool = False
    """Whether this turn created the session."""
    result: RunResult | None = None
    failure: Failure | None = None
    """Why the turn ended in ``error``: a raised error or a failed run, as the host hears it."""
    usage: TurnUsage = field(default_factory=TurnUsage)
    model_finish: str | None = None
    """Why the model stopped the turn's last answer, as the adapter normalised it
    (``length``, ``content_filter``...); ``None`` when no model answered in this turn."""
