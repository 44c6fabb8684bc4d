"""A turn killed while the model streams keeps what the person already saw: the text is
journaled as it streams (at most ~250 ms or 2 KB of it lost), shown as an interrupted
answer, and never sent back to the model as if it were a finished answer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nonoka.store.project import open_project_stores
from tests.support.bridge import Bridge, chat, user
from tests.support.processes import model_env, run_nonoka

WORDS = [f"word{i:03d} " * 6 for i in range(200)]


class SlowStream(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that streams its answer slowly, a piece every 20 ms;
    every request body is kept."""

    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        SlowStream.bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        try:
            for piece in WORDS:
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                         "model": "m", "choices": [{"index": 0, "delta": {"content": piece},
                                                     "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.02)
            end = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow() -> Iterator[str]:
    SlowStream.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _journal(project: Path) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    async def load() -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        stores = open_project_stores(project)
        try:
            sid = (await stores.index.list_sessions())[0].session_id
            events = await stores.events.list_events(sid, limit=1000)
            return sid, [(e.kind, e.data) for e in events]
        finally:
            await stores.close()

    return asyncio.run(load())


def test_a_kill_mid_answer_keeps_what_streamed(project: Path, slow: str) -> None:
    bridge = Bridge(project, None)
    bridge.env.update(model_env(slow))
    proc = bridge.spawn()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"cwd": str(project), **chat([user("talk")])}).encode() + b"\n")
    proc.stdin.flush()
    seen = ""
    while seen.count("word") < 6 * 60:  # well into the answer
        event = json.loads(proc.stdout.readline())
        if event["type"] == "text_delta":
            seen += event["text"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)  # reaps it and closes its pipes
    sid, journal = _journal(project)
    logged = "".join(d["text"] for kind, d in journal if kind == "partial_answer")
    assert seen.startswith(logged)
    assert len(seen) - len(logged) <= 2048, (len(seen), len(logged))
    assert len(logged) > 0

    shown = run_nonoka(project, "sessions", "show", sid, "--limit", "100", env=bridge.env)
    assert shown.returncode == 0, shown.stderr
    assert "interrupted answer" in shown.stdout and logged[:40] in shown.stdout

    # The next turn of the session does not hand the model that text as an answer.
    SlowStream.bodies.clear()
    again = run_nonoka(project, "run", "-c", "go on", env=bridge.env, timeout=60)
    assert again.returncode == 0, again.stderr
    sent = SlowStream.bodies[-1]["messages"]
    assert all(m["role"] != "assistant" for m in sent), sent
    assert logged[:40] not in json.dumps(sent)  # nor in any other message

    # The Markdown export shows the killed turn's text once, after the conversation; the
    # next turn's answer, stored whole, is not shown as cut short.
    exported = run_nonoka(project, "sessions", "export", sid, "--format", "markdown",
                          env=bridge.env)
    assert exported.returncode == 0, exported.stderr
    heading = "## Assistant (interrupted: the process ended mid-answer)"
    assert exported.stdout.count(heading) == 1, exported.stdout[-2000:]
    assert exported.stdout.index("go on") < exported.stdout.index(heading)
    assert logged[:40] in exported.stdout[exported.stdout.index(heading):]
