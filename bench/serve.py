"""``nonoka serve``: what it adds to a request, what a long chain stores, how many
requests it answers at once.

Run: ``.venv/bin/python bench/serve.py [--reps N] [--turns N] [--clients N]`` (PostgreSQL
is the tests' server: ``NONOKA_TEST_POSTGRES_URL`` or the local one).

The model is a scripted endpoint in this process (``nonoka.testing``: Chat Completions and
Anthropic's Messages API), answering at once; ``nonoka serve`` runs as a process of its
own on a fresh project. Three measurements:

1. Per-request overhead, side by side: each request through ``nonoka serve`` alternates
   with the same exchange sent to the scripted endpoint directly (the request ``nonoka
   serve`` makes: the same messages); p50 and p99 of each, and the p50 difference. For
   the Responses API (a new response each time, and a ``previous_response_id`` chain),
   Chat Completions (a growing history) and ``/v1/messages`` (a growing history, a
   server on an ``anthropic:`` model). Two sets of rows, each on conversations of its
   own: "new connections" (the goals) opens a new connection for every request both
   ways, to ``nonoka serve`` and to the endpoint; "kept connections" is how an SDK client
   calls: one connection to ``nonoka serve`` kept from request to request, and one to
   the endpoint for the direct requests. Either way ``nonoka serve`` keeps its own
   connections to the endpoint (``nonoka.llm.connections``): the scripted endpoints
   speak HTTP/1.1 keep-alive as the providers do. Beside them, the size of what the
   endpoint receives for the last request of a ``--turns``-long ``/v1/messages``
   conversation, through ``nonoka serve`` and directly.
2. Storage: a chain of ``--turns`` responses (``previous_response_id``), questions and
   answers of 200-800 characters; the SQLite file (its write-ahead log folded in)
   against the bytes of every item of the chain as the API gives them (each response's
   input and output items, compact JSON); also net of the file a first turn makes.
3. Throughput: ``--clients`` client threads, each continuing a chain of its own, against
   one process on SQLite, one on PostgreSQL, and two processes sharing PostgreSQL (each
   request of a chain to the other process); requests per second. No goal.

Goals are printed as PASS/FAIL lines; the exit status is 1 when one fails.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import pg

from nonoka.store.sqlite.packing import register
from nonoka.testing import text
from nonoka.testing.server import ScriptedAnthropicServer, ScriptedOpenAIServer

OPENAI_MODEL = "openai:scripted-model"
ANTHROPIC_MODEL = "anthropic:claude-scripted"
ANSWER = "The answer, in one short sentence."
GOALS = {"overhead p50, Responses (ms)": 5.0, "overhead p50, Responses chain (ms)": 5.0,
         "overhead p50, Chat Completions (ms)": 5.0, "overhead p50, Messages (ms)": 5.0,
         "database / items, 1,000-turn chain": 1.2}
ADDRESS = re.compile(r"http://127\.0\.0\.1:(\d+)/v1")
PANGRAMS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly pack "
            "boxes of liquor jugs; naïve café owners résumé their zoë ünter façade")
WORDS = PANGRAMS.split()


class Serve:
    """``nonoka serve --port 0`` as a process of its own; its log goes to a file."""

    def __init__(self, project: Path, model: str, env: dict[str, str]) -> None:
        self._log = (project / "serve.log").open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nonoka", "serve", "--port", "0", "--model", model],
            cwd=project, env={**os.environ, **env}, stdout=subprocess.PIPE,
            stderr=self._log, text=True)
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = ADDRESS.search(line)
            if found:
                self.port = int(found.group(1))
                break
        else:
            raise SystemExit(f"nonoka serve did not start: {(project / 'serve.log').read_text()}")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)
        self._log.close()


class Post(Protocol):
    """How a request is sent (``post``, or a ``Kept`` client's)."""

    def __call__(self, port: int, path: str, body: Any,
                 headers: dict[str, str] | None = None) -> dict[str, Any]: ...


def post(port: int, path: str, body: Any, headers: dict[str, str] | None = None
         ) -> dict[str, Any]:
    """One request on a new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        return exchange(connection, path, body, headers)
    finally:
        connection.close()


def exchange(connection: http.client.HTTPConnection, path: str, body: Any,
             headers: dict[str, str] | None) -> dict[str, Any]:
    connection.request("POST", path, json.dumps(body),
                       {"Content-Type": "application/json", **(headers or {})})
    answer = connection.getresponse()
    raw = answer.read()
    if answer.status != 200:
        raise SystemExit(f"POST {path} answered {answer.status}: {raw[:500]!r}")
    return dict(json.loads(raw))


class Kept:
    """Requests on one connection per port, kept from request to request (an SDK
    client's way); a connection the server closed is opened again."""

    def __init__(self) -> None:
        self._open: dict[int, http.client.HTTPConnection] = {}

    def __call__(self, port: int, path: str, body: Any,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
        connection = self._open.get(port)
        if connection is None:
            connection = self._open[port] = http.client.HTTPConnection(
                "127.0.0.1", port, timeout=120)
        try:
            return exchange(connection, path, body, headers)
        except (http.client.RemoteDisconnected, ConnectionError):
            connection.close()  # idle too long for the server: as a client would, again
            return exchange(connection, path, body, headers)

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()


def get(port: int, path: str) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", path)
        return dict(json.loads(connection.getresponse().read()))
    finally:
        connection.close()


def sentence(rng: random.Random) -> str:
    size = rng.randint(200, 800)
    out = ""
    while len(out) < size:
        out += rng.choice(WORDS) + " "
    return out[:size]


def documentation() -> str:
    """This repository's README and docs: English prose with code, as a coding agent's
    conversation reads (a 26-word list compresses far better than that)."""
    root = Path(__file__).resolve().parent.parent
    return "\n\n".join(path.read_text(encoding="utf-8")
                        for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))])


