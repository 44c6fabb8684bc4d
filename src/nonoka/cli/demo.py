"""``nonoka demo``: the whole idea in a few seconds, with no API key.

A built-in scripted model (a local OpenAI-compatible server in this process) stands in for
a real one. Everything else is real: each turn is a fresh ``nonoka bridge`` process driven
by the Python provider, the session lives in ``<dir>/.nonoka/sessions.db``, and the demo
plays the host (it runs the host tool and resends the history). It shows a host-tool round
trip, a bridge killed with SIGKILL mid-turn and the turn retried in a new process, and a
lost session-id file recovered by conversation key — checking each claim as it goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import click

from nonoka.llm.base import ModelResponse, Usage
from nonoka.state.messages import Message, ToolCall

MODEL = "openai:nonoka-demo-scripted"
WEATHER_TOOL = {
    "name": "get_weather", "description": "Current weather for a city (run by the host)",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}
QUESTIONS = ("What's the weather in Lyon?", "Should I take an umbrella?",
             "Plan a picnic for Saturday.", "What have I asked you so far?")
PICNIC = "Picnic plan: Parc de la Tete d'Or at noon; bring sandwiches, fruit and water."
_PID_WRAPPER = ("import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
                "from nonoka.cli.main import main; main(['bridge'])")
"""``nonoka bridge`` run by this interpreter, writing its pid first (so the demo can kill it)."""


def _usage(tokens_in: int, tokens_out: int) -> Usage:
    """Made-up usage, priced like a small hosted model (so the cost column has numbers)."""
    return Usage(tokens_in, tokens_out, round((tokens_in * 0.15 + tokens_out * 0.6) / 1e6, 9))


def _answer(text: str, tokens_in: int, tokens_out: int) -> ModelResponse:
    return ModelResponse(text=text, usage=_usage(tokens_in, tokens_out))


def script() -> list[Any]:
    """The scripted model's answers, one per model call, in order."""
    from nonoka.testing.server import Delay

    ask_weather = ModelResponse(
        tool_calls=[ToolCall(id="call_weather_1", name="get_weather",
                             arguments=json.dumps({"city": "Lyon"}))],
        finish_reason="tool_calls", usage=_usage(96, 14))
    return [
        ask_weather,
        _answer("It is sunny in Lyon right now, 21 C.", 140, 12),
        _answer("No umbrella needed: no rain is expected today.", 168, 11),
        Delay(60, _answer("(never delivered: this process is killed first)", 1, 1)),
        _answer(PICNIC, 190, 19),
        _answer("The weather in Lyon, whether to take an umbrella, and a picnic plan.", 232, 16),
    ]


def host_weather(arguments: str) -> str:
    """The host's side of ``get_weather``: the demo is the host, so it answers."""
    city = json.loads(arguments or "{}").get("city", "?")
    return f"{city}: sunny, 21 C, no rain expected"


class Checks:
    """Each claim the demo makes, checked; failures are printed where they happen."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.failed: list[str] = []
        self.passed = 0

    def __call__(self, ok: bool, claim: str, detail: object = "") -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed.append(claim)
            self.say(click.style(f"    FAILED: {claim}" + (f" ({detail})" if detail else ""),
                                 fg="red"))
        return ok


@contextlib.contextmanager
def _default_database() -> Iterator[None]:
    """Read the demo's own ``.nonoka/sessions.db`` even if ``NONOKA_DATABASE_URL`` is set."""
    saved = os.environ.pop("NONOKA_DATABASE_URL", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["NONOKA_DATABASE_URL"] = saved


@contextlib.contextmanager
def _quiet_provider_logs() -> Iterator[None]:
    """The provider warns on stderr about recoveries and dead bridges; the demo narrates
    those itself."""
    logger = logging.getLogger("nonoka.provider")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    previous, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = previous


async def run_demo(directory: Path | None, say: Callable[[str], None]) -> bool:
    """Run the demo in ``directory`` (a new temporary one by default); ``True`` if every
    check held."""
    with _default_database():
        return await _demo(_project(directory), say)


async def _demo(project: Path, say: Callable[[str], None]) -> bool:
    from nonoka.testing.server import ScriptedOpenAIServer

    checks = Checks(say)
    started = time.monotonic()
    server = ScriptedOpenAIServer(script(), model="nonoka-demo-scripted").start()
    try:
        say(f"project:  {project}")
        say(f"model:    {MODEL} -- a built-in scripted model served at {server.base_url} "
            "(no API key needed)")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "no-key-needed",
               "NONOKA_MODEL": MODEL}
        with _quiet_provider_logs():
            session_id = await _steps(project, env, server, checks, say)
    except Exception as exc:  # a broken step ends the demo; say what broke
        checks(False, "the demo ran to the end", f"{type(exc).__name__}: {exc}")
        session_id = None
    finally:
        server.close()
    if session_id is not None:
        await _show(project, session_id, checks, say)
    elapsed = time.monotonic() - started
    if checks.failed:
        say(click.style(f"\ndemo FAILED: {len(checks.failed)} check(s) did not hold: "
                        + "; ".join(checks.failed), fg="red", bold=True))
        return False
    say(click.style(f"\ndemo OK: all {checks.passed} checks held ({elapsed:.1f} s). "
                    f"Look around: cd {project} && {this_command()} sessions list", fg="green"))
    return True


