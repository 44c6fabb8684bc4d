"""A TEST PEER standing in for ``nonoka bridge``: it records requests and replays a script.

Not a bridge. The provider's own unit tests point ``command`` at this script to check
what the provider sends and how it copes with a peer that dies, hangs or writes garbage.
Every line it receives (the request, any ``cancel``) is appended verbatim to ``--record``.
Events are built with ``nonoka.protocol.models``, so they are valid by construction.

Modes (``--mode``):

- ``reply``: ack, session_init, warnings, text, tool calls, usage, finish.
- ``exit``: read the request, write ``--stderr`` to stderr, exit with ``--exit-code``.
- ``garbage``: read the request, print a non-protocol line, exit 0.
- ``ack-then-exit``: ack, then exit 0 without ``finish``.
- ``hang``: ack + session_init, then wait; a ``cancel`` line or SIGTERM ends it with
  ``finish`` (``cancelled``).
- ``stubborn``: like ``hang`` but ignores ``cancel`` and SIGTERM (only SIGKILL ends it).
- ``deaf``: never reads its input (SIGTERM ends it).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

from nonoka.protocol.frames import dump_line
from nonoka.protocol.models import (
    BaseEvent,
    ChatRequest,
    Finish,
    ProtocolAck,
    SessionInit,
    TextDelta,
    ToolCallEvent,
    UsageEvent,
    UsageTotals,
    WarningEvent,
    decode_request,
    encode_event,
)


def main() -> None:
    args = _parse()
    if args.mode == "deaf":
        time.sleep(3600)
    record = Path(args.record) if args.record else None
    line = _receive(record)
    if args.mode == "exit":
        sys.stderr.write(args.stderr)
        sys.stderr.flush()
        sys.exit(args.exit_code)
    if args.mode == "garbage":
        _send_raw(b"this is not a protocol line\n")
        return
    request = decode_request(line)
    assert isinstance(request, ChatRequest)
    rid = request.request_id
    emit = _emitter(rid)
    if args.stderr_flood:
        sys.stderr.write("x" * args.stderr_flood + "\nflood tail marker\n")
        sys.stderr.flush()
    emit(ProtocolAck(server_version="peer"))
    if args.mode == "ack-then-exit":
        return
    if args.unknown_event:
        _send_raw(dump_line({"type": "from_the_future", "request_id": rid}))
    session_id = args.session_id or request.session_id or f"peer-{uuid.uuid4().hex[:12]}"
    emit(SessionInit(session_id=session_id, recovered=bool(args.recovered),
                     recovery_reason=args.recovered, forked_from=args.forked_from,
                     fork_point=2 if args.forked_from else None))
    if args.mode in ("hang", "stubborn"):
        _wait_for_cancel(record, emit, stubborn=args.mode == "stubborn")
    for code in args.warning:
        emit(WarningEvent(code=code, message=f"peer warning {code}"))
    for text in args.text:
        emit(TextDelta(text=text))
    for index, spec in enumerate(args.tool_call):
        name, _, arguments = spec.partition("=")
        emit(ToolCallEvent(tool_call_id=f"call_{index + 1}", tool_name=name,
                           arguments=arguments or "{}", executed_by="host"))
    emit(UsageEvent(input_tokens=7, output_tokens=3, cost_usd=0.5))
    emit(UsageEvent(input_tokens=1, output_tokens=2))
    reason = "tool_calls" if args.tool_call else "stop"
    emit(Finish(finish_reason=reason, revision=args.revision,
                usage=UsageTotals(input_tokens=8, output_tokens=5, cost_usd=0.5)))
    if args.exit_code:
        sys.exit(args.exit_code)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--record", help="append every received line to this file")
    parser.add_argument("--mode", default="reply",
                        choices=["reply", "exit", "garbage", "ack-then-exit", "hang",
                                 "stubborn", "deaf"])
    parser.add_argument("--session-id", help="the id session_init reports")
    parser.add_argument("--recovered", help="report recovered=true with this reason")
    parser.add_argument("--forked-from", help="report a branch of this session")
    parser.add_argument("--revision", type=int, help="the revision finish reports")
    parser.add_argument("--text", action="append", default=[])
    parser.add_argument("--tool-call", action="append", default=[], help="NAME=ARGUMENTS")
    parser.add_argument("--warning", action="append", default=[])
    parser.add_argument("--stderr", default="")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--stderr-flood", type=int, default=0)
    parser.add_argument("--unknown-event", action="store_true")
    return parser.parse_args()


def _receive(record: Path | None) -> bytes:
    line = sys.stdin.buffer.readline()
    if record is not None and line:
        with record.open("ab") as handle:
            handle.write(line if line.endswith(b"\n") else line + b"\n")
    return line


def _send_raw(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _emitter(request_id: str | None) -> Any:
    def emit(event: BaseEvent) -> None:
        _send_raw(encode_event(event.model_copy(update={"request_id": request_id})))
    return emit


def _wait_for_cancel(record: Path | None, emit: Any, *, stubborn: bool) -> NoReturn:
    def cancelled(*_: object) -> NoReturn:
        emit(Finish(finish_reason="cancelled"))
        sys.exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if stubborn else cancelled)
    while True:
        line = _receive(record)
        if not line:  # end of input does not cancel a running request
            while True:
                time.sleep(3600)
        if b'"cancel"' in line and not stubborn:
            cancelled()


if __name__ == "__main__":
    main()
