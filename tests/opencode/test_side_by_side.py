"""Side by side with OpenCode itself: what a model endpoint receives from OpenCode through
nonoka is what it receives from OpenCode directly.

The same scripted conversations run twice against ``ScriptedOpenAIServer`` (both servers
in the strict modes ``deepseek_thinking`` and ``gemini_signatures``): once through
OpenCode's own ``@ai-sdk/openai-compatible`` provider (a custom provider ``scripted`` in
``opencode.json``; OpenCode bundles that package, so nothing is downloaded), once through
nonoka (``nonoka opencode init``, the provider ``nonoka``). One ``opencode serve`` holds
both providers in one project, so paths and prompts are the same on both sides; every case
is what ``opencode run --attach`` sends it, through the server's message API (a PDF part:
how the TUI attaches one), direct and through nonoka at the same time.

For each case the requests each server received are compared after removing exactly the
differences ``docs/opencode.md`` lists ("Side by side with OpenCode's own provider"), each
under its name in ``DIFFERENCES``. A new difference fails the test.
"""

from __future__ import annotations

import base64
import copy
import json
import mimetypes
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import call, text
from nonoka.testing.server import (
    Reply,
    ScriptedOpenAIServer,
    Step,
    context_length_exceeded,
    insufficient_quota,
)
from tests.e2e.test_opencode import opencode_bin, works

__all__ = ["opencode_bin"]  # the npm-installed OpenCode, when none is on PATH

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"  # absolute: bridges start in the project directory
DOCS = ROOT / "docs" / "opencode.md"
RUN_TIMEOUT = 180

DIFFERENCES = {
    "model-identity-line": (
        "OpenCode's system prompt names the model it runs (nonoka/openai:m, not scripted/m)"),
    "tool-call-arguments-as-written": (
        "a tool call goes back with its arguments as the model wrote them, not re-serialised"),
    "tool-call-content-null": (
        "an assistant message that only calls tools: nonoka sends content null, OpenCode's "
        "provider an empty string"),
    "gemini-signature-carried": (
        "a Gemini thought signature: nonoka sends it back, OpenCode's provider drops it and "
        "Gemini refuses the turn"),
    "quota-not-retried": (
        "a spent quota (HTTP 429 insufficient_quota): nonoka marks it not retryable, the AI "
        "SDK retries every 429"),
}
"""The deliberate differences, by the name ``docs/opencode.md`` gives each."""

MODEL_CAPS: dict[str, Any] = {
    "attachment": True,
    "modalities": {"input": ["text", "image", "pdf"], "output": ["text"]},
    "limit": {"context": 200000, "output": 32000},
}
"""What both providers' models can do (``nonoka opencode init --attachments ...`` writes
the same for nonoka's)."""


# -- the project's files ------------------------------------------------------------------


def _png() -> bytes:
    """A 2x1 PNG: one red pixel, one green."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"\x00\xff\x00\x00\x00\xff\x00"
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
       b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
       b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 72 72]>>endobj\n"
       b"trailer<</Root 1 0 R>>\n%%EOF\n")


# -- the model behind both paths ----------------------------------------------------------

CASE = re.compile(r"CASE-([a-z]+)")
SIGNATURE = base64.b64encode(b"signed by gemini").decode()


def _texts(body: dict[str, Any]) -> Iterator[str]:
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (str(p.get("text", "")) for p in content if isinstance(p, dict))


def case_of_text(said: str) -> str:
    found = CASE.search(said)
    return found.group(1) if found else "?"


def case_of(body: dict[str, Any]) -> str:
    for said in _texts(body):
        found = CASE.search(said)
        if found:
            return found.group(1)
    return "?"


def _system(body: dict[str, Any]) -> str:
    return " ".join(str(m.get("content")) for m in body.get("messages") or ()
                    if m.get("role") == "system")


def _has_results(body: dict[str, Any]) -> bool:
    return any(m.get("role") == "tool" for m in body.get("messages") or ())


class Script:
    """The scripted model, by the case a request belongs to (one per server: the counts of
    each path are its own)."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.chats: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Step:
        case = case_of(body)
        if "context summarization agent" in _system(body):
            return text(f"SUMMARY of CASE-{case}: the user said hello.")
        if not body.get("tools"):
            return text(f"title {case}")
        with self.lock:
            seen = self.chats[case] = self.chats.get(case, 0) + 1
        read = {"filePath": str(self.project / "notes.txt")}
        match case:
            case "toolimage" if not _has_results(body):
                return call("read", {"filePath": str(self.project / "shot.png")},
                            id="call_toolimage")
            case "deepseek" if not _has_results(body):
                return Reply.of(call("read", read, id="call_deepseek"),
                                reasoning="I will read the notes first.", reasoning_tokens=4)
            case "deepseek":
                return Reply(text="DEEPSEEK-DONE", reasoning="The notes hold two lines.",
                             reasoning_tokens=5)
            case "gemini" if not _has_results(body):
                return Reply.of(call("read", read, id="call_gemini"),
                                thought_signatures={"call_gemini": SIGNATURE})
            case "cache":
                return Reply(text="CACHE-DONE", input_tokens=1200, cached_tokens=1000,
                             output_tokens=9, reasoning_tokens=3)
            case "length":
                return Reply(text="LENGTH-CUT", finish_reason="length", output_tokens=9)
            case "overflow" if seen == 1:
                return context_length_exceeded()
            case "quota" if seen == 1:
                return insufficient_quota()
        return text(f"{case.upper()}-DONE")