def passage(rng: random.Random, corpus: str) -> str:
    """200-800 characters of ``corpus`` from a random word boundary."""
    size = rng.randint(200, 800)
    start = rng.randrange(len(corpus) - size - 100)
    start = corpus.index(" ", start) + 1
    return corpus[start:start + size]


@contextmanager
def upstreams(answer: Callable[[dict[str, Any]], Any]) -> Iterator[dict[str, str]]:
    """Both scripted endpoints, and the environment that points a server at them."""
    with ScriptedOpenAIServer(answer, keep_alive=True) as chat, \
            ScriptedAnthropicServer(lambda _body: ANSWER, keep_alive=True) as anthropic:
        yield {"OPENAI_BASE_URL": chat.base_url, "OPENAI_API_KEY": "sk-bench",
               "ANTHROPIC_BASE_URL": anthropic.base_url, "ANTHROPIC_API_KEY": "sk-bench",
               "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": "",
               "chat_port": str(chat.port), "anthropic_port": str(anthropic.port)}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1,
                                                   round(0.99 * (len(ordered) - 1)))]


def paired(reps: int, through: Callable[[int], None], direct: Callable[[int], None]
           ) -> tuple[list[float], list[float]]:
    """Milliseconds of each, run alternately so the machine's load falls on both alike."""
    a: list[float] = []
    b: list[float] = []
    for n in range(reps):
        for fn, out in ((through, a), (direct, b)):
            start = time.perf_counter()
            fn(n)
            out.append((time.perf_counter() - start) * 1000)
    return a, b


def overhead(reps: int, root: Path, results: dict[str, float]) -> None:
    with upstreams(lambda _body: text(ANSWER)) as env:
        chat_port, anthropic_port = int(env["chat_port"]), int(env["anthropic_port"])
        (root / "openai").mkdir()
        (root / "anthropic").mkdir()
        serve = Serve(root / "openai", OPENAI_MODEL, env)
        claude = Serve(root / "anthropic", ANTHROPIC_MODEL, env)
        try:
            for warm in range(5):
                post(serve.port, "/v1/responses", {"model": "m", "input": f"warm {warm}"})
                post(chat_port, "/v1/chat/completions", {"model": "m", "messages": [
                    {"role": "user", "content": "warm"}]})
            kept = Kept()
            for way, send, tag in (("", post, ""), (", kept connections", kept, "kept ")):
                cases = cases_for(serve.port, claude.port, chat_port, anthropic_port, send,
                                  tag)
                for case, (through, direct) in cases.items():
                    name = case + way
                    served, plain = paired(reps, through, direct)
                    (s50, s99), (d50, d99) = percentiles(served), percentiles(plain)
                    results[f"{name}: serve p50 (ms)"] = s50
                    results[f"{name}: serve p99 (ms)"] = s99
                    results[f"{name}: direct p50 (ms)"] = d50
                    results[f"{name}: direct p99 (ms)"] = d99
                    results[f"overhead p50, {name} (ms)"] = s50 - d50
                    results[f"overhead p99, {name} (ms)"] = s99 - d99
            kept.close()
        finally:
            serve.stop()
            claude.stop()


