"""Claude Code (``claude -p``, the pinned 2.1.332) behind a real ``nonoka serve --model
anthropic:…`` whose upstream is the strict scripted Anthropic endpoint, side by side with
the same Claude Code pointed at that endpoint directly: a tool loop with thinking
completes both ways, what reaches the endpoint differs only as docs/serve.md says, and
the run is one nonoka session line named by Claude Code's session id."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.serve.claude_code import is_compaction
from nonoka.state.messages import ToolCall
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from nonoka.testing.anthropic_replies import AnthropicReply, Thinking, error_body
from nonoka.testing.server import ScriptedAnthropicServer
from nonoka.testing.steps import HttpError
from tests.serve.claude_code import MAIN_MODEL, ClaudeCode, strict_endpoint, typed_problem
from tests.serve.harness import ServeProcess, request

UPSTREAM_KEY = "sk-ant-upstream-key-that-never-leaves-0123"
CLIENT_KEY = "client-key-for-nonoka"
NOTE = "papaya and kiwi"
FORWARDED = ("anthropic-version", "anthropic-beta", "x-claude-code-session-id")
"""The headers Claude Code sends that reach Anthropic through nonoka as they are."""
FALLBACK_BETAS = ("per-turn-control-2026-07-01", "mid-conversation-tool-changes-2026-07-01")
"""The betas Claude Code stops sending when nonoka refuses a mid-conversation system
message (it sends that text inside the user message instead)."""


class ReadingModel:
    """The scripted model: it thinks and calls Read (or Bash) on the first request of a
    prompt, and answers with what the tool returned once the result comes back."""

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self.tool = tool
        self.arguments = arguments
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        results = tool_results(body["messages"][-1])
        if results:
            content = results[-1].get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            return AnthropicReply(text=f"The tool said: {text.strip()}")
        self.calls += 1
        return AnthropicReply(thinking=(Thinking(f"I should use {self.tool} for this."),),
                              tool_calls=(ToolCall(id=f"toolu_{self.tool}_{self.calls}",
                                                   name=self.tool,
                                                   arguments=json.dumps(self.arguments)),))


def tool_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
            ] if isinstance(content, list) else []


class Nonoka:
    """``nonoka serve`` as its own process, in front of ``upstream``."""

    def __init__(self, project: Path, upstream: ScriptedAnthropicServer) -> None:
        self.project = project
        self.process = ServeProcess(project, f"anthropic:{MAIN_MODEL}", {
            "ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})
        self.base_url = self.process.url.removesuffix("/v1")

    def stop(self) -> str:
        return self.process.stop()


@pytest.fixture
def claude_code(tmp_path: Path) -> Iterator[ClaudeCode]:
    code = ClaudeCode(tmp_path / "claude")
    (code.work / "notes.txt").write_text(NOTE + "\n")
    try:
        yield code
    finally:
        code.close()


@pytest.fixture
def nonoka_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


def records(project: Path) -> list[SessionRecord]:
    async def read() -> list[SessionRecord]:
        async with open_project_stores(project) as stores:
            return await stores.index.list_sessions(limit=100, purpose=None)
    return asyncio.run(read())


def run_both(claude_code: ClaudeCode, project: Path, model: Callable[[], ReadingModel],
             prompt: str, *args: str
             ) -> Iterator[tuple[str, dict[str, Any], ScriptedAnthropicServer]]:
    """The same run (the same script from its start) directly and through nonoka: each
    way's result and endpoint."""
    with strict_endpoint(model()) as direct:
        yield "direct", claude_code.run(direct.base_url, prompt, *args), direct
    with strict_endpoint(model()) as upstream:
        served = Nonoka(project, upstream)
        try:
            result = claude_code.run(served.base_url, prompt, *args, key=CLIENT_KEY)
        finally:
            errors = served.stop()
        assert "Traceback" not in errors, errors
        yield "nonoka", result, upstream


def without_marks(value: Any) -> Any:
    """``value`` without its ``cache_control`` marks (nonoka places its own)."""
    if isinstance(value, dict):
        return {k: without_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_marks(v) for v in value]
    return value


