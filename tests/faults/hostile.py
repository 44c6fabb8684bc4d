"""One long-lived ``nonoka bridge`` fed hostile lines, and the strategies that make them.

A bridge serves many requests in a row, so hundreds of hypothesis examples share one
process: each line is written, the events are read (with a timeout: a hang fails the
test) until the ``finish`` that ends every answer. The expected error code of a line is
computed by the protocol's own checks (``frames.check_request_frame`` and
``protocol.decode_request``), so the oracle is exact for every unusable line.
"""

from __future__ import annotations

import hashlib
import json
import queue
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from nonoka.protocol import frames
from nonoka.protocol.frames import REQUEST_TYPES, EventType, RequestType
from nonoka.protocol.models import decode_request
from nonoka.protocol.values import ERROR_CODES, ErrorCode, FinishReason

BRIDGE = [sys.executable, "-m", "nonoka", "bridge"]
MAX_FRAME = 4096
"""``NONOKA_MAX_FRAME_BYTES`` for the fuzzed bridge, so huge frames are cheap to make."""
READ_TIMEOUT = 20.0

SKIP = "skip"
"""A line the bridge rightly answers with nothing: a ``cancel`` when nothing runs."""


class LongLivedBridge:
    """A bridge process kept open across many requests, read by a thread with timeouts."""

    def __init__(self, project: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=project, env=env)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr = bytearray()
        self.served = 0
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line

    def exchange(self, line: bytes) -> list[dict[str, Any]]:
        """Send one line; the events up to and including its ``finish``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        events: list[dict[str, Any]] = []
        while True:
            try:
                raw = self.lines.get(timeout=READ_TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"the bridge hung: no finish within {READ_TIMEOUT} s "
                                     f"after {events}") from None
            assert raw is not None, f"the bridge exited: {self.stderr.decode()[-2000:]}"
            events.append(json.loads(raw))
            if events[-1]["type"] == EventType.FINISH:
                self.served += 1
                return events

    def healthy(self) -> None:
        assert self.proc.poll() is None, f"the bridge died: {self.stderr.decode()[-2000:]}"
        assert b"Traceback" not in self.stderr, self.stderr.decode()[-3000:]

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return code


def expected_code(line: bytes) -> str | None:
    """The error code the protocol's checks give ``line``; ``None`` for a usable request."""
    try:
        obj = frames.check_request_frame(line, max_frame_bytes=MAX_FRAME)
    except frames.ProtocolError as error:
        return error.code
    if obj.get("type") == RequestType.CANCEL:
        return SKIP
    try:
        decode_request(line, max_frame_bytes=MAX_FRAME)
    except frames.ProtocolError as error:
        return error.code
    return None


def check_answer(line: bytes, events: list[dict[str, Any]]) -> str | None:
    """Assert the protocol's promises about the answer to ``line``; its error code."""
    code = expected_code(line)
    kinds = [e["type"] for e in events]
    assert kinds[-1] == EventType.FINISH and kinds.count(EventType.FINISH) == 1, kinds
    errors = [e for e in events if e["type"] == EventType.ERROR]
    for error in errors:
        assert error["code"] in ERROR_CODES, error
        assert error["message"], error
    if errors:
        assert events[-1]["finish_reason"] == FinishReason.ERROR, events
    if code is None:  # a usable request: acknowledged, run, finished
        assert kinds[0] == EventType.PROTOCOL_ACK, kinds
        return errors[0]["code"] if errors else None
    assert len(errors) == 1 and errors[0]["code"] == code, (code, events)
    if code == ErrorCode.INVALID_REQUEST and kinds[0] == EventType.PROTOCOL_ACK:
        assert kinds == ["protocol_ack", "error", "finish"], kinds  # valid frame, bad fields
    else:
        assert kinds == ["error", "finish"], kinds
    return code


def session_digest(db: Path, session_id: str) -> str:
    """A digest of everything stored for one session's state (snapshot, entries, steps)."""
    digest = hashlib.sha256()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for table in ("checkpoints", "session_entries", "step_updates"):
            rows = con.execute(f"SELECT * FROM {table} WHERE session_id = ? ORDER BY 2",
                               (session_id,)).fetchall()
            digest.update(repr((table, rows)).encode())
    finally:
        con.close()
    return digest.hexdigest()


# -- strategies ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)

