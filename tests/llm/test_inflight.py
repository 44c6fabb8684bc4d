"""The early request: handed over only when it is exactly the runtime's, else dropped."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from nonoka.llm.inflight import Inflight
from nonoka.llm.wire import Endpoint, request_headers


class RawServer:
    """Accepts connections and records what each one sent until it closed."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.received: list[bytes] = []
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if data.endswith(b"}"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            while chunk := conn.recv(65536):  # until the client closes
                data += chunk
            self.received.append(data)
        self.done.set()

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint.parse(f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1")


@pytest.fixture
def inflight() -> Iterator[Inflight]:
    """The handle a turn's early request travels in, settled when the test ends."""
    held = Inflight()
    yield held
    held.settle()


@pytest.fixture
def raw() -> Iterator[RawServer]:
    server = RawServer()
    yield server
    server.sock.close()


BODY = b'{"model": "m"}'


def test_the_same_request_is_handed_over_and_answered(raw: RawServer,
                                                       inflight: Inflight) -> None:
    headers = request_headers("k")
    inflight.start(raw.endpoint, BODY, headers, 5.0)
    early = inflight.claim(raw.endpoint, BODY, dict(headers))
    assert early is not None
    response = early.sent().getresponse()
    assert response.status == 200 and response.read() == b"ok"
    early.close()
    assert raw.done.wait(5)
    assert raw.received[0].endswith(BODY) and b"Bearer k" in raw.received[0]
    assert inflight.settle() == "used"


@pytest.mark.parametrize("what", ["body", "headers", "endpoint"])
def test_any_other_request_drops_the_early_one(raw: RawServer, inflight: Inflight,
                                               what: str) -> None:
    headers = request_headers("k")
    inflight.start(raw.endpoint, BODY, headers, 5.0)
    endpoint = Endpoint.parse("http://127.0.0.1:9/v1") if what == "endpoint" else raw.endpoint
    assert inflight.claim(endpoint, b'{"model": "n"}' if what == "body" else BODY,
                          request_headers("other") if what == "headers" else headers) is None
    assert raw.done.wait(5), "the dropped request's connection stayed open"
    assert inflight.settle() == "mismatch"
    assert inflight.claim(raw.endpoint, BODY, headers) is None, "claimed twice"


def test_a_request_nobody_claims_is_dropped_when_the_turn_ends(raw: RawServer,
                                                               inflight: Inflight) -> None:
    inflight.start(raw.endpoint, BODY, request_headers(None), 5.0)
    assert inflight.settle() == "unused"
    assert raw.done.wait(5)
    assert inflight.settle() is None


def test_without_an_early_request_nothing_is_claimed(inflight: Inflight) -> None:
    assert inflight.claim(Endpoint.parse("http://127.0.0.1:9/v1"), BODY, {}) is None
    assert inflight.settle() is None


def test_the_wire_and_the_early_request_need_no_pydantic() -> None:
    code = ("import json, sys, nonoka.llm, nonoka.llm.wire, nonoka.llm.inflight; "
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.partition('.')[0] in ('pydantic', 'asyncio'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []



def test_a_plain_http_request_is_written_as_http_client_would(raw: RawServer,
                                                               inflight: Inflight) -> None:
    headers = request_headers("k")
    inflight.start(raw.endpoint, BODY, headers, 5.0)
    early = inflight.claim(raw.endpoint, BODY, headers)
    assert early is not None
    assert early.sent().getresponse().read() == b"ok"
    early.close()
    assert raw.done.wait(5)
    head, _, body = raw.received[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    port = raw.sock.getsockname()[1]
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert {b"Host: 127.0.0.1:%d" % port, b"Accept-Encoding: identity",
            b"Content-Length: %d" % len(BODY), b"Authorization: Bearer k",
            b"Content-Type: application/json"} <= set(lines[1:])
    assert body == BODY


def test_a_host_name_is_resolved_and_written_on_a_worker_thread(inflight: Inflight) -> None:
    server = RawServer()
    port = server.sock.getsockname()[1]
    endpoint = Endpoint.parse(f"http://localhost:{port}/v1")
    headers = request_headers(None)
    inflight.start(endpoint, BODY, headers, 5.0)
    early = inflight.claim(endpoint, BODY, headers)
    assert early is not None
    response = early.sent().getresponse()
    assert response.status == 200 and response.read() == b"ok"
    early.close()
    assert server.done.wait(5)
    assert b"Host: localhost:%d" % port in server.received[0]
    server.sock.close()


def test_a_refused_connection_is_raised_to_whoever_claims_it(inflight: Inflight) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    endpoint = Endpoint.parse(f"http://127.0.0.1:{closed.getsockname()[1]}/v1")
    closed.close()
    inflight.start(endpoint, BODY, {}, 5.0)
    early = inflight.claim(endpoint, BODY, {})
    assert early is not None
    with pytest.raises(ConnectionRefusedError):
        early.sent()


@pytest.mark.parametrize(("url", "headers"), [
    ("https://127.0.0.1:9/v1", {}),
    ("http://127.0.0.1:9/v1", {"X-Bad": "a\r\nInjected: yes"}),
    ("http://127.0.0.1:9/v1", {"Host": "elsewhere"}),
    ("http://127.0.0.1:9/v1", {"X-Key": "ключ"}),
])
def test_what_the_hand_written_request_does_not_cover_goes_to_http_client(
        url: str, headers: dict[str, str]) -> None:
    from nonoka.llm.inflight import _request_head

    assert _request_head(Endpoint.parse(url), 2, headers) is None


def test_an_https_request_goes_through_http_client_on_a_worker_thread(
        raw: RawServer, inflight: Inflight) -> None:
    # A plain listener never answers the TLS handshake: what http.client raised on the
    # worker thread is raised to whoever claims the request.
    endpoint = Endpoint.parse(f"https://127.0.0.1:{raw.sock.getsockname()[1]}/v1")
    inflight.start(endpoint, BODY, {}, 0.5)
    early = inflight.claim(endpoint, BODY, {})
    assert early is not None
    with pytest.raises(TimeoutError, match="timed out"):
        early.sent()
    assert raw.done.wait(5)
    assert raw.received[0][:1] == b"\x16", "not a TLS handshake"


def test_a_server_that_reads_late_gets_the_whole_request_from_the_worker(
        inflight: Inflight) -> None:
    # The calling thread gives up writing when the server stops reading (the runtime
    # must get on with loading); the worker thread writes the rest once it reads again.
    listener = socket.create_server(("127.0.0.1", 0))
    reading, read = threading.Event(), threading.Event()
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            reading.wait(10)
            read.set()
            data = bytearray()
            while not data.endswith(b"}"):
                data += conn.recv(1 << 20)
            got.append(bytes(data))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    endpoint = Endpoint.parse(f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    body = b'{"x": "' + b"a" * (64 << 20) + b'"}'  # more than the socket buffers hold
    inflight.start(endpoint, body, {}, 10.0)
    assert not read.is_set(), "start waited for the server to read"
    reading.set()
    early = inflight.claim(endpoint, body, {})
    assert early is not None
    assert early.sent().getresponse().read() == b"ok"
    early.close()
    listener.close()
    assert got[0].endswith(body)
