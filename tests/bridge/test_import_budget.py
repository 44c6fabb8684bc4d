"""The per-turn bridge path imports only what it needs.

A ``nonoka bridge`` process is spawned for every model step, so a heavy module sneaking
into its import graph costs every turn. This test runs a real turn under
``python -X importtime`` and checks what was imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.support.bridge import Bridge, assistant, chat, one, user

FORBIDDEN = {
    "rich": "a table renderer (only the human commands use it)",
    "click": "the CLI framework (bridge is dispatched before it)",
    "httpx": "an HTTP client we do not use (the adapter is on http.client)",
    "openai": "the OpenAI SDK (~370 ms to import)",
    "psycopg": "the PostgreSQL driver, when PostgreSQL is not configured",
    "psycopg_pool": "the PostgreSQL pool, when PostgreSQL is not configured",
    "http.server": "a web server",
    "socketserver": "a server framework",
    "nonoka.testing": "the test doubles",
    "nonoka.llm.catalog": "the model catalog (loaded by a caller that prices a call)",
    "nonoka.cli.commands": "the human commands",
    "pygments": "a syntax highlighter",
}


def imported_modules(stderr: str) -> set[str]:
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":
                names.add(name)
    return names


def test_a_turn_imports_nothing_heavy(bridge: Bridge, scripted: list[Step]) -> None:
    scripted.append(text("hello"))
    request = json.dumps({"cwd": str(bridge.project), **chat([user("hi")])}).encode() + b"\n"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "nonoka", "bridge"],
                          input=request, capture_output=True, cwd=bridge.project,
                          env=bridge.env, timeout=60, check=False)
    assert done.returncode == 0
    assert b'"finish_reason":"stop"' in done.stdout, done.stdout + done.stderr
    modules = imported_modules(done.stderr.decode())
    assert "nonoka.bridge.handler" in modules, "the importtime output was not parsed"
    sneaked = {name: why for name, why in FORBIDDEN.items()
               if name in modules or any(m.startswith(name + ".") for m in modules)}
    assert not sneaked, f"heavy modules on the bridge path: {sneaked}"


def test_protocol_ack_needs_no_pydantic() -> None:
    code = ("import sys, nonoka.bridge.server, nonoka.protocol.frames; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'asyncio', 'sqlite3')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_a_prompt_turn_sends_its_model_request_before_pydantic_is_loaded(
        bridge: Bridge, scripted: list[Step], server: ScriptedOpenAIServer) -> None:
    scripted.extend([text("first"), text("the early request's answer")])
    events = bridge.run(chat([user("hi")]))
    session_id = one(events, "session_init")["session_id"]
    request = {"cwd": str(bridge.project),
               **chat([user("hi"), assistant("first"), user("again")], session_id=session_id)}
    # What the bridge does before the runtime loads: dispatch, list what is imported (to a
    # plain-http endpoint the request is written without http.client, email, ssl or
    # OpenSSL's hashes), then (here) wait until the request is written.
    code = ("import json, sys\n"
            "from nonoka.bridge import early\n"
            "handle = early.dispatch(json.loads(sys.argv[1]))\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'pydantic_core', 'asyncio', 'http', 'email', 'ssl', 'typing', "
            "'_hashlib', 'dataclasses'))\n"
            "sent = handle is not None and handle.inflight._pending.sent() is not None\n"
            "print(json.dumps([sent, loaded]))\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(request)], cwd=bridge.project,
                          env=bridge.env, capture_output=True, text=True, timeout=60,
                          check=True)
    assert json.loads(done.stdout) == [True, []], done.stderr
    deadline = time.monotonic() + 10
    while len(server.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the server records the request when it has read all of it
    assert [m["content"] for m in server.requests[-1]["messages"]] == ["hi", "first", "again"]
