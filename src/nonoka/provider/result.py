"""What one provider call produced, gathered from the bridge's events as they arrive."""

from __future__ import annotations

from dataclasses import dataclass, field

from nonoka.protocol.models import (
    ChatRequest,
    ErrorEvent,
    Event,
    Finish,
    FinishTermination,
    ProtocolAck,
    SessionInit,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UsageTotals,
    WarningEvent,
)
from nonoka.protocol.values import ExecutedBy, FinishReason
from nonoka.state.messages import Message, ToolCall

__all__ = ("ProviderResult",)


@dataclass
class ProviderResult:
    """The outcome of one request: its text, tool calls, usage and how it ended.

    Fields fill in while events arrive, so a ``ProviderStream`` consumer can look at them
    mid-stream. ``events`` keeps every event in order for anything the summary leaves out.
    """

    request: ChatRequest
    """The request exactly as it was sent."""
    events: list[Event] = field(default_factory=list)
    ack: ProtocolAck | None = None
    session_id: str | None = None
    recovered: bool = False
    recovery_reason: str | None = None
    tool_calls: list[ToolCallEvent] = field(default_factory=list)
    """Every tool call, host-run or nonoka-run; ``host_tool_calls`` filters the former."""
    tool_results: list[ToolResultEvent] = field(default_factory=list)
    call_usage: list[UsageEvent] = field(default_factory=list)
    """Usage of each model call, in order (not cumulative)."""
    usage: UsageTotals | None = None
    """The request's total, from ``finish``."""
    finish_reason: FinishReason | None = None
    termination: FinishTermination | None = None
    warnings: list[WarningEvent] = field(default_factory=list)
    errors: list[ErrorEvent] = field(default_factory=list)
    killed: bool = False
    """The provider had to signal the bridge (SIGTERM/SIGKILL) to end the request; when
    that happened after a cancel and no ``finish`` came, ``finish_reason`` is set to
    ``cancelled`` by the provider rather than the bridge."""
    exit_code: int | None = None
    stderr_tail: str = ""
    _text: list[str] = field(default_factory=list, repr=False)

    @property
    def request_id(self) -> str | None:
        return self.request.request_id

    @property
    def text(self) -> str:
        """All streamed assistant text, concatenated."""
        return "".join(self._text)

    @property
    def ok(self) -> bool:
        """The turn completed, or paused for host tools."""
        return self.finish_reason in (FinishReason.STOP, FinishReason.TOOL_CALLS)

    @property
    def host_tool_calls(self) -> list[ToolCallEvent]:
        """Calls the host must run and answer with ``tool`` messages."""
        return [c for c in self.tool_calls if c.executed_by == ExecutedBy.HOST]

    def assistant_message(self) -> Message:
        """The assistant message to append to the host's history before the next request.

        It carries the text and the host-run tool calls. Calls nonoka ran itself are left
        out: the session already holds their results, and the host has none to send.
        """
        calls = [ToolCall(id=c.tool_call_id, name=c.tool_name, arguments=c.arguments)
                 for c in self.host_tool_calls]
        return Message(role="assistant", content=self.text, tool_calls=calls or None)

    def record(self, event: Event) -> None:
        """Fold one event into the summary."""
        self.events.append(event)
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ToolCallEvent):
            self.tool_calls.append(event)
        elif isinstance(event, ToolResultEvent):
            self.tool_results.append(event)
        elif isinstance(event, UsageEvent):
            self.call_usage.append(event)
        elif isinstance(event, WarningEvent):
            self.warnings.append(event)
        elif isinstance(event, ErrorEvent):
            self.errors.append(event)
        elif isinstance(event, SessionInit):
            self.session_id = event.session_id
            self.recovered = event.recovered
            self.recovery_reason = event.recovery_reason
        elif isinstance(event, ProtocolAck):
            self.ack = event
        elif isinstance(event, Finish):
            self.finish_reason = event.finish_reason
            self.usage = event.usage
            self.termination = event.termination
