"""The real OpenCode, directly and through nonoka side by side (``test_side_by_side``'s
``World``): the host's headers reach the endpoint, a subagent's session is its parent's
child in nonoka, a model switch stays one nonoka line, and against an endpoint that stays
overloaded the endpoint sees as many requests through nonoka as directly (±1).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from nonoka import __version__
from nonoka.testing import call
from nonoka.testing.server import Step
from nonoka.testing.steps import HttpError
from tests.opencode.test_side_by_side import (
    RUN_TIMEOUT,
    World,
    _has_results,
    _opencode,
    case_of,
)

FORWARDED = ("x-session-id", "x-session-affinity", "x-parent-session-id")
"""The host headers every endpoint gets through nonoka as it does directly."""

OVERLOADED_RETRY_AFTER = 0.5
"""Seconds the overloaded endpoint asks for between attempts (OpenCode waits that long)."""

ATTEMPTS = 3
"""OpenCode's retries each path is watched for before it is stopped."""


class Links:
    """The cases of this file before ``test_side_by_side``'s script."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback

    def __call__(self, body: dict[str, Any]) -> Step:
        case = case_of(body)
        if body.get("tools") and case == "subagent" and not _has_results(body):
            return call("task", {"description": "find the notes",
                                 "prompt": "CASE-child Find the notes file.",
                                 "subagent_type": "general"}, id="call_task")
        if body.get("tools") and case == "overloaded":
            return HttpError(503, retry_after=OVERLOADED_RETRY_AFTER)
        step: Step = self.fallback(body)
        return step


@pytest.fixture(scope="module")
def world(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    setup = World(tmp_path_factory.mktemp("host-links"), _opencode(request))
    for server in setup.servers.values():
        server._script = Links(server._script)
    try:
        setup.configure()
        setup.start()
        yield setup
    finally:
        setup.close()


def _nonoka(world: World, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "nonoka", *args], cwd=world.path,
                          env=world.env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _sessions(world: World) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(_nonoka(world, "sessions", "list", "--json",
                                                    "--limit", "1000"))
    return rows


def _ok(run: Any) -> None:
    assert run.done.returncode == 0, run.done.stderr[-3000:]
    assert not run.rejections, run.rejections


def test_the_host_headers_reach_the_endpoint(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-headers Say hello.")
    _ok(direct)
    _ok(nonoka)
    for run, side in ((direct, "direct"), (nonoka, "nonoka")):
        headers = world.servers[side].headers[-len(run.requests):]
        chat = [h for h, body in zip(headers, run.requests, strict=True) if body.get("tools")]
        assert chat, side
        for sent in chat:
            assert sent.get("x-session-id") == run.session_id, (side, sent)
            assert sent.get("x-session-affinity") == run.session_id, (side, sent)
            assert "x-parent-session-id" not in sent, (side, sent)
    want = world.servers["direct"].headers[-1]
    got = world.servers["nonoka"].headers[-1]
    # The host's user agent as OpenCode gives it to a provider, and nonoka's; directly the
    # AI SDK's HTTP client appends its own (ai-sdk/provider-utils/..., runtime/...).
    host = want["user-agent"].split(" ai-sdk/")[0]
    assert host == "opencode/1.18.33"
    assert got["user-agent"] == f"{host} nonoka/{__version__}"
    assert got["authorization"] == want["authorization"]  # each side's own key (the same)


def test_a_subagent_is_its_parents_child_in_nonoka(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-subagent Delegate the search.")
    _ok(direct)
    _ok(nonoka)
    for run, side in ((direct, "direct"), (nonoka, "nonoka")):
        headers = world.servers[side].headers[-len(run.requests):]
        children = [h for h, body in zip(headers, run.requests, strict=True)
                    if case_of(body) == "child" and body.get("tools")]
        assert children, (side, [case_of(b) for b in run.requests])
        assert {h.get("x-parent-session-id") for h in children} == {run.session_id}, side
    rows = _sessions(world)
    parent = [r for r in rows if r["metadata"].get("host_session_id") == nonoka.session_id]
    assert len(parent) == 1, rows
    child = [r for r in rows if r["metadata"].get("host_parent_session_id")
             == nonoka.session_id]
    assert len(child) == 1, rows
    lines = _nonoka(world, "sessions", "list", "--tree", "--limit", "1000").splitlines()
    at = next(i for i, line in enumerate(lines) if parent[0]["session_id"][:8] in line)
    below = lines[at + 1:]
    mine = next(line for line in below if child[0]["session_id"][:8] in line)
    assert mine.lstrip("│ ").startswith(("└─ ", "├─ ")) and "subagent" in mine, lines
    shown = json.loads(_nonoka(world, "sessions", "show", child[0]["session_id"], "--json"))
    assert shown["lineage"]["parent_line"] == parent[0]["session_id"]


def test_a_model_switch_stays_one_nonoka_line(world: World) -> None:
    first = world.run("nonoka", "default", "CASE-switch Say hello.")
    _ok(first)
    again = world.run("nonoka", "openai:opts", "CASE-switch Say it again.",
                      session=first.session_id)
    _ok(again)
    assert [b["model"] for b in first.requests + again.requests if b.get("tools")] == \
        ["m", "opts"]
    rows = [r for r in _sessions(world)
            if r["metadata"].get("host_session_id") == first.session_id]
    assert len(rows) == 1, rows
    assert rows[0]["model"] == "openai:opts"
    shown = json.loads(_nonoka(world, "sessions", "show", rows[0]["session_id"], "--json",
                               "--entries"))
    assert [e["role"] for e in shown["entries"]].count("assistant") == 2


def _status(world: World, session: str) -> dict[str, Any]:
    statuses: dict[str, Any] = world.get("/session/status")
    found: dict[str, Any] = statuses.get(session) or {}
    return found


def _overloaded(world: World, side: str, model: str) -> tuple[int, int]:
    """Start a message against the overloaded endpoint; when OpenCode reports its retry
    number ``ATTEMPTS``, how many requests the endpoint had seen — and the retry number
    OpenCode reported. The message is then stopped."""
    provider = "scripted" if side == "direct" else "nonoka"
    server = world.servers[side]
    session = world.post("/session", {"title": f"{side} overloaded"})["id"]
    before = len(server.requests)
    body = {"model": {"providerID": provider, "modelID": model},
            "parts": [{"type": "text", "text": "CASE-overloaded Say hello."}]}
    sender = threading.Thread(target=_post_quietly, args=(world, session, body), daemon=True)
    sender.start()
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while True:
            status = _status(world, session)
            if status.get("type") == "retry" and int(status.get("attempt", 0)) >= ATTEMPTS:
                return len(server.requests) - before, int(status["attempt"])
            assert time.monotonic() < deadline, (status, len(server.requests) - before)
            time.sleep(0.05)
    finally:
        request = urllib.request.Request(f"{world.base}/session/{session}/abort",
                                         data=b"{}", method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30):
            pass
        sender.join(RUN_TIMEOUT)


def _post_quietly(world: World, session: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # aborted
        world.post(f"/session/{session}/message", body, timeout=RUN_TIMEOUT)


def test_an_overloaded_endpoint_sees_the_direct_paths_requests(world: World) -> None:
    with ThreadPoolExecutor(2) as pool:
        direct = pool.submit(_overloaded, world, "direct", "m")
        nonoka = pool.submit(_overloaded, world, "nonoka", "default")
        (direct_count, direct_attempt), (nonoka_count, nonoka_attempt) = (
            direct.result(), nonoka.result())
    assert direct_attempt == nonoka_attempt == ATTEMPTS
    assert abs(nonoka_count - direct_count) <= 1, (direct_count, nonoka_count)
