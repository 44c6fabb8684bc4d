"""Claude Code (``claude -p``, the pinned client in tests/clients) run for real, offline:
a home of its own, its updates, telemetry and error reports off, its API key and
``ANTHROPIC_BASE_URL`` pointing at a local endpoint, nothing else of the machine's, and a
proxy that fails a run which tried to reach any other host; and
a strict scripted Anthropic endpoint that refuses what the real API refuses (its checks,
the ``anthropic_thinking`` strict mode, and the ``anthropic`` package's request types)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from anthropic.types.beta import (
    BetaContentBlockParam,
    BetaMessageParam,
    BetaTextBlockParam,
    BetaToolUnionParam,
    message_create_params,
)
from anthropic.types.beta.beta_tool_result_block_param import Content as ToolResultContent
from pydantic import TypeAdapter, ValidationError

from nonoka.testing.anthropic_replies import invalid_request
from nonoka.testing.server import ScriptedAnthropicServer
from tests.support.trap_proxy import TrapProxy

CLAUDE = Path(__file__).resolve().parents[1] / "clients" / "node_modules" / ".bin" / "claude"
MAIN_MODEL = "claude-opus-5-5"
"""Claude Code's own default model with an API key, asked for by name."""
OFFLINE = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_ERROR_REPORTING": "1"}

Script = Callable[[dict[str, Any]], Any]

_BODY = TypeAdapter(message_create_params.MessageCreateParamsStreaming)
_MESSAGE: TypeAdapter[Any] = TypeAdapter(BetaMessageParam)
_BLOCK: TypeAdapter[Any] = TypeAdapter(BetaContentBlockParam)
_RESULT_PART: TypeAdapter[Any] = TypeAdapter(ToolResultContent)
_SYSTEM: TypeAdapter[Any] = TypeAdapter(BetaTextBlockParam)
_TOOL: TypeAdapter[Any] = TypeAdapter(BetaToolUnionParam)


def claude_binary() -> Path:
    if not CLAUDE.exists():
        pytest.fail(f"Claude Code is not installed at {CLAUDE}: run `npm ci` in tests/clients "
                    "(.ci/run does)")
    return CLAUDE


def typed_problem(body: dict[str, Any]) -> str | None:
    """What the ``anthropic`` package's (beta) request types refuse in ``body``, one
    level at a time (pydantic checks an ``Iterable`` field only as it is read), strictly
    (no ``"yes"`` for a boolean)."""
    try:
        _BODY.validate_python(body, strict=True)
        system = body.get("system")
        for block in system if isinstance(system, list) else []:
            _SYSTEM.validate_python(block, strict=True)
        for tool in body.get("tools") or []:
            _TOOL.validate_python(tool, strict=True)
        for message in body.get("messages") or []:
            _MESSAGE.validate_python(message, strict=True)
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                _BLOCK.validate_python(block, strict=True)
                inner = block.get("content") if block.get("type") == "tool_result" else None
                for part in inner if isinstance(inner, list) else []:
                    _RESULT_PART.validate_python(part, strict=True)
    except ValidationError as exc:
        errors = exc.errors()
        # of a union's members, the ones of the block's own type or role say what is wrong
        other = {e["loc"][0] for e in errors if e["loc"][1:2] in (("type",), ("role",))}
        first = next((e for e in errors if e["loc"][:1] and e["loc"][0] not in other),
                     errors[0])
        return f"{'.'.join(str(n) for n in first['loc'])}: {first['msg']}"
    return None


def strict_endpoint(script: Script) -> ScriptedAnthropicServer:
    """The scripted Messages API endpoint, as strict as the real one."""
    def checked(body: dict[str, Any]) -> Any:
        problem = typed_problem(body)
        return invalid_request(problem) if problem is not None else script(body)

    return ScriptedAnthropicServer(checked, strict=("anthropic_thinking",))


class Trap(TrapProxy):
    """A local proxy that only records who tried to use it: Claude Code's proxy, so any
    request to a host other than the local endpoint (``NO_PROXY``) shows up here."""

    def __init__(self) -> None:
        super().__init__("claude-trap")


class ClaudeCode:
    """``claude -p`` with a home and a working directory of its own, whose proxy is a
    ``Trap``: every run checks it reached no other host."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.work = root / "work"
        self.home.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.binary = claude_binary()
        self.trap = Trap()

    def close(self) -> None:
        self.trap.close()

    def transcript(self, session: str) -> list[dict[str, Any]]:
        """The records of a session's transcript, as Claude Code keeps it."""
        found = list((self.home / ".claude" / "projects").glob(f"*/{session}.jsonl"))
        assert len(found) == 1, f"no transcript of {session}: {found}"
        return [json.loads(line) for line in found[0].read_text().splitlines() if line]

    def environment(self, base_url: str, key: str) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
                "CLAUDE_CONFIG_DIR": str(self.home / ".claude"), "LANG": "C.UTF-8",
                "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": key, **OFFLINE,
                "HTTPS_PROXY": self.trap.url, "HTTP_PROXY": self.trap.url,
                "NO_PROXY": "127.0.0.1,localhost"}

    def run(self, base_url: str, prompt: str, *args: str, key: str = "client-key",
            ) -> dict[str, Any]:
        """One ``claude -p`` run to its end; its JSON result."""
        command = [str(self.binary), "-p", prompt, "--output-format", "json",
                   "--model", MAIN_MODEL, *args]
        done = subprocess.run(command, cwd=self.work, env=self.environment(base_url, key),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, (done.returncode, done.stdout[-2000:],
                                      done.stderr[-2000:])
        assert not self.trap.asked, f"Claude Code tried another host: {self.trap.asked}"
        result: dict[str, Any] = json.loads(done.stdout)
        return result