def texts(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "\n".join(
        str(b.get("text", "")) for b in content)


def same_conversation(sent: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    """``got`` is ``sent`` with its mid-conversation system messages refused: Claude Code
    sends their lines as ``<system-reminder>`` texts in the first user message instead;
    everything after it (thinking, tool calls, results) is alike but for the marks."""
    kept = [m for m in without_marks(sent) if m["role"] != "system"]
    assert without_marks(got)[1:] == kept[1:]
    first = texts(got[0])
    for message in sent[:2]:
        for line in texts(message).splitlines():
            assert line in first, line
    assert first.count("<system-reminder>") > texts(sent[0]).count("<system-reminder>")


def test_a_tool_loop_with_thinking_directly_and_through_nonoka(
        claude_code: ClaudeCode, nonoka_project: Path) -> None:
    def model() -> ReadingModel:
        return ReadingModel("Read", {"file_path": str(claude_code.work / "notes.txt")})

    runs = {way: (result, endpoint) for way, result, endpoint in run_both(
        claude_code, nonoka_project, model, "What does notes.txt say?",
        "--allowedTools", "Read")}
    for way, (result, endpoint) in runs.items():
        assert result["subtype"] == "success" and not result["is_error"], (way, result)
        assert NOTE in result["result"], (way, result["result"])  # Read ran, its result came back
        assert result["num_turns"] == 2
        assert not endpoint.rejections and not endpoint.failures, (way, endpoint.failures)
        assert len(endpoint.requests) == 2  # the call, then the answer: no side requests
        second = endpoint.requests[1]["messages"]
        assert [b["type"] for b in second[-2]["content"]] == ["thinking", "tool_use"]
    direct, through = runs["direct"][1], runs["nonoka"][1]
    session = runs["nonoka"][0]["session_id"]

    # What the endpoint received, request by request, both ways.
    for sent, got, sent_headers, got_headers in zip(
            direct.requests, through.requests, direct.headers, through.headers, strict=True):
        same_conversation(sent["messages"], got["messages"])
        assert [b["text"] for b in got["system"]] == [b["text"] for b in sent["system"]]
        assert without_marks(got["tools"]) == [
            {k: v for k, v in tool.items() if k != "defer_loading"}
            for tool in without_marks(sent["tools"])]
        same = {k for k in sent if k not in ("messages", "system", "tools", "metadata")}
        assert {k: got.get(k) for k in same} == {k: sent[k] for k in same}
        user_id = json.loads(got["metadata"]["user_id"])
        assert user_id["session_id"] == session
        assert user_id["device_id"] == json.loads(sent["metadata"]["user_id"])["device_id"]
        assert got_headers["x-claude-code-session-id"] == session
        assert got_headers["anthropic-version"] == sent_headers["anthropic-version"]
        assert got_headers["anthropic-beta"].split(",") == [
            b for b in sent_headers["anthropic-beta"].split(",") if b not in FALLBACK_BETAS]
        assert got_headers["user-agent"] == sent_headers["user-agent"] + " nonoka/0.1.0"
        assert got_headers["x-api-key"] == UPSTREAM_KEY
        assert sent_headers["x-api-key"] == "client-key"
        assert CLIENT_KEY not in json.dumps(got_headers)
        dropped = {k for k in sent_headers if k.startswith(("x-stainless-", "x-app"))}
        assert dropped and not dropped & set(got_headers)

    # One session line, named by Claude Code's session id.
    rows = records(nonoka_project)
    assert [(r.purpose, r.host_session_id) for r in rows] == [
        ("chat", f"claude-code:{session}")]
    assert rows[0].turn_count >= 1


SUMMARY = "We talked about fruit: papaya, then kiwi."


class FruitModel:
    """Notes what it is told; answers a compaction with an analysis and a summary."""

    def __call__(self, body: dict[str, Any]) -> Any:
        said = texts(body["messages"][-1])
        if is_compaction(body):
            return AnthropicReply(text=f"<analysis>\nFruit.\n</analysis>\n\n<summary>\n"
                                       f"{SUMMARY}\n</summary>")
        return AnthropicReply(text=f"Noted: {said.splitlines()[-1]}")


def nonoka_cli(project: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "nonoka", *args, "--dir", str(project)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NONOKA_DATABASE_URL": ""})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_continue_resume_fork_and_compact_keep_one_line(
        claude_code: ClaudeCode, nonoka_project: Path) -> None:
    with strict_endpoint(FruitModel()) as upstream:
        served = Nonoka(nonoka_project, upstream)
        try:
            def run(prompt: str, *args: str) -> str:
                result = claude_code.run(served.base_url, prompt, *args, key=CLIENT_KEY)
                assert result["subtype"] == "success", result
                return str(result["session_id"])

            line = run("Remember papaya.")
            assert run("And kiwi.", "--continue") == line
            fork = run("Branch: mango.", "--resume", line, "--fork-session")
            assert fork != line
            assert run("/compact", "--resume", line) == line
            assert run("After the compaction.", "--resume", line) == line
            assert run("Once more.", "--resume", line) == line
        finally:
            errors = served.stop()
        assert "Traceback" not in errors, errors
        assert not upstream.rejections and not upstream.failures, upstream.failures
        sent = upstream.requests

    rows = {r.session_id: r for r in records(nonoka_project)}
    chats = [r for r in rows.values() if r.purpose == "chat"]
    main = next(r for r in chats if r.host_session_id == f"claude-code:{line}")
    branch = next(r for r in chats if r.host_session_id == f"claude-code:{fork}")
    assert len(chats) == 2
    assert branch.metadata["forked_from"] == main.session_id
    assert branch.metadata["fork_reason"] == "host_fork"
    # the compaction ran in a session of its own, naming the line's
    compactions = [r for r in rows.values() if r.purpose == "compaction"]
    assert [r.metadata.get("compaction_of") for r in compactions] == [main.session_id]
    # the line: papaya, kiwi, then after the compaction two more turns, in place
    assert main.turn_count == 4
    shown = json.loads(nonoka_cli(nonoka_project, "sessions", "show", main.session_id,
                                  "--json", "--entries"))
    edits = [e["data"].get("reason") for e in shown["events"]
             if e["kind"] == "history_edited"]
    assert edits == ["history_compacted"]
    said = [e["text"] for e in shown["entries"] if e["role"] == "user"]
    assert any(t.startswith("Summary:\n" + SUMMARY) for t in said)
    assert not any("Remember papaya." in t for t in said)  # replaced by the summary
    tree = nonoka_cli(nonoka_project, "sessions", "list", "--tree")
    lines = [t for t in tree.splitlines() if t.strip()]
    assert len(lines) == 2 and lines[0].startswith(main.session_id[:8])
    assert lines[1].lstrip("└─ ").startswith(branch.session_id[:8])

    # what Anthropic was sent after the compaction: Claude Code's text, the summary
    # a block of its own
    after = next(b for b in sent if "After the compaction." in json.dumps(b["messages"]))
    first = after["messages"][0]["content"]
    joined = "".join(b["text"] for b in first)
    assert "Summary:\n" + SUMMARY + "\n\nIf you need specific details" in joined
    assert {"type": "text", "text": "Summary:\n" + SUMMARY} in without_marks(first)
    assert all(m["role"] != "system" for m in after["messages"])


SUBTASK = "Count the fruit in notes.txt."


class DelegatingModel:
    """The main loop hands the work to a subagent (Agent); the subagent answers; the
    main loop answers once the subagent's result is back."""

    def __call__(self, body: dict[str, Any]) -> Any:
        messages = body["messages"]
        if texts(messages[0]).rstrip().endswith(SUBTASK):
            return AnthropicReply(text="The subagent counted 2 fruit.")
        if tool_results(messages[-1]) or "2 fruit" in json.dumps(messages[-1]):
            return AnthropicReply(text="Done delegating.")
        return AnthropicReply(tool_calls=(ToolCall(
            id=f"toolu_agent_{len(messages)}", name="Agent", arguments=json.dumps({
                "description": "Count fruit", "prompt": SUBTASK,
                "subagent_type": "general-purpose"})),))


def test_a_subagent_is_a_line_under_its_parents(claude_code: ClaudeCode,
                                               nonoka_project: Path) -> None:
    with strict_endpoint(DelegatingModel()) as upstream:
        served = Nonoka(nonoka_project, upstream)
        try:
            result = claude_code.run(served.base_url, "Delegate the counting.",
                                     "--allowedTools", "Agent", key=CLIENT_KEY)
        finally:
            errors = served.stop()
        assert "Traceback" not in errors, errors
        assert not upstream.rejections and not upstream.failures, upstream.failures
        agents = {h.get("x-claude-code-agent-id") for h in upstream.headers} - {None}
    assert result["subtype"] == "success", result
    assert len(agents) == 1  # the subagent's requests name it, through nonoka too
    session = result["session_id"]
    rows = {r.host_session_id: r for r in records(nonoka_project)}
    parent = rows[f"claude-code:{session}"]
    child = rows[f"claude-code:{session}/agent:{agents.pop()}"]
    assert set(rows) == {parent.host_session_id, child.host_session_id}
    assert child.metadata["host_parent_session_id"] == f"claude-code:{session}"
    assert "forked_from" not in child.metadata  # a link for reading: nothing is shared
    shown = json.loads(nonoka_cli(nonoka_project, "sessions", "show", child.session_id,
                                  "--json"))
    assert shown["lineage"]["parent_line"] == parent.session_id
    lines = nonoka_cli(nonoka_project, "sessions", "list", "--tree").splitlines()
    at = next(i for i, t in enumerate(lines) if child.session_id[:8] in t)
    assert lines[at].startswith("└─ ") and "subagent" in lines[at], lines
    assert parent.session_id[:8] in lines[at - 1], lines


class OverflowingModel(FruitModel):
    """``FruitModel``, whose context overflows once, at ``Overflow now.``: Anthropic's
    400 ``prompt is too long``, after which Claude Code compacts and asks again."""

    def __init__(self) -> None:
        self.overflowed = False

    def __call__(self, body: dict[str, Any]) -> Any:
        if "Overflow now." in texts(body["messages"][-1]) and not is_compaction(body) \
                and not self.overflowed:
            self.overflowed = True
            return HttpError(400, error_body(
                "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"))
        return super().__call__(body)


def test_a_context_overflow_compacts_the_line(claude_code: ClaudeCode,
                                              nonoka_project: Path) -> None:
    with strict_endpoint(OverflowingModel()) as upstream:
        served = Nonoka(nonoka_project, upstream)
        try:
            first = claude_code.run(served.base_url, "Remember papaya.", key=CLIENT_KEY)
            second = claude_code.run(served.base_url, "Overflow now.", "--continue",
                                     key=CLIENT_KEY)
            third = claude_code.run(served.base_url, "After.", "--continue", key=CLIENT_KEY)
        finally:
            errors = served.stop()
        assert "Traceback" not in errors, errors
        assert not upstream.rejections and not upstream.failures, upstream.failures
        compactions = [b for b in upstream.requests if is_compaction(b)]
    assert len(compactions) == 1  # Claude Code compacted on the overflow, automatically
    assert first["session_id"] == second["session_id"] == third["session_id"]
    assert second["result"] == "Noted: Overflow now."
    rows = records(nonoka_project)
    chats = [r for r in rows if r.purpose == "chat"]
    assert len(chats) == 1
    assert [r.metadata.get("compaction_of") for r in rows if r.purpose == "compaction"] == [
        chats[0].session_id]
    shown = json.loads(nonoka_cli(nonoka_project, "sessions", "show", chats[0].session_id,
                                  "--json", "--entries"))
    assert [e["data"].get("reason") for e in shown["events"]
            if e["kind"] == "history_edited"] == ["history_compacted"]
    said = [e["text"] for e in shown["entries"] if e["role"] == "assistant"]
    assert said == ["Noted: Overflow now.", "Noted: After."]


def test_a_failed_bash_command_is_an_error_result_both_ways(
        claude_code: ClaudeCode, nonoka_project: Path) -> None:
    def model() -> ReadingModel:
        return ReadingModel("Bash", {"command": "cat no-such-file.txt",
                                     "description": "Read a file that is not there"})

    runs = {way: endpoint for way, _, endpoint in run_both(
        claude_code, nonoka_project, model, "Show no-such-file.txt",
        "--allowedTools", "Bash")}
    results = {way: tool_results(endpoint.requests[1]["messages"][-1])
               for way, endpoint in runs.items()}
    assert [r.get("is_error") for r in results["direct"]] == [True]
    assert without_marks(results["nonoka"]) == without_marks(results["direct"])
    assert "No such file" in str(results["nonoka"][0]["content"])


@pytest.mark.parametrize(("change", "refused"), [
    ({"messages": [{"role": "tool", "content": "x"}]}, "role"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                 "is_error": "yes"}]}]}, "is_error"),
    ({"tools": [{"name": "Read"}]}, "input_schema"),
    ({"thinking": {"type": "enabled"}}, "budget_tokens"),
])
def test_the_endpoint_refuses_what_the_api_types_refuse(change: dict[str, Any],
                                                        refused: str) -> None:
    body: dict[str, Any] = {"model": MAIN_MODEL, "max_tokens": 64, "stream": True,
                            "messages": [{"role": "user", "content": "hi"}], **change}
    assert refused in str(typed_problem(body))
    with strict_endpoint(lambda _: AnthropicReply(text="never")) as endpoint:
        status, _, raw = request(endpoint.port, "POST", "/v1/messages", body,
                                 {"x-api-key": "k", "anthropic-version": "2023-06-01"})
    assert status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_a_rewind_is_a_branch_of_the_line(claude_code: ClaudeCode,
                                          nonoka_project: Path) -> None:
    with strict_endpoint(FruitModel()) as upstream:
        served = Nonoka(nonoka_project, upstream)
        try:
            def run(prompt: str, *args: str) -> dict[str, Any]:
                result = claude_code.run(served.base_url, prompt, *args, key=CLIENT_KEY)
                assert result["subtype"] == "success", result
                return result

            line = run("Remember papaya.")["session_id"]
            run("And kiwi.", "--continue")
            transcript = claude_code.transcript(line)
            answers = [r for r in transcript if r.get("type") == "assistant"]
            # back to the first answer: "And kiwi." is undone, a new prompt follows it
            assert run("Instead: mango.", "--resume", line, "--resume-session-at",
                       answers[0]["uuid"])["result"] == "Noted: Instead: mango."
            assert run("Then lime.", "--resume", line)["result"] == "Noted: Then lime."
        finally:
            errors = served.stop()
        assert "Traceback" not in errors, errors
        assert not upstream.rejections and not upstream.failures, upstream.failures
        last = [texts(m).splitlines()[-1] for m in upstream.requests[-1]["messages"]]
    assert last == ["Remember papaya.", "Noted: Remember papaya.", "Instead: mango.",
                    "Noted: Instead: mango.", "Then lime."]
    rows = records(nonoka_project)
    assert {r.host_session_id for r in rows} == {f"claude-code:{line}"}
    root = next(r for r in rows if "forked_from" not in r.metadata)
    branch = next(r for r in rows if "forked_from" in r.metadata)
    assert len(rows) == 2 and branch.metadata["forked_from"] == root.session_id
    assert branch.metadata["fork_reason"] == "history_diverged"
    assert (root.turn_count, branch.turn_count) == (2, 3)  # the branch shares the first
    tree = [t for t in nonoka_cli(nonoka_project, "sessions", "list", "--tree").splitlines()
            if t.strip()]
    assert tree[0].startswith(root.session_id[:8])
    assert tree[1].startswith("└─ " + branch.session_id[:8])
