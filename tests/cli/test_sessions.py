"""``nonoka sessions list`` and ``show`` over the index and event log the bridge writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from nonoka.protocol.frames import conversation_key
from nonoka.store.records import SessionRecord
from nonoka.testing import call, text
from tests.cli.conftest import Project, no_ansi
from tests.conftest import ScriptItem

LOOKUP = {"name": "lookup", "description": "Look a word up (run by the host)",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                         "required": ["word"]}}


def seeded(project: Project) -> list[SessionRecord]:
    """Four sessions with chosen ids and times: newest first is c, a1, a2; t is a title."""
    now = time.time()
    records = [
        SessionRecord(session_id="aaaa1111-0000-4000-8000-000000000001", title="first chat",
                      status="completed", turn_count=3, input_tokens=1500, output_tokens=200,
                      cost_usd=0.0123, created_at=now - 7200, last_active=now - 180),
        SessionRecord(session_id="aaaa2222-0000-4000-8000-000000000002", title="second chat",
                      status="failed", turn_count=1, created_at=now - 90000,
                      last_active=now - 86400 * 2),
        SessionRecord(session_id="cccc3333-0000-4000-8000-000000000003", title="newest chat",
                      status="paused", turn_count=2, created_at=now - 60, last_active=now - 30),
        SessionRecord(session_id="tttt4444-0000-4000-8000-000000000004", title="a title",
                      status="completed", metadata={"purpose": "title"}, last_active=now),
    ]
    project.seed(*records)
    return records


def test_list_orders_by_activity_and_hides_title_sessions(project: Project) -> None:
    seeded(project)
    done = project.nonoka("sessions", "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["ID", "TITLE", "STATUS", "TURNS", "TOKENS", "COST", "LAST",
                                "ACTIVE"]
    assert [line.split()[0] for line in lines[1:]] == ["cccc3333", "aaaa1111", "aaaa2222"]
    # Seeded 30 s before the command runs; a loaded machine may take seconds to start it.
    assert re.search(r"\b3\ds ago", lines[1]) and "3m ago" in lines[2] and "2d ago" in lines[3]
    assert "1.7k" in lines[2] and "$0.0123" in lines[2] and "completed" in lines[2]
    assert no_ansi(done.stdout, done.stderr)

    limited = project.nonoka("sessions", "list", "--limit", "2", "--json")
    assert [r["session_id"][:8] for r in json.loads(limited.stdout)] == ["cccc3333",
                                                                         "aaaa1111"]
    everything = json.loads(project.nonoka("sessions", "list", "--all", "--json").stdout)
    assert [r["session_id"][:4] for r in everything] == ["tttt", "cccc", "aaaa", "aaaa"]
    assert everything[0]["metadata"] == {"purpose": "title"}
    assert "[title] a title" in project.nonoka("sessions", "list", "--all").stdout


def test_show_by_prefix_ambiguous_and_unknown(project: Project) -> None:
    seeded(project)
    shown = project.nonoka("sessions", "show", "cccc")
    assert shown.returncode == 0, shown.stderr
    assert "cccc3333-0000-4000-8000-000000000003" in shown.stdout
    assert "newest chat" in shown.stdout and "timeline: empty" in shown.stdout

    ambiguous = project.nonoka("sessions", "show", "aaaa")
    assert ambiguous.returncode == 1
    assert "matches 2 sessions" in ambiguous.stderr
    assert "aaaa1111-0000-4000-8000-000000000001" in ambiguous.stderr
    assert "aaaa2222-0000-4000-8000-000000000002" in ambiguous.stderr

    exact = project.nonoka("sessions", "show", "aaaa2222-0000-4000-8000-000000000002", "--json")
    assert json.loads(exact.stdout)["session"]["title"] == "second chat"

    unknown = project.nonoka("sessions", "show", "ffff")
    assert unknown.returncode == 1 and "no session id starts with 'ffff'" in unknown.stderr
    assert no_ansi(ambiguous.stderr, unknown.stderr)


def test_reading_commands_create_nothing(project: Project) -> None:
    listed = project.nonoka("sessions", "list")
    assert listed.returncode == 0 and "no sessions" in listed.stdout
    assert project.nonoka("sessions", "list", "--json").stdout.strip() == "[]"
    shown = project.nonoka("sessions", "show", "abc")
    assert shown.returncode == 1 and "no sessions" in shown.stderr
    assert not (project.path / ".nonoka").exists()


def bridge_request(project: Project, messages: list[dict[str, object]],
                   session_id: str | None) -> list[dict[str, object]]:
    request = {"type": "chat", "protocol": {"version": "1"}, "cwd": str(project.path),
               "messages": messages, "tools": [LOOKUP], "session_id": session_id,
               "new_session": session_id is None,
               "conversation_key": conversation_key(messages)}
    done = subprocess.run([sys.executable, "-m", "nonoka", "bridge"],
                          input=json.dumps(request) + "\n", capture_output=True, text=True,
                          cwd=project.path, env=project.env, timeout=60, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_show_lists_what_a_bridge_request_wrote(project: Project,
                                                scripted: list[ScriptItem]) -> None:
    scripted.extend([call("lookup", {"word": "nonoka"}, id="call_1"),
                     text("It means 'field flower'.", input_tokens=30, output_tokens=7,
                          cost_usd=0.001)])
    history: list[dict[str, object]] = [{"role": "user", "content": "What does nonoka mean?"}]
    first = bridge_request(project, history, None)
    sid = next(e["session_id"] for e in first if e["type"] == "session_init")
    assert first[-1]["finish_reason"] == "tool_calls"
    history += [{"role": "assistant", "content": "",
                 "tool_calls": [{"id": "call_1", "name": "lookup",
                                 "arguments": '{"word": "nonoka"}'}]},
                {"role": "tool", "content": "field flower", "tool_call_id": "call_1"}]
    second = bridge_request(project, history, str(sid))
    assert second[-1]["finish_reason"] == "stop"

    done = project.nonoka("sessions", "show", str(sid)[:8], "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["session"]["session_id"] == sid
    assert shown["session"]["turn_count"] == 1 and shown["session"]["status"] == "completed"
    assert [e["kind"] for e in shown["events"]] == [
        "request", "session", "model_call", "tool_call", "finish",
        "request", "session", "tool_result", "model_call", "early_request", "finish"]
    tool_call = shown["events"][3]["data"]
    assert (tool_call["tool_name"], tool_call["executed_by"]) == ("lookup", "host")
    host_result = shown["events"][7]["data"]
    assert (host_result["tool_name"], host_result["executed_by"]) == ("lookup", "host")
    assert shown["events"][8]["data"]["cost_usd"] == 0.001
    assert shown["events"][9]["data"] == {"outcome": "used"}
    assert shown["usage"]["model_calls"] == 2 and shown["usage"]["tool_calls"] == 1
    assert shown["usage"]["input_tokens"] == 10 + 30

    plain = project.nonoka("sessions", "show", str(sid)[:8], "--limit", "5")
    assert "timeline (last 5 event(s))" in plain.stdout
    assert "model call" in plain.stdout and "stop" in plain.stdout
    assert "2 model call(s)" in plain.stdout and no_ansi(plain.stdout)
    full = project.nonoka("sessions", "show", str(sid)[:8])
    squeezed = [" ".join(line.split()[1:]) for line in full.stdout.splitlines()]
    assert 'tool call lookup {"word": "nonoka"} (run by host)' in squeezed


def test_a_run_session_continues_through_the_index_like_any_other(
        project: Project, scripted: list[ScriptItem], monkeypatch: pytest.MonkeyPatch) -> None:
    scripted.append(text("hi"))
    result = project.invoke("run", "--json", "hello", monkeypatch=monkeypatch)
    assert result.exit_code == 0, result.output
    sid = json.loads(result.stdout)["session_id"]
    listed = project.invoke("sessions", "list", "--json", monkeypatch=monkeypatch)
    assert [r["session_id"] for r in json.loads(listed.stdout)] == [sid]
    shown = project.invoke("sessions", "show", sid[:8], monkeypatch=monkeypatch)
    assert "new session" in shown.stdout and "nonoka run" in shown.stdout


def test_a_model_call_the_model_cut_short_says_so() -> None:
    from nonoka.cli.render import describe_event
    from nonoka.store.records import EventRecord

    def call(**data: object) -> str:
        return describe_event(EventRecord(session_id="s", kind="model_call",
                                          data={"model": "m", **data}))[1]

    assert call(finish="length").endswith("· finish: length")
    assert "finish" not in call(finish="stop") and "finish" not in call()