def this_command() -> str:
    """How to run this installation's ``nonoka`` from a shell: ``nonoka`` when that is
    what PATH finds, else the script beside this Python (a virtualenv not activated),
    else ``python -m nonoka``."""
    import shlex
    import shutil

    script = Path(sys.executable).parent / "nonoka"
    found = shutil.which("nonoka")
    if found is not None and script.is_file() and os.path.samefile(found, script):
        return "nonoka"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m nonoka"


def _project(directory: Path | None) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="nonoka-demo-")).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    return directory.resolve()


async def _steps(project: Path, env: dict[str, str], server: Any, checks: Checks,
                 say: Callable[[str], None]) -> str | None:
    """The three scenes; returns the session id (``None`` if the first turn failed)."""
    from nonoka.provider import BridgeError, NonokaProvider, id_file_path

    def provider(command: list[str] | None = None) -> NonokaProvider:
        return NonokaProvider(project, env=env, command=command, timeout=30, cancel_grace=2)

    host = provider()
    history: list[Message] = [Message(role="user", content=QUESTIONS[0])]

    # (a) a conversation with a host tool: every request is a new bridge process.
    say("\n(a) a conversation over three bridge processes, with a tool the host runs")
    first = await host.chat(history, tools=[WEATHER_TOOL])
    calls = first.host_tool_calls
    if not checks(first.finish_reason == "tool_calls" and len(calls) == 1,
                  "turn 1 pauses for the host tool", first.errors or first.finish_reason):
        return None
    sid = first.session_id or ""
    say(f"  > {QUESTIONS[0]!r}: new session {sid[:8]}; the model asks the host to run "
        f"get_weather({calls[0].arguments})")
    result = host_weather(calls[0].arguments)
    history += [first.assistant_message(),
                Message(role="tool", content=result, tool_call_id=calls[0].tool_call_id)]
    second = await host.chat(history, tools=[WEATHER_TOOL])
    checks(second.ok and second.session_id == sid, "the tool result continues the session",
           second.errors or second.session_id)
    say(f"  host ran get_weather -> {result!r}; a new process answers: {second.text!r}")
    history += [second.assistant_message(), Message(role="user", content=QUESTIONS[1])]
    third = await host.chat(history, tools=[WEATHER_TOOL])
    checks(third.ok and third.session_id == sid, "turn 2 continues the session",
           third.errors or third.session_id)
    say(f"  > {QUESTIONS[1]!r}: {third.text!r} (same session {sid[:8]})")

    # (b) SIGKILL while the model call is in flight, then the same turn in a new process.
    say("\n(b) a bridge killed with SIGKILL mid-turn, the turn retried in a fresh process")
    history += [third.assistant_message(), Message(role="user", content=QUESTIONS[2])]
    pid_file = project / ".nonoka" / "demo-bridge.pid"
    doomed = provider([sys.executable, "-c", _PID_WRAPPER, str(pid_file)])
    task = asyncio.create_task(doomed.chat(history, tools=[WEATHER_TOOL]))
    pid = await _wait_for_model_call(server, pid_file, calls_before=3,
                                     stored=lambda: _user_messages(project, sid),
                                     prompt=QUESTIONS[2])
    os.kill(pid, signal.SIGKILL)
    try:
        killed = await task
        checks(False, "the killed bridge ends the request with an error",
               f"it finished: {killed.finish_reason}")
    except BridgeError as exc:
        checks(exc.returncode == -signal.SIGKILL, "the bridge died of SIGKILL", exc.returncode)
    pid_file.unlink(missing_ok=True)
    say(f"  > {QUESTIONS[2]!r}: bridge pid {pid} killed with SIGKILL while the model was "
        "answering")
    retry = await host.chat(history, tools=[WEATHER_TOOL])
    checks(retry.ok and retry.session_id == sid and retry.text == PICNIC,
           "the retried turn continues the same session", retry.errors or retry.session_id)
    stored = await _user_messages(project, sid)
    checks(stored.count(QUESTIONS[2]) == 1, "the killed turn's message is stored once", stored)
    say(f"  retried in a new process: {retry.text!r} (same session {sid[:8]}, the message "
        "stored once)")

    # (c) the id file is lost; the next process finds the session by conversation key.
    say("\n(c) the session-id file deleted, the session recovered by conversation key")
    id_file_path(project).unlink()
    restarted = provider()  # the host restarts: no id in memory, none on disk
    checks(restarted.session_id is None, "the restarted host holds no session id")
    history += [retry.assistant_message(), Message(role="user", content=QUESTIONS[3])]
    fourth = await restarted.chat(history, tools=[WEATHER_TOOL])
    checks(fourth.ok and fourth.recovered and fourth.session_id == sid
           and fourth.recovery_reason == "session_id_missing",
           "the session is recovered by conversation key",
           fourth.errors or (fourth.recovered, fourth.session_id))
    say(f"  deleted {id_file_path(project).relative_to(project)}; > {QUESTIONS[3]!r}: "
        f"recovered: {str(fourth.recovered).lower()} (reason: {fourth.recovery_reason}), "
        f"session {(fourth.session_id or '')[:8]}")
    checks(id_file_path(project).is_file(), "the id file is written again")
    server.assert_done()
    return sid


