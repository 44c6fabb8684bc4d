"""Codex CLI (``@openai/codex``, pinned in tests/clients) run against a ``nonoka serve``:
a ``CODEX_HOME`` of its own whose ``config.toml`` is the one docs/serve.md shows, and
an environment that can reach nothing but the local server."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.serve.harness import ServeProcess, openai_upstream
from tests.support.trap_proxy import TrapProxy

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
CODEX = CLIENTS / "node_modules" / ".bin" / "codex"

CONFIG = """\
model = "{model}"
model_provider = "nonoka"
model_context_window = {window}
model_auto_compact_token_limit = {compact_at}
approval_policy = "never"
sandbox_mode = "danger-full-access"
web_search = "disabled"
check_for_update_on_startup = false

[model_providers.nonoka]
name = "azure"
base_url = "{base_url}"
env_key = "NONOKA_SERVE_KEY"
wire_api = "responses"
supports_websockets = false
request_max_retries = 0
stream_max_retries = 0

[agents]
enabled = false

[features]
goals = false
apps = false
plugins = false
remote_plugin = false
image_generation = false
tool_suggest = false
shell_snapshot = false

[analytics]
enabled = false

[otel]
exporter = "none"
"""
"""Codex's configuration (docs/serve.md, "Codex CLI"): the provider is nonoka serve,
named ``azure`` because Codex asks the server to compact (remote compaction) only for
a provider it takes for OpenAI's or Azure's; ``web_search``, subagents and the other
hosted tools are off, as only an ``openai-responses:`` model runs hosted tools; no
update check, analytics or telemetry. ``{model}`` is the name Codex asks for."""



class Outside(TrapProxy):
    """The proxy Codex is given for everything but the local server: it records what
    each connection asks for (``CONNECT host:443``...) and refuses it, so nothing leaves
    the machine and a test can see that nothing tried to."""

    def __init__(self) -> None:
        super().__init__("codex-outside")


def codex_binary() -> Path:
    """The pinned Codex CLI; a clear failure (never a skip) when it is not installed."""
    if not CODEX.exists():
        raise AssertionError(f"Codex CLI is not installed at {CODEX}: run `npm ci` in "
                             f"{CLIENTS} (.ci/run does)")
    return CODEX


@dataclass
class CodexRun:
    returncode: int
    stdout: str
    stderr: str


class Codex:
    """``codex exec`` in ``workspace``, its home in ``home``, pointed at ``base_url``."""

    def __init__(self, home: Path, workspace: Path, base_url: str, outside: Outside, *,
                 window: int = 200000, compact_at: int = 150000,
                 model: str = "nonoka") -> None:
        """``model``: the name Codex asks for (the server's model answers any): Codex
        picks its tools' shapes by it (for some, ``apply_patch`` is a custom tool)."""
        self.binary = codex_binary()
        self.outside = outside
        self.home = home
        self.workspace = workspace
        home.mkdir(parents=True, exist_ok=True)
        workspace.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(CONFIG.format(
            base_url=base_url, window=window, compact_at=compact_at, model=model))

    def env(self) -> dict[str, str]:
        kept = {k: v for k, v in os.environ.items()
                if not k.startswith(("OPENAI_", "CODEX_", "NONOKA_", "ANTHROPIC_"))
                and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
        return {**kept, "CODEX_HOME": str(self.home), "HOME": str(self.home),
                "NONOKA_SERVE_KEY": "unused", "HTTPS_PROXY": self.outside.url,
                "HTTP_PROXY": self.outside.url, "ALL_PROXY": self.outside.url,
                "NO_PROXY": "127.0.0.1,localhost", "RUST_LOG": "error"}

    def exec(self, prompt: str, *, resume: str | None = None,
             timeout: float = 300) -> CodexRun:
        """One ``codex exec`` of ``prompt``; ``resume``: the thread it goes on with."""
        command = [str(self.binary), "exec", "--skip-git-repo-check",
                   "--sandbox", "danger-full-access",
                   *(("resume", resume) if resume is not None else ()), prompt]
        done = subprocess.run(command, cwd=self.workspace, env=self.env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
        return CodexRun(done.returncode, done.stdout, done.stderr)

    def rollout(self) -> list[dict[str, Any]]:
        """Codex's own record of its thread (``sessions/.../rollout-*.jsonl``): what it
        kept of every answer, the compacted history included."""
        [path] = sorted((self.home / "sessions").rglob("rollout-*.jsonl"))
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextmanager
def codex_on_serve(root: Path, project: Path, model: str, upstream: str, outside: Outside,
                   codex_model: str) -> Iterator[Codex]:
    """Codex (its home and workspace under ``root``) pointed at ``nonoka serve`` as a
    process of its own in ``project``, whose ``model`` is the OpenAI-compatible endpoint
    at ``upstream``; the server is stopped afterwards, with no traceback on its stderr."""
    served = ServeProcess(project, model, openai_upstream(upstream))
    try:
        yield Codex(root / "codex-home", root / "workspace", served.url, outside,
                    model=codex_model)
    finally:
        served.stop_clean()
