"""Every setting arrives: with the model entry ``nonoka opencode init`` writes, the real
OpenCode treats nonoka's model as it treats the same model directly.

One project holds both paths: OpenCode's own ``anthropic`` and ``openai`` providers (their
models as OpenCode 1.18.33 lists them, its bundled models.dev snapshot; offline) pointed
at scripted endpoints, and nonoka's ``anthropic:claude-sonnet-4-5`` and
``openai-responses:gpt-5`` (``nonoka opencode init --model ...``) in front of scripted
endpoints of their own. One ``opencode serve`` runs every case (the two calls ``opencode
run --attach`` makes, through the server's API), directly and through nonoka at the same
time, and the test compares what each endpoint received and what OpenCode reported: the
agent's temperature, the thinking a variant asks for (``high``), the family's system prompt
and the session's cost.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nonoka.cli.opencode_cmd import ANTHROPIC_BETA, init_project
from nonoka.testing.anthropic_replies import AnthropicReply
from nonoka.testing.anthropic_server import ScriptedAnthropicServer
from nonoka.testing.server import ResponsesReply, ScriptedResponsesServer
from tests.e2e.test_opencode import opencode_bin, works
from tests.opencode.test_side_by_side import RUN_PERMISSION

__all__ = ["opencode_bin"]  # the npm-installed OpenCode, when none is on PATH

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
RUN_TIMEOUT = 180
TEMPERATURE = 0.3
ANTHROPIC = ("anthropic/claude-sonnet-4-5", "nonoka/anthropic:claude-sonnet-4-5")
OPENAI = ("openai/gpt-5", "nonoka/openai-responses:gpt-5")
MINIMAX = ("anthropic/MiniMax-M2.5", "nonoka/anthropic:MiniMax-M2.5")
"""A model over Anthropic's API whose id names no Claude: OpenCode gives it a ``topK`` of
its own (ProviderTransform.topK) and turns tool streaming off (ProviderTransform.options)."""
MODEL_LINE = re.compile(r"You are powered by the model named [^\n]*\. The exact model ID is \S+")
"""The one line of OpenCode's system prompt that names the model it runs (docs/opencode.md,
``model-identity-line``)."""

# Models OpenCode lists whose variants its own rules decide (ProviderTransform.variants):
# described to nonoka in .nonoka/config.toml, each gets the same levels through nonoka.
FAMILY_MODELS = {
    "anthropic:claude-opus-4-5": "anthropic/claude-opus-4-5",
    "anthropic:claude-haiku-4-5": "anthropic/claude-haiku-4-5",
    "anthropic:claude-opus-4-6": "anthropic/claude-opus-4-6",
    "anthropic:claude-opus-4-7": "anthropic/claude-opus-4-7",
    "anthropic:claude-sonnet-4-6": "anthropic/claude-sonnet-4-6",
    "openai:o3": "openai/o3",
    "openai:gpt-5-mini": "openai/gpt-5-mini",
    "openai:gpt-5-pro": "openai/gpt-5-pro",
    "openai:gpt-5.1": "openai/gpt-5.1",
    "openai:gpt-5.2": "openai/gpt-5.2",
    "openai:gpt-5.2-pro": "openai/gpt-5.2-pro",
    "openai:gpt-5.3-codex": "openai/gpt-5.3-codex",
}


# -- the endpoints ------------------------------------------------------------------------

def _anthropic_step(body: dict[str, Any]) -> AnthropicReply:
    """Every chat step uses 1,000 new, 2,000 cached and 500 cache-written input tokens
    and 50 output tokens."""
    if not body.get("tools"):
        return AnthropicReply(text="a title")
    return AnthropicReply(text="ANTHROPIC-DONE", input_tokens=1000, cache_read_tokens=2000,
                          cache_write_tokens=500, output_tokens=50)


def _responses_step(body: dict[str, Any]) -> ResponsesReply:
    if not body.get("tools"):
        return ResponsesReply(output=("a title",))
    return ResponsesReply(output=("OPENAI-DONE",), input_tokens=3000, cached_tokens=2000,
                          output_tokens=400, reasoning_tokens=300)


# -- OpenCode with both paths -------------------------------------------------------------


@dataclass
class Run:
    """One message on one path, and the chat requests its endpoint received."""

    done: subprocess.CompletedProcess[str]
    events: list[dict[str, Any]]
    requests: list[dict[str, Any]]

    @property
    def cost(self) -> float:
        """What OpenCode counted the run's steps to cost (its ``step_finish`` parts)."""
        return sum(float(e["part"]["cost"]) for e in self.events
                   if e.get("type") == "step_finish")

    @property
    def tokens(self) -> list[dict[str, Any]]:
        return [e["part"]["tokens"] for e in self.events if e.get("type") == "step_finish"]

    @property
    def body(self) -> dict[str, Any]:
        assert len(self.requests) == 1, [sorted(r) for r in self.requests]
        return self.requests[0]