async def _wait_for_model_call(server: Any, pid_file: Path, *, calls_before: int,
                               stored: Callable[[], Awaitable[list[str]]], prompt: str) -> int:
    """The doomed bridge's pid, once its model request has reached the server and its
    turn has stored the prompt (the request can leave before the runtime has loaded)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pid = _read_pid(pid_file) if len(server.requests) > calls_before else None
        if pid is not None and prompt in await stored():
            return pid
        await asyncio.sleep(0.02)
    raise TimeoutError("the bridge never called the model")


def _read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


async def _user_messages(project: Path, session_id: str) -> list[str]:
    from nonoka.runtime.runner import Runner
    from nonoka.store.project import open_project_stores

    async with open_project_stores(project) as stores:
        session = await Runner(stores.checkpoints).load_session(session_id)
    if session is None:
        return []
    return [e.content for e in session.memory.entries if e.role == "user"]


async def _show(project: Path, session_id: str, checks: Checks,
                say: Callable[[str], None]) -> None:
    """Print what ``nonoka sessions list`` and ``sessions show`` print, and check it."""
    from nonoka.cli.render import print_detail, print_sessions
    from nonoka.cli.sessions_cmd import list_sessions, show_session

    say("\n$ nonoka sessions list")
    sys.stdout.flush()
    records = [record for record, _ in await list_sessions(project)]
    print_sessions(records)
    top = records[0] if records else None
    checks(top is not None and top.session_id == session_id and top.turn_count == 4
           and top.status == "completed", "the listing shows the session first, with 4 turns",
           [(r.session_id[:8], r.turn_count, r.status) for r in records])
    say(f"\n$ nonoka sessions show {session_id[:8]}")
    sys.stdout.flush()
    detail = await show_session(project, session_id[:8])
    print_detail(detail)
    kinds = [e.kind for e in detail.events]
    recovered = [e for e in detail.events if e.data.get("recovery_reason")]
    checks("tool_call" in kinds and len(recovered) == 1,
           "the timeline shows the host tool call and the recovery", kinds)
    checks(detail.usage.model_calls == 5, "five model calls were logged (the killed one never "
           "answered)", detail.usage.model_calls)
