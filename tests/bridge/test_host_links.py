"""The host's links and headers arrive, and the host's retries are not multiplied: real
bridge processes against scripted endpoints that record every request's headers.

- the host's request headers reach the endpoint as ``nonoka.llm.host_headers`` allows
  (session, affinity and parent ids, the user agent with nonoka appended, a provider's
  own feature header) — never the host's credentials, never another provider's header;
- a subagent's session (``host_parent_session_id``) is listed under its parent's line
  (``sessions list --tree``, ``sessions show``);
- a model switch within one host session stays one line; each answer records its model;
- with the ``host_retries`` feature a retryable failure is passed back at once, with its
  ``retry_after``; without it the bridge retries inside.
"""

from __future__ import annotations

import json
from pathlib import Path

from nonoka import __version__
from nonoka.testing import text
from nonoka.testing.server import ScriptedAnthropicServer, ScriptedOpenAIServer, Step
from nonoka.testing.steps import HttpError
from tests.bridge.test_early_dispatch import outcomes
from tests.bridge.test_host_step import anthropic, anthropic_bridge
from tests.bridge.test_lineage import SYSTEM, rows, turn
from tests.support.bridge import Bridge, chat, load_state, one, user
from tests.support.processes import run_nonoka

__all__ = ["anthropic"]  # the fixture

HOST_HEADERS = {
    "X-Session-Id": "ses_main", "x-session-affinity": "ses_main",
    "x-parent-session-id": "ses_root", "User-Agent": "opencode/1.18.33",
    "anthropic-beta": "interleaved-thinking-2025-05-14",
    "authorization": "Bearer host-secret", "x-api-key": "host-secret",
    "cookie": "session=host-secret", "x-custom": "not listed",
}


