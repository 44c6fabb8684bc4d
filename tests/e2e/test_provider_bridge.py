"""End to end: the Python provider spawns real ``nonoka bridge`` processes per call.

The model is a local scripted OpenAI-compatible server over real HTTP; the provider keeps
the session id in ``.nonoka/provider-session.id`` like the OpenCode provider does. Each
test plays a host that resends the whole history every call.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nonoka.provider import BridgeError, NonokaProvider
from nonoka.provider.result import ProviderResult
from nonoka.testing import call, text
from nonoka.testing.server import Delay, ScriptedOpenAIServer, Step
from tests.support.bridge import user
from tests.support.processes import model_env, run_nonoka

Msg = dict[str, Any]


def answer(result: ProviderResult) -> Msg:
    message = result.assistant_message()
    return message.model_dump(exclude_none=True)


class Host:
    """A chat front end: holds one conversation's history and one provider."""

    def __init__(self, project: Path, env: dict[str, str], **options: Any) -> None:
        self.provider = NonokaProvider(project, env=env, timeout=60, **options)
        self.history: list[Msg] = []

    async def say(self, content: str, tools: list[Msg] | None = None) -> ProviderResult:
        self.history.append(user(content))
        return await self.send(tools)

    async def send(self, tools: list[Msg] | None = None) -> ProviderResult:
        result = await self.provider.chat(self.history, tools or [])
        assert result.finish_reason in ("stop", "tool_calls"), (result.errors,
                                                                result.stderr_tail)
        self.history.append(answer(result))
        return result


@pytest.fixture
def env(server: ScriptedOpenAIServer) -> dict[str, str]:
    return {**model_env(server.base_url), "NONOKA_DATABASE_URL": ""}


def nonoka_json(project: Path, *args: str) -> Any:
    done = run_nonoka(project, *args, "--json", env={**os.environ, "NONOKA_DATABASE_URL": ""})
    done.check_returncode()
    return json.loads(done.stdout)


def id_file(project: Path) -> Path:
    return project / ".nonoka" / "provider-session.id"


async def test_the_decision_chain_through_the_provider(project: Path, env: dict[str, str],
                                                       scripted: list[Step],
                                                       server: ScriptedOpenAIServer) -> None:
    host = Host(project, env)
    scripted.append(text("hello"))
    first = await host.say("hi, I am Ana")
    sid = first.session_id
    assert sid is not None and first.request.new_session and not first.recovered
    assert id_file(project).read_text().strip() == sid

    # Continuation by a new provider (a new host process) that only has the id file.
    host.provider = NonokaProvider(project, env=env, timeout=60)
    scripted.append(text("you are Ana"))
    second = await host.say("who am I?")
    assert second.request.session_id == sid and second.session_id == sid
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "hi, I am Ana", "hello", "who am I?"]

    # The id file holds an id this database never saw: recovered by conversation key.
    id_file(project).write_text("00000000-0000-0000-0000-00000000beef\n")
    host.provider = NonokaProvider(project, env=env, timeout=60)
    scripted.append(text("still you"))
    third = await host.say("and now?")
    assert third.session_id == sid and third.recovered
    assert third.recovery_reason == "session_not_found"

    # The id file is lost: recovered by conversation key again.
    id_file(project).unlink()
    host.provider = NonokaProvider(project, env=env, timeout=60)
    scripted.append(text("yes"))
    fourth = await host.say("still there?")
    assert fourth.request.session_id is None
    assert fourth.session_id == sid and fourth.recovery_reason == "session_id_missing"
    assert id_file(project).read_text().strip() == sid, "the recovered id was not saved"

    # An unknown id and a conversation nobody stored: a new session, seeded, with a warning.
    id_file(project).write_text("00000000-0000-0000-0000-00000000cafe\n")
    stranger = Host(project, env)
    stranger.history = [user("an old chat"), {"role": "assistant", "content": "from before"}]
    scripted.append(text("new here"))
    fifth = await stranger.say("go on")
    assert fifth.session_id not in (None, sid)
    assert [w.code for w in fifth.warnings] == ["session_not_found_starting_new"]
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "an old chat", "from before", "go on"]

    # No id, a continuation nobody stored: a new session and the recent sessions listed.
    id_file(project).unlink()
    lost = Host(project, env)
    lost.history = [user("another old chat"), {"role": "assistant", "content": "hm"}]
    scripted.append(text("fresh"))
    sixth = await lost.say("more")
    warning = sixth.warnings[0]
    assert warning.code == "session_id_missing_starting_fresh"
    assert sid in [s["session_id"] for s in warning.details["recent_sessions"]]

    # A new conversation (no assistant message yet) is new, whatever id is held.
    scripted.append(text("welcome"))
    seventh = await Host(project, env).say("brand new topic")
    assert seventh.request.new_session and seventh.session_id not in (sid, sixth.session_id)
    assert not seventh.warnings