class Host:
    """A git project with both paths in ``opencode.json``, and ``opencode serve`` in it."""

    def __init__(self, root: Path, binary: Path) -> None:
        self.path = root / "project"
        self.home = root / "home"
        self.path.mkdir()
        self.home.mkdir()
        self.binary = binary
        self.servers: dict[str, Any] = {
            "anthropic-direct": ScriptedAnthropicServer(_anthropic_step),
            "anthropic-nonoka": ScriptedAnthropicServer(_anthropic_step),
            "openai-direct": ScriptedResponsesServer(_responses_step),
            "openai-nonoka": ScriptedResponsesServer(_responses_step),
        }
        for server in self.servers.values():
            server.start()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENCODE", "OPENAI_", "ANTHROPIC_", "NONOKA_", "XDG_"))}
        env.update({
            "PWD": str(self.path), "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1", "NO_COLOR": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
            # nonoka's bridges reach their own endpoints; OpenCode's providers are pointed
            # at theirs in opencode.json
            "ANTHROPIC_BASE_URL": self.servers["anthropic-nonoka"].base_url,
            "OPENAI_BASE_URL": self.servers["openai-nonoka"].base_url,
            "ANTHROPIC_API_KEY": "sk-ant-settings", "OPENAI_API_KEY": "sk-settings",
        })
        self.env = env
        self.serve: subprocess.Popen[str] | None = None
        self.base = ""

    def init(self, spec: str) -> str:
        done = subprocess.run([sys.executable, "-m", "nonoka", "opencode", "init", "--model",
                               spec], cwd=self.path, env=self.env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def configure(self) -> None:
        assert subprocess.run(["git", "init", "-q", "."], cwd=self.path).returncode == 0
        config = self.path / ".nonoka" / "config.toml"
        config.parent.mkdir(mode=0o700)
        # The family models, described as OpenCode lists them (their limits decide
        # Anthropic's budgets); reasoning: they all think.
        config.write_text("".join(
            f'[models."{spec}"]\ncontext_tokens = 200000\nmax_output_tokens = 64000\n'
            "reasoning = true\ninput = 1.0\noutput = 2.0\n\n" for spec in FAMILY_MODELS)
            + f'[models."{MINIMAX[1].removeprefix("nonoka/")}"]\ncontext_tokens = 200000\n'
            "max_output_tokens = 64000\nreasoning = false\ninput = 0.3\noutput = 1.2\n",
            encoding="utf-8")
        for spec in [*FAMILY_MODELS, MINIMAX[1].removeprefix("nonoka/")]:
            # (in this process: the command itself runs below)
            init_project(self.path, python=sys.executable, model=spec)
        for spec in (OPENAI[1], ANTHROPIC[1]):
            said = self.init(spec.removeprefix("nonoka/"))
            assert "and nonoka/default as its alias" in said, said
        path = self.path / "opencode.json"
        settings = json.loads(path.read_text(encoding="utf-8"))
        settings["provider"]["anthropic"] = {"options": {
            "baseURL": self.servers["anthropic-direct"].base_url + "/v1",
            "apiKey": "sk-ant-settings"}, "models": {MINIMAX[0].removeprefix("anthropic/"): {
                "name": "MiniMax M2.5", "tool_call": True, "reasoning": False,
                "temperature": True, "limit": {"context": 200000, "output": 64000}}}}
        settings["provider"]["openai"] = {"options": {
            "baseURL": self.servers["openai-direct"].base_url, "apiKey": "sk-settings"}}
        settings["agent"] = {"build": {"temperature": TEMPERATURE}}
        path.write_text(json.dumps(settings, indent=2), encoding="utf-8")

    def start(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        self.serve = subprocess.Popen(
            [str(self.binary), "serve", "--port", str(port), "--hostname", "127.0.0.1"],
            cwd=self.path, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(self.serve, lines, self.path.parent / "serve.log"),
                         daemon=True).start()
        said: list[str] = []
        while True:  # until it says it listens, or ends
            line = lines.get(timeout=120)
            if line is None:
                raise AssertionError("opencode serve ended:\n" + "".join(said))
            said.append(line)
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.base = found.group(1)
                return

    def close(self) -> None:
        if self.serve is not None:
            self.serve.terminate()
            try:
                self.serve.wait(10)
            except subprocess.TimeoutExpired:
                self.serve.kill()
                self.serve.wait(10)
        for server in self.servers.values():
            server.close()

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=60) as response:
            return json.loads(response.read().decode())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                         method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=RUN_TIMEOUT) as response:
            return json.loads(response.read().decode() or "null")

    def run(self, model: str, message: str, variant: str | None = None) -> Run:
        """What ``opencode run --attach <serve> --format json --model <model> [--variant]
        <message>`` does, as the server's API: a session with the permissions ``run`` gives
        it, the message, then every part of the session's assistant messages as ``run``
        prints them. (An ``opencode run`` process would load all of OpenCode once more for
        each side of each case, to make the same two calls.)"""
        family = "anthropic" if "anthropic" in model else "openai"
        side = "nonoka" if model.startswith("nonoka/") else "direct"
        server = self.servers[f"{family}-{side}"]
        before = len(server.requests)
        provider, model_id = model.split("/", 1)
        session = self.post("/session", {"permission": RUN_PERMISSION})["id"]
        chosen = {"variant": variant} if variant is not None else {}
        self.post(f"/session/{session}/message", {
            "model": {"providerID": provider, "modelID": model_id}, **chosen,
            "parts": [{"type": "text", "text": message}]})
        events: list[dict[str, Any]] = []
        for sent in self.get(f"/session/{session}/message"):
            if sent["info"]["role"] != "assistant":
                continue
            if sent["info"].get("error"):
                events.append({"type": "error", "error": sent["info"]["error"]})
            events.extend({"type": part["type"].replace("-", "_"), "sessionID": session,
                           "part": part} for part in sent["parts"])
        said = "\n".join(json.dumps(e) for e in events)
        done = subprocess.CompletedProcess(["POST", f"/session/{session}/message"], 0, said, "")
        assert not [e for e in events if e.get("type") == "error"], said[-3000:]
        chat = [r for r in server.requests[before:] if r.get("tools")]
        return Run(done, events, chat)

    def both(self, models: tuple[str, str], message: str,
             variant: str | None = None) -> tuple[Run, Run]:
        """The same message directly and through nonoka, at the same time."""
        with ThreadPoolExecutor(2) as pool:
            direct = pool.submit(self.run, models[0], message, variant)
            nonoka = pool.submit(self.run, models[1], message, variant)
            return direct.result(), nonoka.result()


