"""The life of a scripted HTTP server, shared by ``ScriptedOpenAIServer`` and
``ScriptedAnthropicServer``: serving on a daemon thread, stopping, the context manager,
and what is left of a list script."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

StepT = TypeVar("StepT")


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