async def test_host_tools_round_trip_across_processes(project: Path, env: dict[str, str],
                                                      scripted: list[Step],
                                                      server: ScriptedOpenAIServer) -> None:
    tools = [{"name": "write", "description": "Write a file",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                              "content": {"type": "string"}},
                             "required": ["path", "content"]}}]
    host = Host(project, env)
    scripted.append(call("write", {"path": "notes.txt", "content": "hi"}, id="call_1"))
    paused = await host.say("save a note", tools)
    assert paused.finish_reason == "tool_calls"
    (written,) = paused.host_tool_calls
    assert written.tool_name == "write" and written.executed_by == "host"
    arguments = json.loads(written.arguments)
    (project / arguments["path"]).write_text(arguments["content"])  # the host runs it
    host.history.append({"role": "tool", "tool_call_id": written.tool_call_id,
                         "content": "wrote notes.txt"})
    scripted.append(text("saved"))
    done = await host.send(tools)
    assert done.finish_reason == "stop" and done.text == "saved"
    assert done.session_id == paused.session_id
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["user", "assistant", "tool"]
    assert (project / "notes.txt").read_text() == "hi"


async def test_title_requests_stay_apart(project: Path, env: dict[str, str],
                                         scripted: list[Step]) -> None:
    host = Host(project, env)
    scripted.append(text("which bug?"))
    chat_result = await host.say("fix the bug")
    scripted.append(text("Fixing a bug"))
    title = await host.provider.chat([user("Generate a title for: fix the bug")],
                                     purpose="title")
    assert title.session_id not in (None, chat_result.session_id)
    assert host.provider.session_id == chat_result.session_id
    assert id_file(project).read_text().strip() == chat_result.session_id
    listed = [r["session_id"] for r in nonoka_json(project, "sessions", "list")]
    assert listed == [chat_result.session_id]
    everything = nonoka_json(project, "sessions", "list", "--all")
    assert {r["session_id"] for r in everything} == {chat_result.session_id, title.session_id}


async def test_sigkill_mid_turn_then_a_clean_continuation(
        project: Path, env: dict[str, str], scripted: list[Step], tmp_path: Path,
        server: ScriptedOpenAIServer) -> None:
    host = Host(project, env)
    scripted.append(text("ready"))
    sid = (await host.say("start")).session_id
    assert sid is not None

    pid_file = tmp_path / "bridge.pid"
    wrapper = ["/bin/sh", "-c", f'echo $$ > "{pid_file}"; exec "$0" -m nonoka bridge',
               sys.executable]
    killed = Host(project, env, command=wrapper)
    killed.history = list(host.history)
    killed.history.append(user("a long question"))
    scripted.append(Delay(30, text("never delivered")))
    turn = asyncio.create_task(killed.provider.chat(killed.history))
    deadline = time.monotonic() + 20
    while len(server.requests) < 2:
        assert time.monotonic() < deadline, "the model call never started"
        await asyncio.sleep(0.02)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    with pytest.raises(BridgeError, match=r"SIGKILL|signal 9|-9"):
        await turn

    scripted.append(text("the answer"))
    retry = await Host(project, env).provider.chat(killed.history)
    assert retry.session_id == sid and retry.text == "the answer"
    shown = nonoka_json(project, "sessions", "show", sid[:8])
    users = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["start", "a long question"], "the prompt was lost or duplicated"
    assert shown["session"]["turn_count"] == 2


async def test_two_conversations_alternating_in_one_project(
        project: Path, env: dict[str, str], scripted: list[Step]) -> None:
    """Two hosts (two editor tabs) in one project share the id file."""
    first, second = Host(project, env), Host(project, env)
    sessions: dict[str, set[str]] = {"first": set(), "second": set()}
    for turn in range(3):
        for name, host in (("first", first), ("second", second)):
            scripted.append(text(f"{name} answer {turn}"))
            result = await host.say(f"{name} question {turn}")
            assert result.text == f"{name} answer {turn}"
            assert result.session_id is not None
            sessions[name].add(result.session_id)
    assert len(sessions["first"]) == 1 and len(sessions["second"]) == 1
    assert sessions["first"] != sessions["second"], "the conversations landed in one session"
    (first_id,) = sessions["first"]
    shown = nonoka_json(project, "sessions", "show", first_id)
    assert shown["session"]["turn_count"] == 3
    assert shown["usage"]["model_calls"] == 3
    listed = nonoka_json(project, "sessions", "list")
    assert sorted(r["session_id"] for r in listed) == sorted(
        sessions["first"] | sessions["second"]), "orphan sessions were created"


async def test_sessions_show_reads_the_bridge_timeline(project: Path, env: dict[str, str],
                                                       scripted: list[Step]) -> None:
    host = Host(project, env)
    tools = [{"name": "read", "parameters": {"type": "object", "properties": {}}}]
    scripted.append(call("read", {}, id="call_r"))
    paused = await host.say("read the file", tools)
    host.history.append({"role": "tool", "tool_call_id": "call_r", "content": "body"})
    scripted.append(text("it says body"))
    await host.send(tools)
    shown = nonoka_json(project, "sessions", "show", str(paused.session_id))
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds.count("model_call") == 2 and "tool_call" in kinds
    host_result = next(e for e in shown["events"] if e["kind"] == "tool_result")
    assert host_result["data"]["content"] == "body"
    assert host_result["data"]["executed_by"] == "host"
    assert shown["usage"]["input_tokens"] > 0
    assert shown["session"]["status"] == "completed"
    row = next(r for r in nonoka_json(project, "sessions", "list")
               if r["session_id"] == paused.session_id)
    assert row["input_tokens"] == shown["usage"]["input_tokens"]
