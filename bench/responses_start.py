"""``nonoka run --model openai-responses:…`` beside ``--model openai:…``: spawn to the first
byte of the model request, and what encoding a long conversation costs each adapter.

Part 1, paired: the two commands run in turn (A B A B …) in one project each, and each
run's time from spawn to the first byte of its model request arriving at a local
endpoint (a raw socket listener in this process, answering each API's minimal stream)
is taken; the ratio A/B is taken pair by pair, so a machine whose speed drifts during
the run does not skew it. Part 2, in this process: the request body each adapter builds
for a stored conversation of 10, 100 and 1,000 entries (``EntryMessages``, every fourth
assistant entry calling a tool; the Responses one with a stored reasoning item), medians
of repeated builds. Run: ``.venv/bin/python bench/responses_start.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nonoka.state.entries import MemoryEntry

RUN = [sys.executable, "-m", "nonoka", "run"]
CHAT_SSE = (
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    '[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    '[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,'
    '"completion_tokens":1,"total_tokens":6}}\n\ndata: [DONE]\n\n'
)
RESPONSES_SSE = (
    'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
    '"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress",'
    '"content":[],"role":"assistant"}}\n\n'
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    '"item_id":"msg_1","output_index":0,"content_index":0,"delta":"ok"}\n\n'
    'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r",'
    '"model":"m","status":"completed","output":[{"id":"msg_1","type":"message",'
    '"status":"completed","role":"assistant","content":[{"type":"output_text","text":"ok",'
    '"annotations":[]}]}],"usage":{"input_tokens":5,"output_tokens":1,"total_tokens":6}}}'
    '\n\n'
)


class FirstByteServer:
    """Accepts HTTP requests, notes when each one's first byte arrives, answers the
    minimal stream of the API its path names."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.first_bytes: list[tuple[float, str]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = conn.recv(65536)
            arrived = time.perf_counter()
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            self.first_bytes.append((arrived, path))
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            while len(body) < length:
                body += conn.recv(65536)
            payload = (RESPONSES_SSE if path.endswith("/responses") else CHAT_SSE).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Content-Length: " + str(len(payload)).encode() +
                         b"\r\nConnection: close\r\n\r\n" + payload)

    def close(self) -> None:
        self.sock.close()


def first_byte(project: Path, env: dict[str, str], model: str,
               server: FirstByteServer) -> tuple[float, float]:
    """Spawn ``nonoka run``: seconds to the first byte of its model request, and to exit."""
    seen = len(server.first_bytes)
    start = time.perf_counter()
    done = subprocess.run([*RUN, "--model", model, "hello"], cwd=project, env=env,
                          capture_output=True, timeout=60, check=False)
    ended = time.perf_counter() - start
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"ok\n", done.stdout
    assert len(server.first_bytes) == seen + 1
    arrived, path = server.first_bytes[-1]
    assert path.endswith("/responses") == model.startswith("openai-responses:"), path
    return arrived - start, ended


def spawn_pairs(runs: int) -> None:
    server = FirstByteServer()
    models = ("openai-responses:gpt-5", "openai:gpt-5")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": server.base_url}
        for name in ("NONOKA_DATABASE_URL", "NONOKA_MODEL"):
            env.pop(name, None)
        projects = []
        for n, model in enumerate(models):
            project = Path(tmp) / f"p{n}"
            project.mkdir()
            first_byte(project, env, model, server)  # warm-up: the database is created
            projects.append(project)
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
        for _ in range(runs):
            for model, project in zip(models, projects, strict=True):
                times[model].append(first_byte(project, env, model, server))
    server.close()
    a, b = (times[m] for m in models)
    print(f"spawn to first model-request byte, `nonoka run`, {runs} pairs (ms: min / median "
          "/ max)")
    for model in models:
        firsts = sorted(t[0] * 1000 for t in times[model])
        exits = sorted(t[1] * 1000 for t in times[model])
        print(f"  {model:<24} first byte {firsts[0]:6.1f} / {statistics.median(firsts):6.1f}"
              f" / {firsts[-1]:6.1f}   exit {statistics.median(exits):6.1f}")
    ratios = sorted(x[0] / y[0] for x, y in zip(a, b, strict=True))
    print(f"  A/B (responses / chat), pair by pair: {ratios[0]:.3f} / "
          f"{statistics.median(ratios):.3f} / {ratios[-1]:.3f}")


def encoding(reps: int) -> None:
    from nonoka.llm.openai import OpenAIChatModel
    from nonoka.llm.responses import OpenAIResponsesModel
    from nonoka.state.entries import EntryMessages, MemoryEntry

    chat = OpenAIChatModel("gpt-5", base_url="http://127.0.0.1:9/v1", api_key="sk-bench")
    responses = OpenAIResponsesModel("gpt-5", base_url="http://127.0.0.1:9/v1",
                                     api_key="sk-bench")
    print(f"request body for a stored conversation, in process ({reps} builds, median)")
    print(f"  {'entries':>8} {'chat':>10} {'responses':>10} {'x':>6} {'bytes (responses)':>18}")
    builders = (chat.request_body, responses.body)
    for size in (10, 100, 1000):
        entries = conversation(size, MemoryEntry)
        row = []
        for build in builders:
            samples = []
            for _ in range(reps):
                start = time.perf_counter()
                body = build(EntryMessages(entries))
                samples.append(time.perf_counter() - start)
            row.append((statistics.median(samples), len(body)))
        (c, _), (r, size_r) = row
        print(f"  {size:>8} {c * 1e3:8.3f}ms {r * 1e3:8.3f}ms {r / c:6.2f} {size_r:>18,}")


def conversation(size: int, entry: type[MemoryEntry]) -> list[MemoryEntry]:
    text = ("Ünïcode and \"quotes\" in a realistic answer of a few hundred characters. " * 4)
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [
        {"type": "summary_text", "text": "Thinking about it."}],
        "encrypted_content": "gAAAAAB" + "x" * 600}
    entries = [entry.make("system", "Be brief."), entry.make("user", "Start.")]
    while len(entries) < size:
        n = len(entries)
        if n % 8 == 0:
            call = {"id": f"c{n}", "name": "read_file", "arguments": json.dumps({"path": "a"}),
                    "provider_metadata": {"openai_responses": {"id": f"fc_{n}"}}}
            entries.append(entry.make("assistant", "", tool_calls=[call], reasoning=[
                {"text": "Thinking about it.", "provider_metadata": {
                    "openai_responses": reasoning}}]))
            entries.append(entry.make("tool", text, tool_call_id=f"c{n}"))
        else:
            entries.append(entry.make("assistant" if n % 2 else "user", text))
    return entries[:size]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    spawn_pairs(args.runs)
    encoding(args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
