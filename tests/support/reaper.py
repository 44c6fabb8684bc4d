"""Subprocesses a test dropped without waiting for them: reaped when they are collected,
and named at the end of the run.

``subprocess.Popen.__del__`` warns (``ResourceWarning``: "subprocess N is still running",
an unclosed pipe) when its object is collected while the process runs. The warning
surfaces in whichever test is running when the garbage collector gets there, so a test
that forgot a process made another, unrelated test fail, and only when the machine was
slow enough for the process to outlive its test. Here every ``Popen`` remembers the test
that made it; one collected while its process still runs is killed and waited for, its
pipes closed, without a warning, and the run fails at its end naming the test that left
it (``tests/conftest.py``).
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any

current_test = ""
"""The node id of the test running now (set by ``tests/conftest.py``)."""

left_running: list[tuple[str, str]] = []
"""(the test that started it, its command) for each process collected while running."""

_init = subprocess.Popen.__init__
_del = subprocess.Popen.__del__


def _tracked_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    self._nonoka_test = current_test  # type: ignore[attr-defined]
    _init(self, *args, **kwargs)


def _reaping_del(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    if getattr(self, "returncode", 0) is None and getattr(self, "_child_created", False):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if self.poll() is None:
                left_running.append((getattr(self, "_nonoka_test", "?"), str(self.args)))
                self.kill()
                self.wait(timeout=10)
    for stream in (self.stdin, self.stdout, self.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    _del(self, *args, **kwargs)


def install() -> None:
    """Track every ``Popen`` of this process from now on."""
    subprocess.Popen.__init__ = _tracked_init  # type: ignore[method-assign]
    subprocess.Popen.__del__ = _reaping_del  # type: ignore[method-assign]