# -- OpenCode with both providers ---------------------------------------------------------


@dataclass
class Run:
    """One ``opencode run`` and what its endpoint received."""

    done: subprocess.CompletedProcess[str]
    requests: list[dict[str, Any]]
    rejections: list[int]
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        ids = {e["sessionID"] for e in self.events if e.get("sessionID")}
        assert len(ids) == 1, (ids, self.done.stdout[-2000:])
        return str(ids.pop())

    def answer(self) -> str:
        return "".join(str((e.get("part") or {}).get("text", "")) for e in self.events
                       if e.get("type") == "text")


RUN_PERMISSION = [{"permission": name, "action": "deny", "pattern": "*"}
                  for name in ("question", "plan_enter", "plan_exit")]
"""The rules ``opencode run`` creates its session with (OpenCode 1.18.33): no tool that
waits for a person."""


def _attached(path: Path) -> dict[str, Any]:
    """``path`` as ``opencode run --attach --file`` sends it: its bytes in a data URL,
    ``text/plain`` when they are UTF-8 (a PDF made of text too), else its type by name."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
        mime = "text/plain"
    except UnicodeDecodeError:
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return {"type": "file", "url": f"data:{mime};base64,{base64.b64encode(data).decode()}",
            "filename": path.name, "mime": mime}


class World:
    """A git project, ``opencode.json`` with both providers, and ``opencode serve`` in it."""

    def __init__(self, root: Path, binary: Path) -> None:
        self.path = root / "project"
        self.home = root / "home"
        self.path.mkdir()
        self.home.mkdir()
        self.binary = binary
        (self.path / "shot.png").write_bytes(_png())
        (self.path / "notes.txt").write_text("line one\nline two\n", encoding="utf-8")
        (self.path / "doc.pdf").write_bytes(PDF)
        self.servers = {
            side: ScriptedOpenAIServer(Script(self.path),
                                       strict=("deepseek_thinking", "gemini_signatures"))
            for side in ("direct", "nonoka")}
        for server in self.servers.values():
            server.start()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENCODE", "OPENAI_", "NONOKA_", "XDG_", "DEEPSEEK_"))}
        env.update({
            "PWD": str(self.path), "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1", "NO_COLOR": "1",
            # nonoka's bridges: this checkout's code, the "nonoka" server behind them
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
            "OPENAI_BASE_URL": self.servers["nonoka"].base_url,
            "OPENAI_API_KEY": "sk-side-by-side", "DEEPSEEK_API_KEY": "sk-side-by-side",
        })
        self.env = env
        self.serve: subprocess.Popen[bytes] | None = None
        self.base = ""

    # set-up --------------------------------------------------------------------------

    def configure(self) -> None:
        assert subprocess.run(["git", "init", "-q", "."], cwd=self.path).returncode == 0
        init = subprocess.run(
            [sys.executable, "-m", "nonoka", "opencode", "init", "--model", "openai:m",
             "--attachments", "--context", "200000", "--output", "32000"],
            cwd=self.path, env=self.env, capture_output=True, text=True, timeout=120)
        assert init.returncode == 0, init.stderr
        path = self.path / "opencode.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        nonoka = config["provider"]["nonoka"]
        default = nonoka["models"]["default"]
        assert {k: default[k] for k in MODEL_CAPS} == MODEL_CAPS, default
        # The same models on both sides: OpenCode keys its per-model rules on the model id
        # (DeepSeek's reasoning, Gemini's sampling), so nonoka's ids name the same models.
        options = {"reasoningEffort": "low", "custom_flag": "on"}
        direct_models = {
            "m": {"name": "m", **MODEL_CAPS},
            "opts": {"name": "opts", **MODEL_CAPS, "temperature": True, "options": options},
            "deepseek-reasoner": {"name": "deepseek-reasoner", **MODEL_CAPS, "reasoning": True},
            "gemini-3-pro-preview": {"name": "gemini-3-pro-preview", **MODEL_CAPS},
        }
        nonoka["models"].update({
            # nonoka sends an option it does not know only when the user names it
            "openai:opts": {"name": "opts", **MODEL_CAPS, "temperature": True,
                            "options": {**options, "passthrough": ["custom_flag"]}},
            "deepseek:deepseek-reasoner": {"name": "deepseek-reasoner", **MODEL_CAPS,
                                           "reasoning": True},
            "openai:gemini-3-pro-preview": {"name": "gemini-3-pro-preview", **MODEL_CAPS},
        })
        config["provider"]["scripted"] = {
            "npm": "@ai-sdk/openai-compatible", "name": "scripted",
            "options": {"baseURL": self.servers["direct"].base_url, "apiKey": "sk-side-by-side"},
            "models": direct_models,
        }
        # Call options on every step: the agent's sampling settings.
        config["agent"] = {"build": {"temperature": 0.25, "top_p": 0.75}}
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")

    def start(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        self.base = f"http://127.0.0.1:{port}"
        log = (self.path.parent / "serve.log").open("wb")
        self.serve = subprocess.Popen(
            [str(self.binary), "serve", "--port", str(port), "--hostname", "127.0.0.1"],
            cwd=self.path, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 120
        while True:
            try:
                self.get("/session", timeout=5)
                return
            except OSError:
                if time.monotonic() > deadline or self.serve.poll() is not None:
                    raise AssertionError("opencode serve did not start:\n" + self.log()) from None
                time.sleep(0.5)

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

    def log(self) -> str:
        serve = (self.path.parent / "serve.log").read_text(encoding="utf-8", errors="replace")
        logs = sorted((self.home / ".local" / "share" / "opencode" / "log").glob("*.log"))
        tail = logs[-1].read_text(encoding="utf-8", errors="replace")[-6000:] if logs else ""
        return f"--- serve\n{serve[-3000:]}\n--- opencode log (tail)\n{tail}"

    # runs ----------------------------------------------------------------------------

    def get(self, path: str, timeout: float = 30) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=timeout) as response:
            return json.loads(response.read().decode() or "null")

    def run(self, side: str, model: str, message: str, *files: str,
            session: str | None = None) -> Run:
        """What ``opencode run --attach <serve> --format json --model <provider/model>
        --title <title> [--session <id>] <message> [--file <file>...]`` does, as the
        server's API: a session with the title and the permissions ``run`` gives it (or
        the one named), the files as ``run`` attaches them, the message, then the parts of
        the assistant messages it added, as ``run`` prints them. (An ``opencode run``
        process would load all of OpenCode once more for each side of each case, to make
        the same calls.)"""
        provider = "scripted" if side == "direct" else "nonoka"
        server = self.servers[side]
        before = len(server.requests)
        rejected = len(server.rejections)
        again = session is not None
        if session is None:
            session = self.post("/session", {"title": f"{side} {message[:20]}",
                                              "permission": RUN_PERMISSION})["id"]
        earlier = {m["info"]["id"] for m in self.get(f"/session/{session}/message")}
        parts = [*(_attached(self.path / f) for f in files), {"type": "text", "text": message}]
        events: list[dict[str, Any]] = []
        try:
            self.post(f"/session/{session}/message", {
                "model": {"providerID": provider, "modelID": model}, "parts": parts},
                timeout=RUN_TIMEOUT)
        except urllib.error.HTTPError as refused:
            events.append({"type": "error", "sessionID": session,
                           "error": json.loads(refused.read().decode() or "null")})
        for sent in self.get(f"/session/{session}/message"):
            if sent["info"]["role"] != "assistant" or sent["info"]["id"] in earlier:
                continue
            events.extend({"type": part["type"].replace("-", "_"), "sessionID": session,
                           "part": part} for part in sent["parts"])
            if sent["info"].get("error"):
                events.append({"type": "error", "sessionID": session,
                               "error": sent["info"]["error"]})
        failed = any(e["type"] == "error" for e in events)
        done = subprocess.CompletedProcess(["POST", f"/session/{session}/message"],
                                           1 if failed else 0,
                                           "\n".join(json.dumps(e) for e in events), "")
        run = Run(done, copy.deepcopy(server.requests[before:]),
                  [i - before for i in server.rejections[rejected:]], events)
        self.keep(run, f"{case_of_text(message)}{'-again' if again else ''}-{side}")
        return run

    def keep(self, run: Run, name: str) -> None:
        """What the endpoint received and OpenCode printed, for a person reading a failure
        (``<basetemp>/side-by-side0/requests/<case>-<side>.json``)."""
        dump = self.path.parent / "requests" / f"{name}.json"
        dump.parent.mkdir(exist_ok=True)
        dump.write_text(json.dumps({"requests": run.requests, "rejections": run.rejections,
                                    "stdout": run.done.stdout[-20000:],
                                    "stderr": run.done.stderr[-5000:]}, indent=1),
                        encoding="utf-8")

    def both(self, models: tuple[str, str], message: str, *files: str,
             sessions: tuple[str, str] | None = None) -> tuple[Run, Run]:
        """The same run on both paths at once (each path's server is its own); with
        ``sessions``, the next turn of those OpenCode sessions."""
        direct_session, nonoka_session = sessions or (None, None)
        with ThreadPoolExecutor(2) as pool:
            direct = pool.submit(self.run, "direct", models[0], message, *files,
                                 session=direct_session)
            nonoka = pool.submit(self.run, "nonoka", models[1], message, *files,
                                 session=nonoka_session)
            return direct.result(), nonoka.result()

    def say(self, side: str, model: str, message: str, *files: dict[str, Any]) -> Run:
        """A message through the server's API (``POST /session/{id}/message``), with
        ``files`` as file parts, in a new OpenCode session."""
        provider = "scripted" if side == "direct" else "nonoka"
        server = self.servers[side]
        before = len(server.requests)
        rejected = len(server.rejections)
        session = self.post("/session", {"title": f"{side} {message[:20]}"})["id"]
        answer = self.post(f"/session/{session}/message", {
            "model": {"providerID": provider, "modelID": model},
            "parts": [{"type": "text", "text": message}, *files]}, timeout=RUN_TIMEOUT)
        events = [{"type": p["type"], "sessionID": session, "part": p}
                  for p in answer.get("parts") or ()]
        done = subprocess.CompletedProcess(["POST", "message"], 0, json.dumps(answer), "")
        run = Run(done, copy.deepcopy(server.requests[before:]),
                  [i - before for i in server.rejections[rejected:]], events)
        self.keep(run, f"{case_of_text(message)}-{side}")
        return run

    def both_api(self, models: tuple[str, str], message: str,
                 *files: dict[str, Any]) -> tuple[Run, Run]:
        with ThreadPoolExecutor(2) as pool:
            direct = pool.submit(self.say, "direct", models[0], message, *files)
            nonoka = pool.submit(self.say, "nonoka", models[1], message, *files)
            return direct.result(), nonoka.result()

    def post(self, path: str, body: dict[str, Any], timeout: float = 30) -> Any:
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                         method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode() or "null")

    def lose_nonoka_store(self) -> None:
        """Take nonoka's session database away: the next turn has only OpenCode's copy of
        the conversation (the bridge seeds a new session with it), so what reaches the model
        is what the provider carried both ways."""
        for path in (self.path / ".nonoka").glob("sessions.db*"):
            path.rename(path.with_name(f"lost-{time.monotonic_ns()}-{path.name}"))

    def tokens(self, session_id: str) -> list[dict[str, Any]]:
        """What OpenCode stored of each assistant message's usage (its session stats)."""
        messages = self.get(f"/session/{session_id}/message")
        return [{"tokens": m["info"].get("tokens"), "cost": m["info"].get("cost")}
                for m in messages if m["info"]["role"] == "assistant"]


def _opencode(request: pytest.FixtureRequest) -> Path:
    """``opencode`` at OPENCODE_VERSION: the one on PATH (``.ci/run`` installs it globally),
    else the e2e tests' npm-installed copy."""
    found = shutil.which("opencode")
    if found is not None and works(Path(found)):
        return Path(found)
    binary: Path = request.getfixturevalue("opencode_bin")
    return binary


@pytest.fixture(scope="module")
def world(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    setup = World(tmp_path_factory.mktemp("side-by-side"), _opencode(request))
    try:
        setup.configure()
        setup.start()
        yield setup
    finally:
        setup.close()


# -- the comparison ----------------------------------------------------------------------


Normaliser = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
MODEL_LINE = re.compile(r"You are powered by the model named [^\n]*\. The exact model ID is \S+")


def _messages(requests: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for body in requests:
        yield from body.get("messages") or ()


def model_identity_line(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DIFFERENCES["model-identity-line"]: the system prompt's line naming the model."""
    out = copy.deepcopy(requests)
    for message in _messages(out):
        if message.get("role") == "system" and isinstance(message.get("content"), str):
            message["content"] = MODEL_LINE.sub("<the model OpenCode runs>", message["content"])
    return out


def tool_call_arguments_as_written(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DIFFERENCES["tool-call-arguments-as-written"]: arguments compared as JSON values."""
    out = copy.deepcopy(requests)
    for message in _messages(out):
        for sent in message.get("tool_calls") or ():
            function = sent["function"]
            function["arguments"] = json.dumps(json.loads(function["arguments"]),
                                               sort_keys=True)
    return out


def tool_call_content_null(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DIFFERENCES["tool-call-content-null"]: the direct path's ``""`` as nonoka's ``null``."""
    out = copy.deepcopy(requests)
    for message in _messages(out):
        if (message.get("role") == "assistant" and message.get("tool_calls")
                and message.get("content") == ""):
            message["content"] = None
    return out


ALWAYS: tuple[Normaliser, ...] = (model_identity_line, tool_call_arguments_as_written,
                                  tool_call_content_null)
"""The differences every case may show (applied to both paths' requests)."""


def same(direct: Run, nonoka: Run, *differences: Normaliser) -> None:
    """What both endpoints received is the same, but for the differences ``ALWAYS`` lists
    and the case's own ``differences`` (applied to the direct path's requests)."""
    expected, received = direct.requests, nonoka.requests
    for difference in ALWAYS:
        expected, received = difference(expected), difference(received)
    for difference in differences:
        expected = difference(expected)
    assert len(received) == len(expected), (
        f"direct: {len(expected)} requests, through nonoka: {len(received)}\n"
        + _show(expected) + "\n---\n" + _show(received))
    for number, (want, got) in enumerate(zip(expected, received, strict=True)):
        assert got == want, f"request {number}:\n{_diff(want, got)}"


def _show(requests: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(_brief(r))[:1500] for r in requests)


def _brief(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    if "tools" in out:
        out["tools"] = [t.get("function", {}).get("name") for t in out["tools"]]
    out["messages"] = [{**m, "content": m["content"][:80]} if m.get("role") == "system"
                       and isinstance(m.get("content"), str) else m
                       for m in out.get("messages") or ()]
    return out


def _diff(want: Any, got: Any, where: str = "") -> str:
    if isinstance(want, dict) and isinstance(got, dict):
        lines = [_diff(want.get(k, "<absent>"), got.get(k, "<absent>"), f"{where}.{k}")
                 for k in sorted(want.keys() | got.keys()) if want.get(k, "<absent>")
                 != got.get(k, "<absent>")]
        return "\n".join(lines)
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return "\n".join(_diff(w, g, f"{where}[{i}]")
                         for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g)
    pad = " " * len(where)
    return f"{where}: direct {json.dumps(want)[:600]}\n{pad}  nonoka {json.dumps(got)[:600]}"


def _ok(run: Run) -> None:
    assert run.done.returncode == 0, (run.done.stdout[-3000:], run.done.stderr[-3000:])


# -- the cases -----------------------------------------------------------------------------


def test_the_listed_differences_are_documented() -> None:
    section = DOCS.read_text(encoding="utf-8").split("## Side by side with OpenCode's own "
                                                     "provider", 1)
    assert len(section) == 2, "docs/opencode.md lacks the side-by-side section"
    named = set(re.findall(r"`([a-z0-9-]+)`", section[1].split("\n## ", 1)[0]))
    assert set(DIFFERENCES) <= named, sorted(set(DIFFERENCES) - named)


def test_an_image_attached_to_the_message(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-image: what is in this picture?",
                                "shot.png")
    _ok(direct)
    _ok(nonoka)
    assert "IMAGE-DONE" in nonoka.answer()
    last = nonoka.requests[-1]["messages"][-1]["content"]
    assert any(p.get("type") == "image_url" for p in last), last
    same(direct, nonoka)


def test_an_image_a_tool_returns(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-toolimage: read shot.png")
    _ok(direct)
    _ok(nonoka)
    assert "TOOLIMAGE-DONE" in nonoka.answer()
    after = nonoka.requests[-1]["messages"][-1]
    assert after["role"] == "user" and any(p.get("type") == "image_url"
                                           for p in after["content"]), after
    same(direct, nonoka)


def test_text_files(world: World) -> None:
    # OpenCode reads an attached file that is not an image itself (its Read tool's text,
    # as text parts of the message): a PDF too, from the command line.
    direct, nonoka = world.both(("m", "default"), "CASE-files: compare these",
                                "notes.txt", "doc.pdf")
    _ok(direct)
    _ok(nonoka)
    parts = nonoka.requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["text"] * 5, parts
    assert "line one\nline two\n" in [p["text"] for p in parts]
    same(direct, nonoka)


def test_a_pdf_attached_through_the_server_api(world: World) -> None:
    # A PDF as a file part (how the TUI and the server's clients attach one).
    direct, nonoka = world.both_api(("m", "default"), "CASE-pdf: what is this document?",
                                    {"type": "file", "mime": "application/pdf",
                                     "filename": "doc.pdf", "url": "data:application/pdf;base64,"
                                     + base64.b64encode(PDF).decode()})
    parts = nonoka.requests[-1]["messages"][-1]["content"]
    assert {"type": "file", "file": {"filename": "doc.pdf", "file_data": (
        "data:application/pdf;base64," + base64.b64encode(PDF).decode())}} in parts, parts
    same(direct, nonoka)


def test_call_options(world: World) -> None:
    direct, nonoka = world.both(("opts", "openai:opts"), "CASE-options: hello")
    _ok(direct)
    _ok(nonoka)
    body = nonoka.requests[-1]
    assert (body.get("temperature"), body.get("top_p"), body.get("reasoning_effort"),
            body.get("custom_flag"), body.get("max_tokens")) == (0.25, 0.75, "low", "on", 32000)
    same(direct, nonoka)


def test_reasoning_and_a_tool_loop_against_deepseek_thinking(world: World) -> None:
    models = ("deepseek-reasoner", "deepseek:deepseek-reasoner")
    direct, nonoka = world.both(models, "CASE-deepseek: read notes.txt")
    _ok(direct)
    _ok(nonoka)
    assert "DEEPSEEK-DONE" in nonoka.answer()
    assert nonoka.rejections == []
    sent = nonoka.requests[-1]["messages"]
    assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == [
        "I will read the notes first."]
    same(direct, nonoka)

    # The next turn from OpenCode's copy of the conversation alone: the reasoning goes back
    # because the provider stored it with OpenCode and read it back from the history.
    world.lose_nonoka_store()
    direct, nonoka = world.both(models, "CASE-deepseek: and now?",
                                sessions=(direct.session_id, nonoka.session_id))
    _ok(direct)
    _ok(nonoka)
    assert nonoka.rejections == []
    sent = nonoka.requests[-1]["messages"]
    assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == [
        "I will read the notes first.", "The notes hold two lines."]
    same(direct, nonoka)


def test_a_gemini_signed_tool_call(world: World) -> None:
    models = ("gemini-3-pro-preview", "openai:gemini-3-pro-preview")
    direct, nonoka = world.both(models, "CASE-gemini: read notes.txt")
    _ok(nonoka)
    assert "GEMINI-DONE" in nonoka.answer()
    assert nonoka.rejections == []
    calls = [c for m in nonoka.requests[-1]["messages"] for c in m.get("tool_calls") or ()]
    assert calls[0]["extra_content"] == {"google": {"thought_signature": SIGNATURE}}

    def gemini_signature_carried(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """DIFFERENCES["gemini-signature-carried"]: the direct path sent the call back
        without its signature and Gemini refused it; nonoka sent it with it."""
        assert direct.rejections == [len(requests) - 1], direct.rejections
        out = copy.deepcopy(requests)
        for message in out[-1]["messages"]:
            for sent in message.get("tool_calls") or ():
                assert "extra_content" not in sent
                sent["extra_content"] = {"google": {"thought_signature": SIGNATURE}}
        return out

    same(direct, nonoka, gemini_signature_carried)

    # The next turn from OpenCode's copy alone (nonoka's path only: the direct one ended at
    # the refusal): the signature went to OpenCode with the call and came back with it.
    world.lose_nonoka_store()
    again = world.run("nonoka", models[1], "CASE-gemini: and now?", session=nonoka.session_id)
    _ok(again)
    assert again.rejections == []
    calls = [c for m in again.requests[-1]["messages"] for c in m.get("tool_calls") or ()]
    assert [c.get("extra_content") for c in calls] == [
        {"google": {"thought_signature": SIGNATURE}}]
    assert tool_call_arguments_as_written(again.requests)[-1]["messages"][:-1] == (
        tool_call_arguments_as_written(nonoka.requests)[-1]["messages"]
        + [{"role": "assistant", "content": "GEMINI-DONE"}])


def test_cached_usage_reaches_the_session_stats(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-cache: hello")
    _ok(direct)
    _ok(nonoka)
    same(direct, nonoka)
    stats = world.tokens(direct.session_id), world.tokens(nonoka.session_id)
    assert stats[0] == stats[1], stats
    tokens = stats[1][-1]["tokens"]
    assert tokens["cache"]["read"] == 1000 and tokens["reasoning"] == 3, tokens


def test_an_answer_the_model_cut_finishes_as_it_does_directly(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-length: hello")
    _ok(direct)
    _ok(nonoka)
    same(direct, nonoka)
    finishes = [[m["info"].get("finish") for m in world.get(f"/session/{run.session_id}/message")
                 if m["info"]["role"] == "assistant"] for run in (direct, nonoka)]
    assert finishes[0] == finishes[1] and finishes[1][-1] == "length", finishes


def test_a_context_overflow_compacts_and_goes_on(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-overflow: hello")
    assert "OVERFLOW-DONE" in direct.done.stdout, direct.done.stdout[-3000:]
    assert "OVERFLOW-DONE" in nonoka.done.stdout, nonoka.done.stdout[-3000:]
    assert nonoka.done.returncode == direct.done.returncode
    summaries = [r for r in nonoka.requests if "context summarization agent" in _system(r)]
    assert len(summaries) == 1
    same(direct, nonoka)


def test_a_spent_quota_is_not_retried(world: World) -> None:
    direct, nonoka = world.both(("m", "default"), "CASE-quota: hello")
    errors = [e["error"] for e in nonoka.events if e.get("type") == "error"]
    assert [(e["name"], e["data"]["statusCode"], e["data"]["isRetryable"]) for e in errors] == [
        ("APIError", 429, False)], nonoka.done.stdout[-3000:]
    assert "insufficient_quota" in errors[0]["data"]["responseBody"]

    def quota_not_retried(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """DIFFERENCES["quota-not-retried"]: the direct path asked again (and got the
        scripted second answer); nonoka's error said not to."""
        assert len(requests) == 2 and requests[0] == requests[1], _show(requests)
        assert "QUOTA-DONE" in direct.done.stdout
        return requests[:1]

    same(direct, nonoka, quota_not_retried)
