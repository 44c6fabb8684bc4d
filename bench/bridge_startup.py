"""How fast a per-turn ``nonoka bridge`` process gets going, beside a bare Python start.

Measures, in one run and side by side:

* ``python -c pass``: spawn to exit (the floor any Python process pays);
* ``nonoka bridge``: spawn to the ``protocol_ack`` line on stdout;
* ``nonoka bridge``: spawn to the first byte of the model request arriving at a local
  OpenAI-compatible endpoint (a raw socket listener in this process);
* the same with early dispatch turned off (``NONOKA_EARLY_DISPATCH=0``): the request
  the runtime itself sends once pydantic, the runtime and the store are loaded.

The bridge continues a stored session each time (load, decide, call the model), the
realistic per-turn path; each variant has its own project and session. Goals: ack within
8x and the first model byte within 12x of the bare start. Run:
``.venv/bin/python bench/bridge_startup.py [--runs N]``.
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
from typing import Any

BRIDGE = [sys.executable, "-m", "nonoka", "bridge"]
SSE = (
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    '[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    '[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,'
    '"completion_tokens":1,"total_tokens":6}}\n\ndata: [DONE]\n\n'
)


class FirstByteServer:
    """Accepts HTTP requests, notes when each request's first byte arrives, answers SSE."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.first_bytes: list[float] = []
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
            self.first_bytes.append(time.perf_counter())
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            while len(body) < length:
                body += conn.recv(65536)
            payload = SSE.encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Content-Length: " + str(len(payload)).encode() +
                         b"\r\nConnection: close\r\n\r\n" + payload)

    def close(self) -> None:
        self.sock.close()


def bare_start() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def bridge_turn(project: Path, env: dict[str, str], request: bytes,
                server: FirstByteServer) -> tuple[float, float]:
    seen = len(server.first_bytes)
    start = time.perf_counter()
    proc = subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=project, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(request)
    proc.stdin.close()
    ack_line = proc.stdout.readline()
    ack = time.perf_counter() - start
    assert json.loads(ack_line)["type"] == "protocol_ack", ack_line
    rest = proc.stdout.read()
    err = proc.stderr.read() if proc.stderr else b""
    assert proc.wait(timeout=30) == 0, err.decode()
    proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()
    assert b'"finish_reason":"stop"' in rest, rest.decode() + err.decode()
    assert len(server.first_bytes) == seen + 1
    return ack, server.first_bytes[-1] - start


class Conversation:
    """One project and session, continued by a bridge turn at a time."""

    def __init__(self, project: Path, env: dict[str, str]) -> None:
        self.project, self.env = project, env
        self.history: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
        first = {"type": "chat", "protocol": {"version": "1"}, "messages": self.history,
                 "new_session": True, "cwd": str(project)}
        out = subprocess.run(BRIDGE, input=json.dumps(first).encode() + b"\n", cwd=project,
                             env=env, capture_output=True, check=True).stdout
        events = [json.loads(line) for line in out.splitlines()]
        self.session_id = next(e["session_id"] for e in events if e["type"] == "session_init")

    def turn(self, n: int, server: FirstByteServer) -> tuple[float, float]:
        self.history = [*self.history, {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": f"turn {n}"}]
        request = {"type": "chat", "protocol": {"version": "1"}, "messages": self.history,
                   "session_id": self.session_id, "cwd": str(self.project)}
        return bridge_turn(self.project, self.env, json.dumps(request).encode() + b"\n",
                           server)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    server = FirstByteServer()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NONOKA_MODEL": "openai:bench", "OPENAI_API_KEY": "sk-bench",
               "OPENAI_BASE_URL": server.base_url}
        env.pop("NONOKA_DATABASE_URL", None)
        conversations = []
        for name, early in (("early", "1"), ("late", "0")):
            (Path(tmp) / name).mkdir()
            conversations.append(Conversation(Path(tmp) / name,
                                              {**env, "NONOKA_EARLY_DISPATCH": early}))
        bare: list[float] = []
        acks: list[float] = []
        firsts: list[float] = []
        lates: list[float] = []
        for turn in range(args.runs):
            bare.append(bare_start())
            ack, first_byte = conversations[0].turn(turn, server)
            acks.append(ack)
            firsts.append(first_byte)
            lates.append(conversations[1].turn(turn, server)[1])
    server.close()
    base = statistics.median(bare)
    rows: list[tuple[str, float, float | None]] = [
        ("python -c pass (spawn to exit)", base, None),
        ("bridge: spawn to protocol_ack", statistics.median(acks), 8.0),
        ("bridge: spawn to first model-request byte", statistics.median(firsts), 12.0),
        ("  the same, early dispatch off", statistics.median(lates), None)]
    print(f"runs: {args.runs} (medians)")
    print(f"{'measure':<45} {'ms':>8} {'x bare':>8} {'goal':>6}")
    ok = True
    for name, value, goal in rows:
        ratio = value / base
        verdict = "" if goal is None else ("PASS" if ratio <= goal else "FAIL")
        ok = ok and verdict != "FAIL"
        goal_text = "" if goal is None else f"<={goal:g}x"
        print(f"{name:<45} {value * 1000:8.1f} {ratio:8.2f} {goal_text:>6} {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
