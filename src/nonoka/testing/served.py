"""The life of a scripted HTTP server, shared by ``ScriptedOpenAIServer`` and
``ScriptedAnthropicServer``: serving on a daemon thread, stopping, the context manager,
what is left of a list script, and the HTTP side every scripted endpoint writes alike
(JSON and text answers, errors, chunked event streams).

By default every answer closes its connection (``Connection: close``), which keeps
shutdown simple. With ``keep_alive`` the server speaks HTTP/1.1 keep-alive as the
providers do: a whole answer leaves the connection open for the client's next request
(a dropped or lingering stream still ends it); ``connections`` counts the connections
accepted, and ``close_idle`` closes the ones waiting for a next request, as a server's
idle timeout does."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from nonoka.testing.steps import Flood, HttpError, Linger, Paced

StepT = TypeVar("StepT")
OwnerT = TypeVar("OwnerT")


class ServedScript(Generic[StepT]):
    """A scripted server's lifecycle; the subclass makes its HTTP server (``_serving``)
    and keeps ``_script``, ``_used``, ``requests`` and ``failures``."""

    THREAD_NAME = "scripted-server"
    _address: tuple[str, int]
    _httpd: ThreadingHTTPServer | None
    _thread: threading.Thread | None
    _closing: threading.Event
    _script: Sequence[StepT] | Callable[[dict[str, Any]], StepT]
    _used: int
    requests: list[dict[str, Any]]
    failures: list[str]
    keep_alive: bool = False
    """Answers leave the connection open for the next request (HTTP/1.1 keep-alive)."""
    connections: int = 0
    """Connections accepted so far."""
    _open: dict[socket.socket, bool]
    """Each open connection, and whether its handler is answering a request."""
    _open_lock: threading.Lock

    def _keeping(self, keep_alive: bool) -> None:
        """Set up the keep-alive bookkeeping (the subclass's ``__init__`` calls it)."""
        self.keep_alive = keep_alive
        self.connections = 0
        self._open = {}
        self._open_lock = threading.Lock()

    def _accepted(self, sock: socket.socket) -> None:
        with self._open_lock:
            self.connections += 1
            self._open[sock] = False

    def _busy(self, sock: socket.socket, busy: bool) -> None:
        with self._open_lock:
            if sock in self._open:
                self._open[sock] = busy

    def _ended(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.pop(sock, None)

    def close_idle(self) -> int:
        """Close the connections waiting for a next request (as a server's idle timeout
        does; call it while no request is on its way); how many were closed."""
        with self._open_lock:
            idle = [sock for sock, busy in self._open.items() if not busy]
        for sock in idle:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return len(idle)

    def _serving(self) -> ThreadingHTTPServer:
        raise NotImplementedError

    def start(self) -> Self:
        self._httpd = self._serving()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={
            "poll_interval": 0.05}, name=self.THREAD_NAME, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; pending ``Delay`` steps end at once and their clients are dropped."""
        if self._httpd is None:
            return
        self._closing.set()
        if self.keep_alive:
            self.close_idle()  # a kept connection's handler would wait for its timeout
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the request threads
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the scripted server is not running; use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def remaining(self) -> int:
        """Unused steps of a list script (0 for a function script)."""
        if callable(self._script):
            return 0
        return max(0, len(self._script) - self._used)

    def assert_done(self) -> None:
        """Fail when the script ran out or when scripted steps were never used."""
        if self.failures:
            raise AssertionError(f"scripted server: {self.failures[0]}")
        if self.remaining:
            total = len(self._script) if not callable(self._script) else 0
            raise AssertionError(f"scripted server has {self.remaining} unused step(s) "
                                 f"of {total}; it got {len(self.requests)} request(s)")


class ScriptedHTTPServer(ThreadingHTTPServer, Generic[OwnerT]):
    """A scripted endpoint's HTTP server: daemon request threads, and ``owner``, the
    ``ServedScript`` its handlers answer for."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 owner: OwnerT) -> None:
        self.owner = owner
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (timeouts, cancellation) are part of the tests: stay quiet."""
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class ScriptedHandler(BaseHTTPRequestHandler):
    """The HTTP exchanges on one connection to a scripted endpoint. Every answer closes
    the connection unless the server keeps connections alive (``ServedScript``); a
    subclass gives the vendor's error body and the headers its answers carry."""

    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle client never holds up shutdown for longer
    disable_nagle_algorithm = True
    """``TCP_NODELAY``, as the providers' servers (and asyncio's) set it: on a kept
    connection, an event written while the last one waits for its ACK would otherwise
    wait for the client's delayed ACK (40 ms)."""
    KEEPALIVE = b": keep-alive\n\n"
    """What a lingering stream sends every ``Linger.ping`` seconds (an SSE comment)."""
    _linger: Linger | None = None
    """This exchange's ``Linger`` step: its stream is held open instead of ended."""
    _pace = 0.0
    """Seconds between this exchange's events (``Paced``); 0: they leave together."""
    server: ScriptedHTTPServer[Any]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded (and logged to --log) instead

    def setup(self) -> None:
        super().setup()
        self._unsent: list[bytes] = []
        """Chunks not written yet (``_chunk``)."""
        self.server.owner._accepted(self.connection)

    def finish(self) -> None:
        self.server.owner._ended(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        finally:
            self.server.owner._busy(self.connection, False)

    def parse_request(self) -> bool:
        self.server.owner._busy(self.connection, True)
        return super().parse_request()

    def _closes(self) -> bool:
        """Whether this answer ends the connection (no keep-alive): then it says so."""
        if not self.server.owner.keep_alive:
            self.close_connection = True
        return self.close_connection

    def _answer_headers(self) -> dict[str, str]:
        """Headers every answer carries (a vendor's request id); none here."""
        return {}

    def _error_payload(self, status: int) -> Any:
        """The vendor's JSON error body for a scripted ``HttpError`` that gives none."""
        raise NotImplementedError

    def _send(self, status: int, content_type: str, data: bytes,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        closing = {"Connection": "close"} if self._closes() else {}
        for name, value in {**self._answer_headers(), **closing, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self._last_write(data)

    def _send_json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        self._send(status, "application/json", json.dumps(payload).encode(), extra)

    def _send_error(self, error: HttpError) -> None:
        """A scripted error: its body as it is (text or JSON), else the vendor's."""
        extra = {} if error.retry_after is None else {"Retry-After": f"{error.retry_after:g}"}
        body = error.body if error.body is not None else self._error_payload(error.status)
        if isinstance(body, str):
            self._send(error.status, "text/plain; charset=utf-8", body.encode(), extra)
        else:
            self._send_json(error.status, body, extra)

    def _start_stream(self) -> None:
        """Start a chunked ``text/event-stream`` answer (``_chunk``, then ``_end_stream``)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        for name, value in self._answer_headers().items():
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        if self._closes():
            self.send_header("Connection", "close")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        """Add ``data`` to the stream as one chunk; it leaves with the next ``_flush``
        (an answer that is ready at once leaves in one write, as it would behind a
        server's buffer, not one small packet per event), or at once, ``_pace`` seconds
        before the next, in a paced answer."""
        self._unsent.append(b"%x\r\n%s\r\n" % (len(data), data))
        if self._pace:
            self._flush()
            self.server.owner._closing.wait(self._pace)

    def _wrapped(self, step: Linger | Paced) -> None:
        """Note how this exchange's answer is to stream (``Linger``, ``Paced``)."""
        if isinstance(step, Paced):
            self._pace = step.seconds
        else:
            self._linger = step

    def _flush(self) -> None:
        if self._unsent:
            data = b"".join(self._unsent)
            self._unsent.clear()
            self.wfile.write(data)

    def _end_stream(self) -> None:
        if self._linger is not None:
            self._hold()
            return
        self._unsent.append(b"0\r\n\r\n")
        data = b"".join(self._unsent)
        self._unsent.clear()
        self._last_write(data)

    def _last_write(self, data: bytes) -> None:
        """Write an answer's last bytes; the connection counts as idle (``close_idle``)
        before they leave, so a client that has read them finds it so."""
        self.server.owner._busy(self.connection, False)
        self.wfile.write(data)

    def _hang_up(self) -> None:
        """Stop a stream without ending it (a dropped connection), or hold it open."""
        if self._linger is not None:
            self._hold()
            return
        self._flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _hold(self) -> None:
        """Keep the stream open, pinging as ``Linger`` says, until the server closes (or
        the client hangs up: the next ping fails)."""
        linger = self._linger
        assert linger is not None
        self.close_connection = True  # the stream never ended
        self._flush()
        closing: threading.Event = self.server.owner._closing
        while not closing.wait(linger.ping):
            if linger.ping is not None:
                self._chunk(self.KEEPALIVE)
                self._flush()

    def _flood(self, step: Flood) -> None:
        """A stream whose one ``data:`` line never ends: ``step.size`` bytes, then hang up."""
        self._start_stream()
        self._chunk(b"data: ")
        block = b"x" * (1 << 20)
        left = step.size
        while left > 0:
            self._chunk(block[:left])
            self._flush()
            left -= len(block)
        self.close_connection = True
        with suppress(OSError):  # the client may have hung up already
            self.connection.shutdown(socket.SHUT_RDWR)