roles = st.sampled_from(["user", "assistant", "system", "tool"])
messages = st.lists(
    st.fixed_dictionaries({"role": roles, "content": st.text(max_size=40)},
                          optional={"tool_call_id": st.text(min_size=1, max_size=10)}),
    min_size=1, max_size=4).map(
        lambda ms: [m if m["role"] != "tool" or "tool_call_id" in m
                    else {**m, "tool_call_id": "t1"} for m in ms])


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A chat request the bridge must accept (it runs against the scripted model)."""
    request: dict[str, Any] = {"type": "chat", "protocol": {"version": "1"},
                               "messages": draw(messages)}
    if not any(m["role"] == "user" for m in request["messages"]):
        request["messages"].append({"role": "user", "content": draw(st.text(max_size=20))})
    request["request_id"] = draw(st.text(min_size=1, max_size=12))
    if draw(st.booleans()):
        request["new_session"] = draw(st.booleans())
    if draw(st.booleans()):
        request["session_id"] = draw(st.sampled_from(
            ["", "00000000-0000-0000-0000-000000000000", "no-such-session"]))
    if draw(st.booleans()):
        request["tools"] = [{"name": "read", "parameters": {"type": "object"}}]
    if draw(st.booleans()):
        request["limits"] = {"max_model_turns": draw(st.integers(0, 3))}
    if draw(st.booleans()):
        request["extra_field"] = draw(json_values)  # unknown fields are ignored
    return request


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def mutated_requests(draw: st.DrawFn) -> bytes:
    """A valid request with one field deleted, retyped, or replaced by any JSON value."""
    request = draw(valid_requests())
    paths: list[tuple[Any, ...]] = [(k,) for k in request]
    paths += [("messages", i, k) for i, m in enumerate(request["messages"]) for k in m]
    paths += [("protocol", "version"), ("protocol", "required_capabilities")]
    path = draw(st.sampled_from(paths))
    parent: Any = request
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["delete", "replace", "wrong_type"]))
    if action == "delete":
        parent.pop(path[-1], None)
    elif action == "replace":
        parent[path[-1]] = draw(json_values)
    else:
        current = parent.get(path[-1])
        parent[path[-1]] = draw(st.sampled_from(
            [[current], {"value": current}, json.dumps(current), 5, True, None]))
    return _dump(request)


raw_lines = st.binary(min_size=1, max_size=300).map(lambda b: b.replace(b"\n", b" ")).filter(
    lambda b: bool(b.strip()))
"""Random bytes on one line (blank lines are skipped by the bridge, as framing says)."""


@st.composite
def truncated_lines(draw: st.DrawFn) -> bytes:
    line = _dump(draw(valid_requests()))
    return line[:draw(st.integers(1, len(line) - 1))]


BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
            b"\xe2\x82", b"\x80"]


@st.composite
def invalid_utf8_lines(draw: st.DrawFn) -> bytes:
    line = _dump(draw(valid_requests()))
    at = draw(st.integers(0, len(line)))
    return line[:at] + draw(st.sampled_from(BAD_UTF8)) + line[at:]


@st.composite
def huge_lines(draw: st.DrawFn) -> bytes:
    request = draw(valid_requests())
    request["messages"][0]["content"] = "x" * draw(st.integers(MAX_FRAME, 8 * MAX_FRAME))
    return _dump(request)


@st.composite
def deep_lines(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(50, 1900))
    nested = "[" * depth + "]" * depth if draw(st.booleans()) else '{"a":' * depth + "1" + \
        "}" * depth
    where = draw(st.sampled_from(["line", "content", "extra", "parameters"]))
    if where == "line":
        return nested.encode()
    base = '{"type":"chat","protocol":{"version":"1"},"messages":[{"role":"user","content":'
    if where == "content":
        return f"{base}{nested}}}]}}".encode()
    if where == "extra":
        return f'{base}"hi"}}],"extra":{nested}}}'.encode()
    return (f'{base}"hi"}}],"tools":[{{"name":"t","parameters":{{"type":"object",'
            f'"x":{nested}}}}}]}}').encode()


unknown_types = st.one_of(
    st.fixed_dictionaries({"type": st.text(max_size=12).filter(
        lambda t: t not in REQUEST_TYPES)}, optional={"request_id": st.text(max_size=8)}),
    st.fixed_dictionaries({"type": st.just("chat"), "protocol": st.just({"version": "1"}),
                           "messages": st.lists(st.fixed_dictionaries({
                               "role": st.text(max_size=10).filter(
                                   lambda r: r not in ("user", "assistant", "system", "tool")),
                               "content": st.text(max_size=10)}), min_size=1, max_size=2)}),
    st.fixed_dictionaries({"type": st.just("chat"), "protocol": st.fixed_dictionaries({
        "version": json_values.filter(lambda v: v != "1")}),
        "messages": st.just([{"role": "user", "content": "x"}])}),
).map(_dump)
