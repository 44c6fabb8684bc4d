"""A local proxy that refuses every connection and notes what each one asked for.

A real client (Codex CLI, Claude Code) is given it as its proxy for everything but the
local server it is pointed at, so nothing it tries leaves the machine, and a test can
assert that it tried nothing."""

from __future__ import annotations

import contextlib
import socket
import threading


class TrapProxy:
    """Listens on a free loopback port; ``asked`` holds each connection's first line
    (``CONNECT host:443 HTTP/1.1``, or a plain request's)."""

    def __init__(self, name: str = "trap-proxy") -> None:
        self.asked: list[str] = []
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return  # closed
            with connection:
                connection.settimeout(10)
                try:
                    first = connection.recv(4096).split(b"\r\n", 1)[0]
                except OSError:
                    first = b""
                self.asked.append(first.decode("latin-1"))

    def close(self) -> None:
        # Closing a listening socket does not wake a thread blocked in accept() on
        # Linux; shutting it down does.
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the trap proxy did not stop"
