"""What streamed before the model stalled is in the event log, however long the stall.

The journal logs a streamed answer every 2 KB or 250 ms (``PARTIAL_BYTES``,
``PARTIAL_SECONDS``); the 250 ms run on a timer, so a model that streams a few words and
then stalls (a long tool-call argument, a slow upstream) has them logged without a next
piece, and nothing is held back for masking's sake (an unfinished line, an open key
block): what it ends in is masked instead. A process SIGKILLed during the stall keeps it.
The tests wait for the log to hold the text, never for a fixed time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nonoka.events import TextDelta
from nonoka.redact import redact_text
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.store.records import EventRecord
from nonoka.store.sqlite.packing import unpack
from nonoka.turn.journal import Journal
from nonoka.turn.partial import unfinished_answers
from tests.pg import schema_url, temp_schema
from tests.support.bridge import Bridge, chat, user
from tests.support.processes import model_env, run_nonoka

HEAD = "PARTIAL-HEAD of an answer th"
WAIT = 60.0
"""The bound on each wait for the log (the window is 250 ms: this is for a busy machine)."""

STALLS = {
    "words": HEAD,
    "a line longer than 2 KB": "word " * 500 + "and th",
    "an open key block": "here:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nMIIE",
    "a quoted pass phrase": 'and the password: "correct hor',
    "the start of a token": "your key is sk-proj-Zq8vT2m",
}
REST = {
    "words": "at was cut short.\n",
    "a line longer than 2 KB": "e end.\n",
    "an open key block": "owIBAAK\n-----END RSA PRIVATE KEY-----\ndone\n",
    "a quoted pass phrase": 'se battery staple" and on\n',
    "the start of a token": "LZq8vT2mLZq8vT2mL and on\n",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        with temp_schema() as schema:
            yield schema_url(schema)


@pytest.mark.parametrize("name", list(STALLS))
async def test_what_streamed_before_a_stall_is_logged(tmp_path: Path, name: str,
                                                      database: str | None) -> None:
    head, rest = STALLS[name], REST[name]
    stores = open_project_stores(tmp_path, database)
    try:
        book = Journal(stores, title="stall")
        book.start("s")
        for at in range(0, len(head), 5):
            await book.on_event(TextDelta(head[at:at + 5]))
        # The model stalls: nothing more comes until the log holds all that did.
        shown = redact_text(head, open_end=True)
        deadline = time.monotonic() + WAIT
        while (logged := await _logged(stores, "s")) != shown:
            assert time.monotonic() < deadline, (name, logged[-80:])
            await asyncio.sleep(0.02)
        events = await stores.events.list_events("s", limit=1000)
        assert all(secret not in json.dumps([e.data for e in events])
                   for secret in ("horse", "MIIEow", "Zq8vT2m"))
        # The rest streams: the pieces still make the whole answer, masked whole.
        for at in range(0, len(rest), 5):
            await book.on_event(TextDelta(rest[at:at + 5]))
        await book.error("model_error", "the stream broke")
        assert await _logged(stores, "s") == redact_text(head + rest, open_end=True)
    finally:
        await stores.close()


async def _logged(stores: ProjectStores, session_id: str) -> str:
    """The answer the log holds, as ``sessions show`` reads it."""
    events = await stores.events.list_events(session_id, limit=1000)
    found = unfinished_answers(events)
    return found[-1][1].text if found else ""


# -- a real bridge process, killed during the stall ----------------------------------------


class Stalling(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that streams ``HEAD`` and then stalls until the test
    ends (``release``)."""

    release = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        try:
            for at in range(0, len(HEAD), 6):
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                         "model": "m", "choices": [{"index": 0, "finish_reason": None,
                                                     "delta": {"content": HEAD[at:at + 6]}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            Stalling.release.wait(WAIT * 2)
        except (BrokenPipeError, ConnectionResetError):
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stalling() -> Iterator[str]:
    Stalling.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stalling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    Stalling.release.set()
    server.shutdown()
    server.server_close()


def _streamed_so_far(db: Path) -> tuple[str, str] | None:
    """``(session id, answer)`` as the event log of ``db`` holds it, read as another
    process would while the bridge writes; ``None`` before anything is there."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            rows = conn.execute("SELECT session_id, seq, at, kind, data_json FROM events "
                                "ORDER BY seq").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return None
    events = [EventRecord(session_id=sid, seq=seq, at=at, kind=kind, data=json.loads(unpack(data)))
              for sid, seq, at, kind, data in rows]
    found = unfinished_answers(events)
    return (events[0].session_id, found[-1][1].text) if found else None


def test_a_bridge_killed_during_a_stall_keeps_what_streamed(project: Path,
                                                            stalling: str) -> None:
    bridge = Bridge(project, None)
    bridge.env.update(model_env(stalling))
    proc = bridge.spawn()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"cwd": str(project), **chat([user("talk")])}).encode()
                     + b"\n")
    proc.stdin.flush()
    deadline = time.monotonic() + WAIT
    try:
        while (found := _streamed_so_far(bridge.db)) is None or found[1] != HEAD:
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, f"never logged: {found}"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    sid, _ = found

    shown = run_nonoka(project, "sessions", "show", sid, env=bridge.env)
    assert shown.returncode == 0, shown.stderr
    assert "interrupted answer" in shown.stdout and HEAD in shown.stdout, shown.stdout
    exported = run_nonoka(project, "sessions", "export", sid, "--format", "markdown",
                          env=bridge.env)
    assert exported.returncode == 0, exported.stderr
    assert HEAD in exported.stdout.split("(interrupted: the process ended mid-answer)")[1]
