"""Hostile input, property-based, against one long-lived real bridge process.

Every unusable line gets an ``error`` with the code the protocol's own checks predict,
then a ``finish``; usable ones are run. The process never hangs (reads time out), never
prints a traceback and never dies; the seeded session's stored rows are byte-identical
afterwards. The example counts are recorded in ``docs/reliability.md``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nonoka.protocol.values import ErrorCode
from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.faults.hostile import (
    MAX_FRAME,
    SKIP,
    LongLivedBridge,
    check_answer,
    deep_lines,
    expected_code,
    huge_lines,
    invalid_utf8_lines,
    mutated_requests,
    raw_lines,
    session_digest,
    truncated_lines,
    unknown_types,
    valid_requests,
)

EXAMPLES = {"random bytes": 150, "mutated requests": 250, "truncated lines": 100,
            "invalid UTF-8": 80, "huge frames": 40, "deep nesting": 60,
            "unknown types": 100, "valid requests": 60, "tool results": 60}
"""Examples per family (about 900 in all, a few seconds against one process)."""
SCALE = float(os.environ.get("NONOKA_FUZZ_SCALE", "1"))
"""Multiplies every count, for a longer hunt: ``NONOKA_FUZZ_SCALE=20 pytest ...``."""

SEED = "seed me"
PENDING = "call_r"


def model(body: dict[str, Any]) -> Step:
    messages = body["messages"]
    if messages[-1].get("content") == SEED and body.get("tools"):
        return call("read", {"path": "x"}, id=PENDING)
    return text("ok")


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[tuple[LongLivedBridge, Path, str]]:
    """A project with a session paused on a host call, and one bridge serving it."""
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedOpenAIServer(model) as server:
        env = {**os.environ, "NONOKA_MODEL": "openai:test-model", "OPENAI_API_KEY": "sk-fuzz",
               "OPENAI_BASE_URL": server.base_url, "NONOKA_DATABASE_URL": "",
               "NONOKA_MAX_FRAME_BYTES": str(MAX_FRAME)}
        seeder = LongLivedBridge(project, env)
        events = seeder.exchange(json.dumps({
            "type": "chat", "protocol": {"version": "1"}, "new_session": True,
            "messages": [{"role": "user", "content": SEED}],
            "tools": [{"name": "read", "parameters": {"type": "object"}}]}).encode())
        assert seeder.close() == 0
        assert events[-1]["finish_reason"] == "tool_calls", events
        sid = next(e["session_id"] for e in events if e["type"] == "session_init")
        running = LongLivedBridge(project, env)
        yield running, project, sid
        running.close()


def tool_result_lines(sid: str) -> st.SearchStrategy[bytes]:
    """Results the paused session is not waiting for: unknown calls, or one call twice."""
    ask = {"role": "assistant", "content": "",
           "tool_calls": [{"id": PENDING, "name": "read", "arguments": '{"path":"x"}'}]}
    unknown = st.text(min_size=1, max_size=12).filter(lambda i: i != PENDING)
    answers = st.one_of(
        st.lists(unknown, min_size=1, max_size=3).map(lambda ids: [PENDING, *ids]),
        st.lists(unknown, min_size=1, max_size=3),
        st.integers(2, 4).map(lambda n: [PENDING] * n))

    def line(ids: list[str]) -> bytes:
        return json.dumps({
            "type": "chat", "protocol": {"version": "1"}, "session_id": sid,
            "tools": [{"name": "read", "parameters": {"type": "object"}}],
            "messages": [{"role": "user", "content": SEED}, ask,
                         *({"role": "tool", "tool_call_id": i, "content": "r"} for i in ids)],
        }).encode()

    return answers.map(line)


def test_hostile_lines_get_errors_and_change_nothing(
        bridge: tuple[LongLivedBridge, Path, str]) -> None:
    process, project, sid = bridge
    db = project / ".nonoka" / "sessions.db"
    before = session_digest(db, sid)
    codes: Counter[str] = Counter()
    ran: Counter[str] = Counter()
    families: dict[str, st.SearchStrategy[bytes]] = {
        "random bytes": raw_lines, "mutated requests": mutated_requests(),
        "truncated lines": truncated_lines(), "invalid UTF-8": invalid_utf8_lines(),
        "huge frames": huge_lines(), "deep nesting": deep_lines(),
        "unknown types": unknown_types,
        "valid requests": valid_requests().map(lambda r: json.dumps(r).encode()),
        "tool results": tool_result_lines(sid)}

    def fuzz(family: str, strategy: st.SearchStrategy[bytes]) -> None:
        @settings(max_examples=max(1, int(EXAMPLES[family] * SCALE)), deadline=None,
                  database=None,
                  suppress_health_check=list(HealthCheck))
        @given(line=strategy)
        def serve(line: bytes) -> None:
            if expected_code(line) == SKIP:
                return
            code = check_answer(line, process.exchange(line))
            codes[code or "(ran)"] += 1
            ran[family] += 1
            if family == "tool results":
                assert code == ErrorCode.TOOL_RESULT_MISMATCH, code
            process.healthy()

        serve()

    for family, strategy in families.items():
        fuzz(family, strategy)

    process.healthy()
    assert session_digest(db, sid) == before, "a hostile request changed the stored session"
    assert sum(ran.values()) >= 0.9 * SCALE * sum(EXAMPLES.values()), ran
    for family in ("truncated lines", "huge frames"):
        assert ran[family] > 0
    assert codes[ErrorCode.FRAME_TOO_LARGE] and codes[ErrorCode.INVALID_UTF8]
    assert codes[ErrorCode.INVALID_JSON] and codes[ErrorCode.INVALID_REQUEST]
    assert codes[ErrorCode.UNKNOWN_REQUEST_TYPE]
    print(f"\nserved {process.served} lines in one process: {dict(ran)}; codes {dict(codes)}")
