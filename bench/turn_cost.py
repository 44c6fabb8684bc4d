"""What a per-turn ``nonoka bridge`` costs as the history grows, beside a stdlib floor.

The floor for a turn is: start the interpreter, read and decode the host's request line,
write the new entries, and send a model request whose body is about the size of the
history. ``FLOOR`` is that as a script on the standard library only (read the line,
``json.loads`` it, build the same request body, send it over a socket, read the answer);
everything nonoka adds should not grow with the history. Side by side in one run, at
10 / 1,000 / 5,000 / 10,000 messages (medians of ``--runs``):

* ``python -c pass`` and the floor script: spawn to the first model-request byte, spawn
  to exit;
* ``nonoka bridge`` continuing a stored session, early dispatch on and off: spawn to the
  first model-request byte, to the ``finish`` line, to exit; and the end of the turn: from
  the model's last byte to ``finish`` and to exit;
* a long-lived bridge serving ``--long-turns`` turns of one session: per-turn latency
  and resident memory early and late, beside the peak memory of a fresh bridge serving
  one turn of the same conversation at those two points (what holding the request and
  the session costs: the long-lived process may grow by that, not more);
* a request of 250,000 tiny messages (~9 MB): time and peak memory until its ``error``.

Prints a PASS/FAIL line per goal (exit status 1 on a FAIL). Run:
``.venv/bin/python bench/turn_cost.py [--runs N] [--long-turns N]`` (``--long-turns 5000``
is the goal's length: about 3 minutes more).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = (10, 1_000, 5_000, 10_000)
NOISE = 0.05
"""How much the median of a few runs of one process moves between runs on this machine:
early dispatch counts as "not slower" within it (the line prints the difference). Each
run's early and normal turns run back to back, in alternating order; the verdict takes
the median of their ratios, which the machine's drift between runs does not move."""
BRIDGE = [sys.executable, "-m", "nonoka", "bridge"]
MODEL = "bench"
SSE = (
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    '[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    '[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,'
    '"completion_tokens":1,"total_tokens":6}}\n\ndata: [DONE]\n\n'
)

FLOOR = r"""
import json, socket, sys
from urllib.parse import urlsplit
request = json.loads(sys.stdin.buffer.readline())
body = json.dumps({"model": request["model"], "messages": [
    {"role": m["role"], "content": m.get("content", "")} for m in request["messages"]],
    "stream": True, "stream_options": {"include_usage": True}}).encode()
url = urlsplit(sys.argv[1])
sock = socket.create_connection((url.hostname, url.port))
sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
             b"application/json\r\nContent-Length: " + str(len(body)).encode() +
             b"\r\n\r\n" + body)
answer = b""
while True:
    chunk = sock.recv(65536)
    if not chunk:
        break
    answer += chunk
sys.stdout.write('{"type":"finish"}\n')
"""


class ModelServer:
    """A raw socket endpoint: notes each request's first byte and when the answer's last
    byte went out, answers a short SSE stream."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.first_bytes: list[float] = []
        self.last_bytes: list[float] = []
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
            data = conn.recv(1 << 20)
            if not data:
                return
            self.first_bytes.append(time.perf_counter())
            while b"\r\n\r\n" not in data:
                data += conn.recv(1 << 20)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            while len(body) < length:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    return  # an early request closed unread
                body += chunk
            payload = SSE.encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Content-Length: " + str(len(payload)).encode() +
                         b"\r\nConnection: close\r\n\r\n" + payload)
            self.last_bytes.append(time.perf_counter())


class Turn:
    """The timings of one process: spawn to first model byte, to ``finish``, to exit,
    from the model's last byte to ``finish`` and to exit, and its peak memory."""

    def __init__(self, first: float, finish: float, exit: float, last: float,
                 maxrss_kib: int) -> None:
        self.first, self.finish, self.exit = first, finish, exit
        self.after_model_finish, self.after_model_exit = finish - last, exit - last
        self.maxrss_kib = maxrss_kib


def spawn(argv: list[str], line: bytes, cwd: Path, env: dict[str, str],
          server: ModelServer) -> Turn:
    seen_first, seen_last = len(server.first_bytes), len(server.last_bytes)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line)
    proc.stdin.close()
    finish = None
    for out in proc.stdout:
        if b'"type":"finish"' in out or b'"type": "finish"' in out:
            finish = time.perf_counter()
            assert b'"error"' not in out, out
    _, status, usage = os.wait4(proc.pid, 0)
    ended = time.perf_counter()
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    assert proc.returncode == 0 and finish is not None, "the turn failed"
    assert len(server.first_bytes) > seen_first and len(server.last_bytes) > seen_last
    return Turn(server.first_bytes[seen_first] - start, finish - start, ended - start,
                server.last_bytes[-1] - start, usage.ru_maxrss)