def sent_bytes(turns: int, root: Path, results: dict[str, float]) -> None:
    """What the endpoint receives for the last request of a ``turns``-long ``/v1/messages``
    conversation (the client's contents strings, as in ``cases_for``): through ``nonoka
    serve`` (its prompt cache on, as by default) and the same messages sent directly."""
    with ScriptedAnthropicServer(lambda _body: ANSWER, keep_alive=True) as endpoint:
        (root / "sizes").mkdir()
        claude = Serve(root / "sizes", ANTHROPIC_MODEL, {
            "ANTHROPIC_BASE_URL": endpoint.base_url, "ANTHROPIC_API_KEY": "sk-bench",
            "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})
        kept = Kept()
        messages: list[dict[str, str]] = []
        try:
            for n in range(turns):
                messages.append({"role": "user", "content": f"message {n}"})
                kept(claude.port, "/v1/messages", {"model": "claude-x", "max_tokens": 100,
                                                   "messages": messages},
                     {"anthropic-version": "2023-06-01"})
                messages.append({"role": "assistant", "content": ANSWER})
            post(endpoint.port, "/v1/messages", {"model": "claude-scripted", "max_tokens": 100,
                                                 "messages": messages[:-1]},
                 {"anthropic-version": "2023-06-01", "x-api-key": "sk-bench"})
        finally:
            kept.close()
            claude.stop()
        through, direct = endpoint.bodies[-2:]
        results[f"Messages, {turns} turns: request through nonoka serve (KB)"] = \
            len(through) / 1024
        results[f"Messages, {turns} turns: request sent directly (KB)"] = len(direct) / 1024


def cases_for(serve: int, claude: int, chat: int, anthropic: int, post: Post, tag: str
              ) -> dict[str, tuple[Callable[[int], None], Callable[[int], None]]]:
    """Each measured exchange: through ``nonoka serve``, and the same sent directly,
    each by ``post``; ``tag`` starts every text, so each set of rows has conversations
    of its own."""
    chain: list[str] = []
    history: list[dict[str, str]] = []
    messages: list[dict[str, str]] = []

    def response(n: int) -> None:
        post(serve, "/v1/responses", {"model": "m", "input": f"{tag}question {n}"})

    def response_direct(n: int) -> None:
        post(chat, "/v1/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": f"{tag}question {n}"}]})

    def chained(n: int) -> None:
        body: dict[str, Any] = {"model": "m", "input": f"{tag}next {n}"}
        if chain:
            body["previous_response_id"] = chain[-1]
        chain.append(post(serve, "/v1/responses", body)["id"])

    def chained_direct(n: int) -> None:
        path = [m for k in range(n + 1) for m in (
            {"role": "user", "content": f"{tag}next {k}"},
            {"role": "assistant", "content": ANSWER})]
        post(chat, "/v1/chat/completions", {"model": "m", "messages": path[:-1]})

    def completion(n: int) -> None:
        history.append({"role": "user", "content": f"{tag}chat {n}"})
        post(serve, "/v1/chat/completions", {"model": "m", "messages": history})
        history.append({"role": "assistant", "content": ANSWER})

    def completion_direct(n: int) -> None:
        post(chat, "/v1/chat/completions", {"model": "m", "messages": history[:-1]})

    def message(n: int) -> None:
        messages.append({"role": "user", "content": f"{tag}message {n}"})
        post(claude, "/v1/messages", {"model": "claude-x", "max_tokens": 100,
                                      "messages": messages},
             {"anthropic-version": "2023-06-01"})
        messages.append({"role": "assistant", "content": ANSWER})

    def message_direct(n: int) -> None:
        post(anthropic, "/v1/messages", {"model": "claude-scripted", "max_tokens": 100,
                                         "messages": messages[:-1]},
             {"anthropic-version": "2023-06-01", "x-api-key": "sk-bench"})

    return {"Responses": (response, response_direct),
            "Responses chain": (chained, chained_direct),
            "Chat Completions": (completion, completion_direct),
            "Messages": (message, message_direct)}