def _pump(process: subprocess.Popen[str], lines: queue.Queue[str | None], log: Path) -> None:
    """Hand ``process``'s output to ``lines`` line by line (``None`` at its end), and keep
    it in ``log``."""
    assert process.stdout is not None
    with log.open("w", encoding="utf-8") as kept:
        for line in process.stdout:
            kept.write(line)
            kept.flush()
            lines.put(line)
    lines.put(None)


def _binary(request: pytest.FixtureRequest) -> Path:
    """``opencode`` at OPENCODE_VERSION: the one on PATH, else the e2e tests' npm copy."""
    found = shutil.which("opencode")
    if found is not None and works(Path(found)):
        return Path(found)
    binary: Path = request.getfixturevalue("opencode_bin")
    return binary


@pytest.fixture(scope="module")
def host(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    setup = Host(tmp_path_factory.mktemp("settings"), _binary(request))
    try:
        setup.configure()
        setup.start()
        yield setup
    finally:
        setup.close()


# -- what is compared ---------------------------------------------------------------------


def _anthropic_system(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return MODEL_LINE.sub("<the model>", system)
    return MODEL_LINE.sub("<the model>", "\n".join(b["text"] for b in system or ()))


def _responses_system(body: dict[str, Any]) -> str:
    texts = []
    for item in body.get("input") or ():
        if item.get("role") in ("system", "developer"):
            content = item.get("content")
            texts.append(content if isinstance(content, str) else
                         "\n".join(p.get("text", "") for p in content))
    return MODEL_LINE.sub("<the model>", "\n".join(texts))


def _models(host: Host) -> dict[str, dict[str, Any]]:
    """Every model as OpenCode resolved it (``GET /provider``), by ``provider/model``."""
    return {f"{provider['id']}/{name}": model for provider in host.get("/provider")["all"]
            for name, model in provider["models"].items()}


# -- the cases ----------------------------------------------------------------------------


def test_opencode_resolves_nonoka_s_model_as_the_model_itself(host: Host) -> None:
    """The entry OpenCode builds from what init wrote: the same capabilities, prices and
    thinking variants as OpenCode's own entry for the model, and an API id naming the
    model's family."""
    models = _models(host)
    for direct_id, nonoka_id in (ANTHROPIC, OPENAI):
        direct, nonoka = models[direct_id], models[nonoka_id]
        assert nonoka["api"]["id"] == nonoka_id.removeprefix("nonoka/")
        mine, theirs = dict(nonoka["capabilities"]), dict(direct["capabilities"])
        # nonoka's catalog says OpenAI's models read PDFs (as OpenAI documents);
        # OpenCode's list says GPT-5 does not (docs/opencode.md).
        mine["input"] = {**mine["input"], "pdf": theirs["input"]["pdf"]}
        assert mine == theirs, nonoka_id
        assert nonoka["limit"]["output"] == direct["limit"]["output"]
        want = direct["cost"]
        got = nonoka["cost"]
        assert (got["input"], got["output"], got["cache"]["read"]) == (
            want["input"], want["output"], want["cache"]["read"]), nonoka_id
    anthropic = models[ANTHROPIC[0]], models[ANTHROPIC[1]]
    assert anthropic[1]["variants"] == anthropic[0]["variants"]
    assert anthropic[1]["cost"]["cache"]["write"] == anthropic[0]["cost"]["cache"]["write"]
    openai = models[OPENAI[0]], models[OPENAI[1]]
    assert {k: v["reasoningEffort"] for k, v in openai[1]["variants"].items()} == {
        k: v["reasoningEffort"] for k, v in openai[0]["variants"].items()}
    assert models["nonoka/default"]["api"]["id"] == ANTHROPIC[1].removeprefix("nonoka/"), (
        "default: the alias of the model init described last")


def test_each_family_s_thinking_levels_are_opencode_s(host: Host) -> None:
    """For each model whose variants OpenCode's own rules decide, nonoka's entry has the
    same levels in the same order, with the same options (Anthropic's) or the same
    reasoning effort (OpenAI's)."""
    models = _models(host)
    for spec, direct_id in FAMILY_MODELS.items():
        direct, nonoka = models[direct_id]["variants"], models[f"nonoka/{spec}"]["variants"]
        assert list(nonoka) == list(direct), spec
        if spec.startswith("anthropic:"):
            assert nonoka == direct, spec
        else:
            assert nonoka == {k: {"reasoningEffort": v["reasoningEffort"]}
                              for k, v in direct.items()}, spec


def test_an_agent_s_temperature_the_family_prompt_and_the_cost(host: Host) -> None:
    direct, nonoka = host.both(ANTHROPIC, "SETTINGS-1: hello")
    assert "ANTHROPIC-DONE" in nonoka.done.stdout
    assert direct.body["temperature"] == nonoka.body["temperature"] == TEMPERATURE
    assert nonoka.body["max_tokens"] == direct.body["max_tokens"]
    # Claude's own prompt ("You are OpenCode, the best coding agent on the planet."...),
    # not the generic one a model id without its family gets.
    assert _anthropic_system(nonoka.body) == _anthropic_system(direct.body)
    assert "best coding agent on the planet" in _anthropic_system(nonoka.body)
    # The same usage costs the same: 1,000 new, 2,000 read and 500 written input tokens
    # and 50 output tokens at Claude Sonnet 4.5's prices.
    assert nonoka.tokens == direct.tokens
    expected = (1000 * 3 + 2000 * 0.3 + 500 * 3.75 + 50 * 15) / 1e6
    assert nonoka.cost == pytest.approx(direct.cost) == pytest.approx(expected)


def test_anthropic_gets_the_same_beta_features_and_session_headers(host: Host) -> None:
    """OpenCode's own Anthropic provider asks for its beta features and names the session
    in every request's headers; through nonoka the same reach Anthropic (init writes the
    beta into the model's headers), with nonoka's own key and user agent appended."""
    direct, nonoka = host.both(ANTHROPIC, "SETTINGS-4: hello")
    sent = {}
    for side, run in (("direct", direct), ("nonoka", nonoka)):
        server = host.servers[f"anthropic-{side}"]
        chat = [h for h, body in zip(server.headers, server.requests, strict=True)
                if body in run.requests]
        assert chat, side
        sent[side] = chat[-1]
    want, got = sent["direct"], sent["nonoka"]
    # The AI SDK's Anthropic provider adds the beta of its own structured outputs, which
    # nonoka's adapter does not use (docs/opencode.md, "Differences around the content").
    theirs = set(want["anthropic-beta"].split(",")) - {"structured-outputs-2025-11-13"}
    assert got["anthropic-beta"].split(",") == ANTHROPIC_BETA.split(",")
    assert set(ANTHROPIC_BETA.split(",")) == theirs
    for name in ("x-session-id", "x-session-affinity"):
        assert name in want and name in got, (want, got)
    assert got["user-agent"].startswith("opencode/1.18.33 ")
    assert got["user-agent"].endswith(" nonoka/0.1.0")
    assert got["x-api-key"] == want["x-api-key"]  # each side's own key (the same here)


def _tool_streaming(run: Run) -> dict[str, Any]:
    """Each tool of the run's request by name, with its ``eager_input_streaming``."""
    return {t["name"]: t.get("eager_input_streaming") for t in run.body["tools"]}


def test_anthropic_gets_the_same_tool_streaming_and_top_k(host: Host) -> None:
    """OpenCode's own Anthropic provider streams every tool's input unbuffered
    (``eager_input_streaming: true``) in its streamed calls, unless the model's id names no
    Claude; a model OpenCode gives a ``topK`` (MiniMax M2.5: 40) gets it as ``top_k``.
    Through nonoka the same reach Anthropic."""
    direct, nonoka = host.both(ANTHROPIC, "SETTINGS-5: hello")
    assert _tool_streaming(direct) == _tool_streaming(nonoka)
    assert set(_tool_streaming(nonoka).values()) == {True}, _tool_streaming(nonoka)
    assert "top_k" not in direct.body and "top_k" not in nonoka.body

    direct, nonoka = host.both(MINIMAX, "SETTINGS-6: hello")
    assert direct.body["model"] == "MiniMax-M2.5" == nonoka.body["model"]
    assert direct.body["top_k"] == nonoka.body["top_k"] == 40
    assert _tool_streaming(direct) == _tool_streaming(nonoka)
    assert set(_tool_streaming(nonoka).values()) == {None}, _tool_streaming(nonoka)


def test_a_variant_asks_for_the_same_thinking(host: Host) -> None:
    direct, nonoka = host.both(ANTHROPIC, "SETTINGS-2: think hard", variant="high")
    thinking = {"type": "enabled", "budget_tokens": 16000}
    assert direct.body["thinking"] == nonoka.body["thinking"] == thinking
    # The budget comes on top of the answer's tokens, and no sampling beside thinking.
    assert nonoka.body["max_tokens"] == direct.body["max_tokens"] == 32000 + 16000
    assert "temperature" not in direct.body and "temperature" not in nonoka.body
    assert nonoka.cost == pytest.approx(direct.cost)


def test_an_openai_reasoning_model_s_effort_prompt_and_cost(host: Host) -> None:
    # No variant: OpenCode's default effort for GPT-5; no temperature (the model takes
    # none); GPT-5's own prompt.
    direct, nonoka = host.both(OPENAI, "SETTINGS-3: hello")
    assert "OPENAI-DONE" in nonoka.done.stdout
    assert direct.body["reasoning"]["effort"] == nonoka.body["reasoning"]["effort"] == "medium"
    assert "temperature" not in direct.body and "temperature" not in nonoka.body
    assert _responses_system(nonoka.body) == _responses_system(direct.body)
    assert nonoka.tokens == direct.tokens
    # 1,000 new and 2,000 cached input tokens, 400 output tokens (300 of them reasoning)
    expected = (1000 * 1.25 + 2000 * 0.125 + 400 * 10) / 1e6
    assert nonoka.cost == pytest.approx(direct.cost) == pytest.approx(expected)

    direct, nonoka = host.both(OPENAI, "SETTINGS-4: think hard", variant="high")
    assert direct.body["reasoning"]["effort"] == nonoka.body["reasoning"]["effort"] == "high"
    assert direct.body["reasoning"].get("summary") == nonoka.body["reasoning"].get("summary")


# -- the provider and the protocol carry every option --------------------------------------

CALL = """
const [index, python, project] = process.argv.slice(1);
const { createNonoka } = await import(index);
const provider = createNonoka({ name: "nonoka", cwd: project, warm: false,
                                command: [python, "-m", "nonoka", "bridge"] });
const model = provider.languageModel("openai:my-model");
const { stream } = await model.doStream({
  prompt: [{ role: "system", content: "Be brief." },
           { role: "user", content: [{ type: "text", text: "hello" }] }],
  maxOutputTokens: 1234, temperature: 0.3, topP: 0.8, stopSequences: ["END"], seed: 7,
  frequencyPenalty: 0.1, presencePenalty: 0.2,
  providerOptions: { nonoka: { reasoningEffort: "high",
                               thinking: { type: "enabled", budgetTokens: 16000 } } },
});
const parts = [];
for await (const part of stream) parts.push(part.type === "error" ? String(part.error) : part.type);
console.log(JSON.stringify(parts));
process.exit(0);
"""


def test_the_provider_carries_every_call_option_to_the_model(tmp_path: Path) -> None:
    """What OpenCode hands the provider for one step (its agent's and model's settings and
    a variant's options) crosses the protocol and the bridge whole: through ``openai:``
    to an OpenAI-compatible server, each is a body field by its Chat Completions name,
    and a variant's ``thinking`` arrives as OpenCode wrote it."""
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("Node.js is required in CI")
        pytest.skip("Node.js is not installed")
    from nonoka.cli.opencode_cmd import shipped_provider_dir
    from nonoka.testing import text
    from nonoka.testing.server import ScriptedOpenAIServer

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NONOKA_"))}
    with ScriptedOpenAIServer([text("HELLO")]) as server:
        env.update({"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-options",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC),
                                                                env.get("PYTHONPATH")]))})
        done = subprocess.run(
            [node, "--input-type=module", "-e", CALL,
             str(shipped_provider_dir() / "index.js"), sys.executable, str(tmp_path)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)[-1] == "finish", done.stdout
        [body] = server.requests
    sent = {k: body.get(k) for k in ("max_tokens", "temperature", "top_p", "stop", "seed",
                                     "frequency_penalty", "presence_penalty",
                                     "reasoning_effort", "thinking")}
    assert sent == {"max_tokens": 1234, "temperature": 0.3, "top_p": 0.8, "stop": ["END"],
                    "seed": 7, "frequency_penalty": 0.1, "presence_penalty": 0.2,
                    "reasoning_effort": "high",
                    "thinking": {"type": "enabled", "budgetTokens": 16000}}
