"""``nonoka run``: one turn in-process, streamed, stored like a bridge turn."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

from nonoka.llm.base import ModelResponse
from nonoka.testing import call, text
from nonoka.testing.server import HttpError, Step
from tests.cli.conftest import Project, kinds, no_ansi
from tests.conftest import ScriptItem
from tests.support.processes import NONOKA


def session_of(stderr: str) -> str:
    """The session id ``run`` prints on stderr."""
    marker = "[session "
    assert marker in stderr, stderr
    return stderr.split(marker, 1)[1].split("]", 1)[0]


def test_run_streams_the_answer_and_stores_the_session(project: Project,
                                                        scripted: list[ScriptItem]) -> None:
    scripted.append(text("Hello from the model!", input_tokens=12, output_tokens=5,
                         cost_usd=0.002))
    done = project.nonoka("run", "hello there")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello from the model!\n"
    sid = session_of(done.stderr)
    assert "12 in / 5 out tokens" in done.stderr
    assert f"--session {sid[:8]}" in done.stderr
    [record] = project.records()
    assert record.session_id == sid
    assert (record.title, record.status, record.turn_count) == ("hello there", "completed", 1)
    assert (record.input_tokens, record.output_tokens, record.cost_usd) == (12, 5, 0.002)
    assert record.model == "openai:test-model"
    assert record.metadata["source"] == "nonoka run"
    assert record.conversation_key  # so a provider could recover it, like a bridge session
    events = project.events(sid)
    assert kinds(events) == ["request", "session", "model_call", "finish"]
    assert events[1].data == {"new": True, "recovery_reason": None}
    assert events[2].data["input_tokens"] == 12 and events[2].data["cost_usd"] == 0.002
    assert events[3].data["finish_reason"] == "stop"
    system, user = project.sent(0)
    assert system[0] == "system" and user == ("user", "hello there")
    tools = {t["function"]["name"] for t in project.server.requests[0]["tools"]}
    assert tools == {"read_file", "list_dir", "search_text"}


def test_text_reaches_stdout_while_the_turn_is_still_running(project: Project,
                                                            scripted: list[ScriptItem]) -> None:
    release = threading.Event()

    def held_back(_: dict[str, Any]) -> Step:
        release.wait(30)  # the second model call waits until the test saw the first text
        return text("and the rest.")

    scripted.extend([call("list_dir", {"path": "."}, content="Let me look first. "),
                     held_back])
    process = subprocess.Popen([*NONOKA, "run", "what is here?"], cwd=project.path,
                               env=project.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.read(len("Let me look first."))
        assert first == "Let me look first."
        assert process.poll() is None
    finally:
        release.set()
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out.strip().endswith("and the rest.")
    assert "[tool] list_dir" in err


def test_continue_latest_session_or_a_prefix_or_a_new_one(project: Project,
                                                           scripted: list[ScriptItem]) -> None:
    scripted.extend([text("one"), text("two")])
    first = session_of(project.nonoka("run", "first").stderr)
    time.sleep(0.01)
    second = session_of(project.nonoka("run", "second", "--new").stderr)
    assert first != second

    scripted.append(text("three"))
    done = project.nonoka("run", "-c", "third")
    assert done.returncode == 0, done.stderr
    assert session_of(done.stderr) == second
    assert [c for r, c in project.sent(2) if r == "user"] == ["second", "third"]

    scripted.append(text("four"))
    done = project.nonoka("run", "--session", first[:6], "fourth")
    assert done.returncode == 0, done.stderr
    assert session_of(done.stderr) == first
    assert [c for r, c in project.sent(3) if r == "user"] == ["first", "fourth"]

    by_id = {r.session_id: r for r in project.records()}
    assert (by_id[first].turn_count, by_id[second].turn_count) == (2, 2)
    assert [e.data["new"] for e in project.events(first) if e.kind == "session"] == [True,
                                                                                     False]


def test_conflicting_or_unknown_session_choices_fail_clearly(project: Project,
                                                             scripted: list[ScriptItem]) -> None:
    both = project.nonoka("run", "-c", "--new", "hi")
    assert both.returncode == 2 and "only one of" in both.stderr
    nothing = project.nonoka("run", "-c", "hi")
    assert nothing.returncode == 1 and "no session to continue" in nothing.stderr
    unknown = project.nonoka("run", "--session", "zzzz", "hi")
    assert unknown.returncode == 1 and "no session id starts with 'zzzz'" in unknown.stderr
    assert project.server.requests == []


def test_built_in_tools_read_the_project_and_refuse_to_leave_it(project: Project,
                                                                scripted: list[ScriptItem]) -> None:
    (project.path.parent / "secret.txt").write_text("outside secret")
    scripted.extend([
        call("read_file", {"path": "notes.txt"}, id="call_in"),
        call("read_file", {"path": "../secret.txt"}, id="call_out"),
        text("The launch code is 1234."),
    ])
    done = project.nonoka("run", "what is the launch code?", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == "The launch code is 1234."
    results = {m["tool_call_id"]: m["content"]
               for m in project.server.requests[2]["messages"] if m["role"] == "tool"}
    assert "the launch code is 1234" in results["call_in"]
    assert "outside the project directory" in results["call_out"]
    assert "outside secret" not in json.dumps(project.server.requests[2])
    sid = json.loads(done.stdout)["session_id"]
    logged = [(e.kind, e.data.get("is_error")) for e in project.events(sid)
              if e.kind == "tool_result"]
    assert logged == [("tool_result", False), ("tool_result", True)]


def test_json_output(project: Project, scripted: list[ScriptItem]) -> None:
    scripted.append(text("Forty-two.", input_tokens=20, output_tokens=3))
    done = project.nonoka("run", "--json", "the answer?")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["output"] == "Forty-two."
    assert result["finish"] == "stop" and result["error"] is None
    assert result["model_finish"] == "stop"
    assert result["usage"] == {"input_tokens": 20, "output_tokens": 3, "cost_usd": None,
                               "cache_read_tokens": 0, "cache_write_tokens": 0,
                               "reasoning_tokens": 0}
    assert [r.session_id for r in project.records()] == [result["session_id"]]
    assert done.stderr == ""


def test_json_output_says_the_answer_was_cut(project: Project,
                                             scripted: list[ScriptItem]) -> None:
    """The turn ends as usual; ``model_finish`` says the model stopped at its limit."""
    scripted.append(ModelResponse(text="The first half of", finish_reason="length"))
    done = project.nonoka("run", "--json", "a long answer?")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["output"], result["finish"], result["model_finish"]) == (
        "The first half of", "stop", "length")


def test_a_model_failure_exits_1_and_is_in_the_timeline(project: Project,
                                                        scripted: list[ScriptItem]) -> None:
    scripted.append(HttpError(400, {"error": {"message": "bad model"}}))
    done = project.nonoka("run", "--json", "hi")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["finish"] == "error" and result["error"]["code"] == "model_error"
    assert "400" in result["error"]["message"]
    assert kinds(project.events(result["session_id"]))[-2:] == ["error", "finish"]
    [record] = project.records()
    assert record.status == "failed"


def test_missing_model_says_how_to_configure_one(project: Project,
                                                 scripted: list[ScriptItem]) -> None:
    env = {k: v for k, v in project.env.items() if k != "NONOKA_MODEL"}
    done = project.nonoka("run", "hi", env=env)
    assert done.returncode == 2
    for hint in ("NONOKA_MODEL", "--model", ".nonoka/config.toml"):
        assert hint in done.stderr
    assert not (project.path / ".nonoka").exists()  # nothing was created

    (project.path / ".nonoka").mkdir()
    (project.path / ".nonoka" / "config.toml").write_text('model = "openai:from-config"\n')
    scripted.extend([lambda body: text(f"model {body['model']}")] * 2)
    configured = project.nonoka("run", "hi", env=env)
    assert configured.returncode == 0, configured.stderr
    assert configured.stdout == "model from-config\n"
    flagged = project.nonoka("run", "hi", "--model", "openai:from-flag", env=env)
    assert flagged.stdout == "model from-flag\n"
    bad = project.nonoka("run", "hi", "--model", "nonsense", env=env)
    assert bad.returncode == 2 and "provider:model" in bad.stderr


def test_piped_run_output_has_no_escape_codes(project: Project, scripted: list[ScriptItem]) -> None:
    scripted.extend([call("search_text", {"text": "launch"}), text("Found it.")])
    done = project.nonoka("run", "where is launch?")
    assert done.returncode == 0, done.stderr
    assert "[tool] search_text" in done.stderr
    assert no_ansi(done.stdout, done.stderr)


def test_message_from_stdin(project: Project, scripted: list[ScriptItem]) -> None:
    scripted.append(text("got it"))
    done = project.nonoka("run", "-", input="a long\nmessage\n")
    assert done.returncode == 0, done.stderr
    assert ("user", "a long\nmessage\n") in project.sent(0)