def database_size(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def breakdown(path: Path, turns: int) -> dict[str, float]:
    """Where the file's bytes are: each table's pages with its indexes (SQLite's
    ``dbstat``), and the timeline's JSON by kind, per turn."""
    out: dict[str, float] = {}
    with sqlite3.connect(path) as db:
        for name, size in db.execute(
                "SELECT coalesce(tbl_name, s.name), sum(pgsize) FROM dbstat s "
                "LEFT JOIN sqlite_schema m ON m.name = s.name GROUP BY 1 "
                "ORDER BY 2 DESC LIMIT 4"):
            out[f"chain: pages of {name} per turn (bytes)"] = size / turns
        for kind, size in db.execute("SELECT kind, sum(length(CAST(data_json AS BLOB))) "
                                     "FROM events "
                                     "GROUP BY kind ORDER BY 2 DESC"):
            out[f"chain: timeline JSON as stored, {kind} per turn (bytes)"] = size / turns
        register(db)  # ``entry_text``: a deflated row's JSON
        [(stored, entries, deflated)] = db.execute(
            "SELECT sum(length(CAST(entry_json AS BLOB))), "
            "sum(length(CAST(entry_text(entry_json) AS BLOB))), "
            "sum(typeof(entry_json) = 'blob') FROM session_entries")
        out["chain: entry JSON per turn (bytes)"] = (entries or 0) / turns
        out["chain: entry rows' stored JSON per turn (bytes)"] = (stored or 0) / turns
        out["chain: entry rows stored deflated (%)"] = 100 * (deflated or 0) / (2 * turns)
    return out


def storage(turns: int, root: Path, results: dict[str, float], prose: bool = True) -> None:
    rng = random.Random(7)
    corpus = documentation()

    def said() -> str:
        return passage(rng, corpus) if prose else sentence(rng)

    answers = [said() for _ in range(turns)]
    questions = [said() for _ in range(turns)]
    asked = iter(answers)
    project = root / "chain"
    project.mkdir()
    with upstreams(lambda _body: text(next(asked))) as env:
        serve = Serve(project, OPENAI_MODEL, env)
        ids: list[str] = []
        try:
            for n in range(turns):
                body: dict[str, Any] = {"model": "m", "input": questions[n]}
                if ids:
                    body["previous_response_id"] = ids[-1]
                ids.append(post(serve.port, "/v1/responses", body)["id"])
                if n == 0:
                    first = database_size(project / ".nonoka" / "sessions.db")
            items = texts = 0
            for ident in ids:
                made = get(serve.port, f"/v1/responses/{ident}")
                given = get(serve.port, f"/v1/responses/{ident}/input_items")["data"]
                for item in [*given, *made["output"]]:
                    items += len(json.dumps(item, separators=(",", ":"),
                                            ensure_ascii=False).encode())
                    texts += sum(len(part.get("text", "").encode())
                                 for part in item.get("content", []))
        finally:
            serve.stop()
    size = database_size(project / ".nonoka" / "sessions.db")
    results.update(breakdown(project / ".nonoka" / "sessions.db", turns))
    results["chain: database (KB)"] = size / 1024
    results["chain: database after the first turn (KB)"] = first / 1024
    results["chain: items as JSON (KB)"] = items / 1024
    results["chain: text of the items (KB)"] = texts / 1024
    results["database / items, 1,000-turn chain"] = size / items
    results["chain: database growth / items"] = (size - first) / items
    results["chain: database / text"] = size / texts
    results["chain: items per turn (bytes)"] = items / turns


def throughput(clients: int, rounds: int, root: Path, results: dict[str, float]) -> None:
    with upstreams(lambda _body: text(ANSWER)) as env:
        for name, processes, engine in (("one process, SQLite", 1, "sqlite"),
                                        ("one process, PostgreSQL", 1, "postgres"),
                                        ("two processes, PostgreSQL", 2, "postgres")):
            project = root / f"load-{processes}-{engine}"
            project.mkdir()
            schema = pg.create_schema() if engine == "postgres" else ""
            url = pg.schema_url(schema) if schema else ""
            servers = [Serve(project, OPENAI_MODEL, {**env, "NONOKA_DATABASE_URL": url})
                       for _ in range(processes)]
            try:
                results[f"throughput, {name} (requests/s)"] = load(
                    [s.port for s in servers], clients, rounds)
            finally:
                for server in servers:
                    server.stop()
                if schema:
                    pg.drop_schema(schema)


def load(ports: list[int], clients: int, rounds: int) -> float:
    """Requests per second of ``clients`` threads, each continuing its own chain."""
    start = threading.Barrier(clients + 1)
    failures: list[BaseException] = []

    def client(number: int) -> None:
        start.wait()
        previous = None
        try:
            for n in range(rounds):
                body: dict[str, Any] = {"model": "m", "input": f"client {number} turn {n}"}
                if previous:
                    body["previous_response_id"] = previous
                previous = post(ports[(number + n) % len(ports)], "/v1/responses",
                                body)["id"]
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise SystemExit(f"{len(failures)} clients failed: {failures[0]}")
    return clients * rounds / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="requests per overhead case")
    parser.add_argument("--turns", type=int, default=1000, help="the stored chain's length")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=20, help="requests per client")
    parser.add_argument("--only", choices=("overhead", "storage", "throughput"),
                        help="one of the three measurements")
    parser.add_argument("--text", choices=("docs", "words"), default="docs",
                        help="the chain's questions and answers: passages of this "
                        "repository's docs (default), or words drawn from a 26-word list")
    args = parser.parse_args()
    print(f"load average at the start {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.only in (None, "overhead"):
            overhead(args.reps, root, results)
            sent_bytes(args.turns, root, results)
        if args.only in (None, "storage"):
            storage(args.turns, root, results, prose=args.text == "docs")
        if args.only in (None, "throughput"):
            throughput(args.clients, args.rounds, root, results)
    print(f"load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for name, value in results.items():
        if name not in GOALS:
            print(f"      {name}: {value:.2f}")
    ok = True
    for name, limit in GOALS.items():
        if name not in results:
            continue
        passed = results[name] <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {results[name]:.2f} (limit {limit})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