def history(size: int) -> list[dict[str, Any]]:
    """``size`` messages of a chat, ~60 bytes each: user and assistant alternating,
    ending with a user message (and opening with a system one when that is even)."""
    roles = ["user" if (size - 1 - i) % 2 == 0 else "assistant" for i in range(size)]
    if roles[0] == "assistant":
        roles[0] = "system"
    return [{"role": role, "content": f"message {i}: the quick brown fox jumps over the "
             "lazy dog"} for i, role in enumerate(roles)]


def chat(messages: list[dict[str, Any]], cwd: Path, session_id: str | None) -> bytes:
    request: dict[str, Any] = {"type": "chat", "protocol": {"version": "1"},
                               "messages": messages, "cwd": str(cwd), "model": f"openai:{MODEL}"}
    if session_id is None:
        request["new_session"] = True
    else:
        request["session_id"] = session_id
    return json.dumps(request).encode() + b"\n"


class Conversation:
    """A project holding one session of ``size`` messages, continued a turn at a time."""

    def __init__(self, root: Path, size: int, env: dict[str, str], server: ModelServer
                 ) -> None:
        self.cwd, self.env, self.server = root, env, server
        root.mkdir()
        self.messages = history(size)
        out = subprocess.run(BRIDGE, input=chat(self.messages, root, None), cwd=root, env=env,
                             capture_output=True, check=True).stdout
        events = [json.loads(line) for line in out.splitlines()]
        self.session_id = next(e["session_id"] for e in events if e["type"] == "session_init")
        self.n = 0

    def next_line(self) -> bytes:
        self.n += 1
        self.messages = [*self.messages, {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": f"turn {self.n}"}]
        return chat(self.messages, self.cwd, self.session_id)

    def turn(self) -> Turn:
        return spawn(BRIDGE, self.next_line(), self.cwd, self.env, self.server)


def median(turns: list[Turn], field: Callable[[Turn], float]) -> float:
    return statistics.median(field(t) for t in turns)


def long_lived(root: Path, env: dict[str, str], server: ModelServer, turns: int,
               early_at: int) -> tuple[list[float], list[int], tuple[int, int]]:
    """One bridge process serving ``turns`` turns of one session; per-turn latency (line
    written to ``finish`` read) and the process's resident memory after each turn. Right
    after turn ``early_at`` and after the last, a fresh bridge serves one turn of the same
    conversation: its peak memory (KiB) is what holding that request costs, the yardstick
    for the long-lived process's growth."""
    conversation = Conversation(root, 10, env, server)
    proc = subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=root, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    latencies: list[float] = []
    rss: list[int] = []
    for _ in range(turns):
        line = conversation.next_line()
        start = time.perf_counter()
        proc.stdin.write(line)
        proc.stdin.flush()
        for out in proc.stdout:
            if b'"type":"finish"' in out:
                break
        latencies.append(time.perf_counter() - start)
        with open(f"/proc/{proc.pid}/status") as status:
            rss.append(next(int(x.split()[1]) for x in status if x.startswith("VmRSS")))
        if len(latencies) == early_at:
            fresh_early = conversation.turn().maxrss_kib
    fresh_last = conversation.turn().maxrss_kib
    proc.stdin.close()
    proc.wait(timeout=60)
    return latencies, rss, (fresh_early, fresh_last)


def huge(root: Path, env: dict[str, str]) -> tuple[float, int, int, bytes]:
    """A 250,000-message request: seconds to the answer, peak KiB, line bytes, answer."""
    root.mkdir()
    line = chat([{"role": "user", "content": "x"}] * 250_000, root, None)
    start = time.perf_counter()
    proc = subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=root, env=env)
    stdin = proc.stdin
    assert stdin is not None and proc.stdout is not None

    def feed() -> None:
        with stdin:
            stdin.write(line)

    writer = threading.Thread(target=feed)
    writer.start()
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    writer.join()
    proc.returncode = 0
    proc.stdout.close()
    return took, usage.ru_maxrss, len(line), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--long-turns", type=int, default=5000)
    parser.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")),
                        default=SIZES)
    args = parser.parse_args()
    server = ModelServer()
    env = {**os.environ, "NONOKA_MODEL": f"openai:{MODEL}", "OPENAI_API_KEY": "sk-bench",
           "OPENAI_BASE_URL": server.base_url}
    env.pop("NONOKA_DATABASE_URL", None)
    rows: dict[int, dict[str, float]] = {}
    ok = True
    verdicts: list[tuple[str, bool]] = []
    with tempfile.TemporaryDirectory(prefix="nonoka-turn-cost-") as tmp:
        bare = []
        for size in args.sizes:
            early = Conversation(Path(tmp) / f"early-{size}", size, env, server)
            late = Conversation(Path(tmp) / f"late-{size}", size,
                                {**env, "NONOKA_EARLY_DISPATCH": "0"}, server)
            floor_runs: list[Turn] = []
            early_runs: list[Turn] = []
            late_runs: list[Turn] = []
            for _ in range(args.runs):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                bare.append(time.perf_counter() - start)
                floor_runs.append(spawn([sys.executable, "-c", FLOOR, server.base_url],
                                        early.next_line(), early.cwd, env, server))
                early.n -= 1
                early.messages = early.messages[:-2]
                # Alternate which goes first: a pair shares the machine's state of the
                # moment, and neither always gets the other's warm caches.
                if len(early_runs) % 2:
                    late_runs.append(late.turn())
                    early_runs.append(early.turn())
                else:
                    early_runs.append(early.turn())
                    late_runs.append(late.turn())
            fields: dict[str, Callable[[Turn], float]] = {
                "first": lambda t: t.first, "finish": lambda t: t.finish,
                "exit": lambda t: t.exit, "end_finish": lambda t: t.after_model_finish,
                "end_exit": lambda t: t.after_model_exit,
                "rss": lambda t: t.maxrss_kib / 1024}
            row = {"floor_first": median(floor_runs, lambda t: t.first),
                   "floor_exit": median(floor_runs, lambda t: t.exit)}
            for name, runs in (("early", early_runs), ("late", late_runs)):
                for what, get in fields.items():
                    row[f"{name}_{what}"] = median(runs, get)
            row["paired"] = statistics.median(e.exit / x.exit
                                              for e, x in zip(early_runs, late_runs,
                                                              strict=True))
            rows[size] = row
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.runs} runs "
              f"per size, medians; python -c pass: {statistics.median(bare) * 1000:.1f} ms\n")
        print(f"{'messages':>8} | {'floor 1st':>9} | {'floor exit':>10} | {'1st byte':>8} | "
              f"{'x floor':>7} | {'finish':>7} | {'exit':>7} | {'off: 1st':>8} | "
              f"{'off: exit':>9} | {'off: end>fin':>12} | {'off: end>exit':>13} | {'MiB':>5}")
        for size, r in rows.items():
            print(f"{size:>8,} | {r['floor_first'] * 1e3:>9.1f} | {r['floor_exit'] * 1e3:>10.1f} | "
                  f"{r['early_first'] * 1e3:>8.1f} | {r['early_first'] / r['floor_first']:>7.2f} | "
                  f"{r['early_finish'] * 1e3:>7.1f} | {r['early_exit'] * 1e3:>7.1f} | "
                  f"{r['late_first'] * 1e3:>8.1f} | {r['late_exit'] * 1e3:>9.1f} | "
                  f"{r['late_end_finish'] * 1e3:>12.1f} | {r['late_end_exit'] * 1e3:>13.1f} | "
                  f"{r['early_rss']:>5.0f}")
        small = rows[min(rows)]
        for size, r in rows.items():
            verdicts.append((f"{size:,} messages: first model-request byte <= 2x the floor's: "
                             f"{r['early_first'] / r['floor_first']:.2f}",
                             r["early_first"] <= 2 * r["floor_first"]))
            allowed = 1.5 * small["early_exit"] + r["floor_exit"] - small["floor_exit"]
            verdicts.append((f"{size:,} messages: spawn to exit <= 1.5x the 10-message turn "
                             f"+ the floor's growth: {r['early_exit'] * 1e3:.0f} ms (limit "
                             f"{allowed * 1e3:.0f} ms)", r["early_exit"] <= allowed))
            verdicts.append((f"{size:,} messages: early dispatch not slower than without "
                             f"(median of the paired runs' ratio within {NOISE:.0%}): "
                             f"{r['paired'] - 1:+.1%} (medians: exit "
                             f"{r['early_exit'] * 1e3:.0f} vs {r['late_exit'] * 1e3:.0f} ms)",
                             r["paired"] <= 1 + NOISE))
            verdicts.append((f"{size:,} messages: model's last byte to finish <= 20 ms, to exit "
                             f"<= 60 ms: {r['late_end_finish'] * 1e3:.1f} / "
                             f"{r['late_end_exit'] * 1e3:.1f} ms",
                             r["late_end_finish"] <= 0.020 and r["late_end_exit"] <= 0.060))
        if args.long_turns:
            early_at = min(250, args.long_turns // 4)
            latencies, rss, fresh = long_lived(Path(tmp) / "long", env, server,
                                               args.long_turns, early_at)
            window = max(5, args.long_turns // 50)

            def around(i: int, values: list[Any]) -> float:
                return float(statistics.median(values[max(0, i - window):i + window]))

            first_ms = around(early_at, latencies) * 1e3
            last_ms = around(len(latencies) - 1, latencies) * 1e3
            decode = json_decode_ms(2 * len(latencies)) - json_decode_ms(2 * early_at)
            print(f"\nlong-lived bridge, {args.long_turns} turns: turn {early_at} "
                  f"{first_ms:.1f} ms, {rss[early_at] / 1024:.0f} MiB; turn {len(latencies)} "
                  f"{last_ms:.1f} ms, {rss[-1] / 1024:.0f} MiB (decoding the longer request: "
                  f"+{decode:.1f} ms)")
            verdicts.append((f"long-lived bridge: turn {len(latencies)} <= 1.5x turn {early_at} "
                             f"+ the longer request's decode: {last_ms:.1f} ms (limit "
                             f"{1.5 * first_ms + decode:.1f} ms)",
                             last_ms <= 1.5 * first_ms + decode))
            growth = (rss[-1] - rss[early_at - 1]) / 1024
            held = (fresh[1] - fresh[0]) / 1024
            print(f"memory: the long-lived bridge grew {growth:.1f} MiB from turn {early_at} "
                  f"to {len(latencies)}; a fresh bridge serving one turn of the conversation "
                  f"peaks at {fresh[0] / 1024:.0f} MiB then and {fresh[1] / 1024:.0f} MiB "
                  f"at the end (+{held:.1f} MiB: the longer request and session)")
            verdicts.append((f"long-lived bridge: memory grows no more than a fresh bridge's "
                             f"for the same turns (+4 MiB): {growth:.1f} MiB (limit "
                             f"{held + 4:.1f} MiB)", growth <= held + 4))
        took, peak, size, out = huge(Path(tmp) / "huge", env)
        refused = b'"type":"error"' in out
        print(f"\n250,000 tiny messages ({size / 1e6:.1f} MB): answered in {took:.2f} s, "
              f"peak {peak / 1024:.0f} MiB, {'an error' if refused else 'no error'}")
        verdicts.append((f"huge request: a clear error, peak memory <= 16x the request: "
                         f"{peak * 1024 / size:.1f}x", refused and peak * 1024 <= 16 * size))
    server.sock.close()
    print()
    for text, passed in verdicts:
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {text}")
    return 0 if ok else 1


def json_decode_ms(size: int) -> float:
    """Milliseconds to ``json.loads`` a request line of ``size`` messages (the part of a
    longer request's cost that any reader pays)."""
    line = chat(history(max(size, 1)), Path("."), "x")
    start = time.perf_counter()
    for _ in range(5):
        json.loads(line)
    return (time.perf_counter() - start) / 5 * 1e3


if __name__ == "__main__":
    sys.exit(main())