def test_allowed_host_headers_reach_an_openai_compatible_endpoint(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    turn(bridge, scripted, [SYSTEM, user("hi")], "hello", headers=HOST_HEADERS)
    got = server.headers[-1]
    assert got["x-session-id"] == "ses_main"
    assert got["x-session-affinity"] == "ses_main"
    assert got["x-parent-session-id"] == "ses_root"
    assert got["user-agent"] == f"opencode/1.18.33 nonoka/{__version__}"
    assert got["authorization"] == "Bearer sk-test"  # nonoka's own key for this provider
    for never in ("anthropic-beta", "x-api-key", "cookie", "x-custom"):
        assert never not in got, got


def test_an_early_request_carries_the_host_headers_and_is_used(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    """The next turn's request sent before the runtime loads (``bridge/early.py``) has the
    same headers the adapter would send, so it is used, never sent twice."""
    history = [user("hello")]
    sid = one(turn(bridge, scripted, history, "first", headers=HOST_HEADERS),
              "session_init")["session_id"]
    history.append(user("again"))
    turn(bridge, scripted, history, "second", session_id=sid, headers=HOST_HEADERS)
    assert outcomes(bridge, sid) == ["used"]
    assert len(server.requests) == 2, "a model request was sent twice"
    assert server.headers[-1]["x-session-affinity"] == "ses_main"
    assert server.headers[-1]["user-agent"] == f"opencode/1.18.33 nonoka/{__version__}"


def test_a_request_without_host_headers_sends_none(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    turn(bridge, scripted, [SYSTEM, user("hi")], "hello")
    got = server.headers[-1]
    assert got["user-agent"] == "nonoka"
    assert not {"x-session-id", "x-session-affinity", "x-parent-session-id"} & set(got)


def test_allowed_host_headers_reach_an_anthropic_endpoint(
        project: Path, scripted: list[Step],
        anthropic: ScriptedAnthropicServer) -> None:
    bridge = anthropic_bridge(project, anthropic)
    scripted.append(text("hello"))
    events = bridge.run(chat([SYSTEM, user("hi")], headers=HOST_HEADERS))
    assert events[-1]["finish_reason"] == "stop", events
    got = anthropic.headers[-1]
    assert got["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert got["x-session-affinity"] == "ses_main"
    assert got["user-agent"] == f"opencode/1.18.33 nonoka/{__version__}"
    assert got["x-api-key"] == "sk-ant-test"  # its own key, not the host's
    assert "authorization" not in got and "cookie" not in got and "x-custom" not in got


def test_a_subagent_session_is_listed_under_its_parent(
        bridge: Bridge, scripted: list[Step]) -> None:
    parent = one(turn(bridge, scripted, [SYSTEM, user("plan it")], "delegating",
                      host_session_id="ses_parent"), "session_init")["session_id"]
    child = one(turn(bridge, scripted, [SYSTEM, user("search the code")], "found it",
                     host_session_id="ses_child", host_parent_session_id="ses_parent"),
                "session_init")["session_id"]
    other = one(turn(bridge, scripted, [SYSTEM, user("unrelated")], "ok",
                     host_session_id="ses_other"), "session_init")["session_id"]
    meta = {r.session_id: r.metadata for r in rows(bridge)}
    assert meta[child]["host_parent_session_id"] == "ses_parent"
    assert "host_parent_session_id" not in meta[parent]
    tree = run_nonoka(bridge.project, "sessions", "list", "--tree", env=bridge.env)
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    at = {sid: next(i for i, line in enumerate(lines) if sid[:8] in line)
          for sid in (parent, child, other)}
    assert lines[at[child]].startswith("└─ ") and "subagent" in lines[at[child]], lines
    assert at[child] == at[parent] + 1, lines
    assert not lines[at[other]].startswith(("└─", "├─")), lines
    shown = run_nonoka(bridge.project, "sessions", "show", child, "--json", env=bridge.env)
    assert json.loads(shown.stdout)["lineage"]["parent_line"] == parent
    shown = run_nonoka(bridge.project, "sessions", "show", parent, "--json", env=bridge.env)
    assert json.loads(shown.stdout)["lineage"]["subagents"] == [child]
    text_view = run_nonoka(bridge.project, "sessions", "show", child, env=bridge.env)
    assert "subagent of" in text_view.stdout and parent in text_view.stdout


def test_a_model_switch_stays_one_line_and_each_answer_records_its_model(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    history = [SYSTEM, user("one")]
    first = one(turn(bridge, scripted, history, "1", host_session_id="ses_switch",
                     model="openai:small"), "session_init")["session_id"]
    history.append(user("two"))
    second = one(turn(bridge, scripted, history, "2", host_session_id="ses_switch",
                      model="openai:large"), "session_init")["session_id"]
    assert first == second
    assert [body["model"] for body in server.requests] == ["small", "large"]
    state = load_state(bridge, first)
    answers = [e.metadata.get("model") for e in state.memory_entries if e.role == "assistant"]
    assert answers == ["openai:small", "openai:large"]
    assert [r.model for r in rows(bridge)] == ["openai:large"]


def _overloaded(scripted: list[Step], times: int) -> None:
    scripted.extend(HttpError(503, retry_after=0.01) for _ in range(times))


def test_a_retrying_host_gets_a_retryable_failure_at_once(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    _overloaded(scripted, 1)
    events = bridge.run(chat([SYSTEM, user("hi")],
                             protocol={"version": "1", "features": ["host_retries"]}))
    assert len(server.requests) == 1
    error = one(events, "error")
    assert error["retryable"] is True
    assert error["details"]["provider"]["status"] == 503
    assert error["details"]["provider"]["retry_after"] == 0.01
    assert events[-1]["finish_reason"] == "error"


def test_without_a_retrying_host_the_bridge_retries_inside(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    _overloaded(scripted, 4)
    events = bridge.run(chat([SYSTEM, user("hi")]))
    assert len(server.requests) == 4  # the first attempt and three retries
    assert one(events, "error")["details"]["provider"]["status"] == 503
