"""SIGTERM and SIGINT, at any moment of a bridge turn or a ``nonoka run``, end the turn
``cancelled`` with the session saved: never a lost signal, a silent death or a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.bridge.server import LineReader, Output, _first_request, stopped_code
from nonoka.protocol.frames import ProtocolError, RequestLines
from nonoka.signals import StopSignals
from nonoka.state.session_state import SessionStatus
from nonoka.testing import text
from nonoka.testing.server import Delay, ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.support.bridge import BRIDGE, Bridge, chat, load_state, user
from tests.support.processes import NONOKA, model_env

SIGNALS = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT}


class Events:
    """Event lines read from a running bridge with a deadline (a hang fails, never blocks)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc, self.fd, self.buffer = proc, proc.stdout.fileno(), b""
        self.seen: list[dict[str, Any]] = []

    def until(self, kind: str, timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                self.seen.append(json.loads(line))
                if self.seen[-1]["type"] == kind:
                    return self.seen
            left = deadline - time.monotonic()
            assert left > 0, f"no {kind} within {timeout} s; got {self.seen[-3:]}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                data = os.read(self.fd, 1 << 16)
                assert data, f"the bridge closed stdout before {kind}: {self.seen[-3:]}"
                self.buffer += data


SWALLOWED = re.compile(r"Exception ignored in: <function _get_module_lock\.<locals>\.cb "
                       r"at 0x[0-9a-f]+>\nTraceback \(most recent call last\):\n"
                       r'  File "<frozen importlib\._bootstrap>", line \d+, in cb\n'
                       r"KeyboardInterrupt: \n")
"""CPython, still starting, ran its own SIGINT handler inside the import system's module
lock callback, where the ``KeyboardInterrupt`` is printed and dropped: the signal is
gone before any code of nonoka runs, and the process goes on. A drop may also print
nothing at all: about one spawn in a thousand, signalled in its first milliseconds on a
busy machine, went on waiting for input with nothing on stderr (CPython writes an
unraisable exception to ``sys.stderr``, or nowhere while there is none yet: the likely
place). Once nonoka's code runs, a signal always ends the process at once (the second
half of ``test_a_sigint_while_the_bridge_starts_ends_quietly``)."""

SILENT_DROP = ""
"""What stderr holds after that earlier drop (see ``SWALLOWED``)."""


def _finish(proc: subprocess.Popen[bytes], *, starting: bool = False) -> str:
    """Wait for the exit (input still open), and return stderr. ``starting``: a SIGINT
    sent as the interpreter starts may have been dropped by CPython itself (``SWALLOWED``,
    ``SILENT_DROP``); the input is then closed, the bridge must end as at any end of
    input, and stderr must show that drop and nothing else."""
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        if starting:
            assert proc.stdin is not None
            proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            if proc.returncode == 0:
                assert proc.stderr is not None and proc.stdout is not None
                err = proc.stderr.read().decode()
                for stream in (proc.stdout, proc.stderr):
                    stream.close()
                assert err == SILENT_DROP or SWALLOWED.fullmatch(err), err
                return err
        proc.kill()
        proc.wait()
        raise AssertionError("the bridge did not exit after the signal (stdin still open)") \
            from None
    assert proc.stderr is not None and proc.stdout is not None and proc.stdin is not None
    err = proc.stderr.read().decode()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()
    return err


@pytest.mark.parametrize("how", sorted(SIGNALS))
def test_a_signal_while_a_long_answer_streams(bridge: Bridge, server: ScriptedOpenAIServer,
                                              scripted: list[ScriptItem], how: str) -> None:
    """Thousands of chunks wake the event loop while stdout is not read: the loop's
    wake-up pipe fills; the signal must still stop the turn."""
    server.chunk_size = 1
    scripted.append(text("x" * 60_000))
    proc = bridge.spawn()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(chat([user("write a lot")], request_id="r1")).encode() + b"\n")
    proc.stdin.flush()
    events = Events(proc)
    sid = events.until("session_init")[-1]["session_id"]
    events.until("text_delta")
    time.sleep(1.0)  # nobody reads stdout: the bridge blocks, the HTTP worker piles up
    proc.send_signal(SIGNALS[how])
    seen = events.until("finish")
    err = _finish(proc)
    assert proc.returncode == 0, err
    assert seen[-1]["finish_reason"] == "cancelled", seen[-1]
    assert "Traceback" not in err and "wakeup fd" not in err, err
    state = load_state(bridge, sid)
    assert state.status == SessionStatus.CANCELLED
    assert state.memory_entries[0].content == "write a lot"


@pytest.mark.parametrize("delay", [0.0, 0.03, 0.08, 0.14])
@pytest.mark.parametrize("how", sorted(SIGNALS))
def test_a_signal_right_after_the_ack(bridge: Bridge, scripted: list[ScriptItem], how: str,
                                      delay: float) -> None:
    """Before the runtime has loaded and before any handler of the event loop exists."""
    scripted.append(Delay(30, text("never sent")))
    proc = bridge.spawn()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(chat([user("hello")], request_id="r1")).encode() + b"\n")
    proc.stdin.flush()
    events = Events(proc)
    events.until("protocol_ack")
    time.sleep(delay)
    proc.send_signal(SIGNALS[how])
    seen = events.until("finish")
    err = _finish(proc)
    assert proc.returncode == 0, err
    assert seen[-1]["finish_reason"] == "cancelled" and seen[-1]["request_id"] == "r1", seen
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    started = [e for e in seen if e["type"] == "session_init"]
    if started:  # the session existed: it was saved as cancelled
        state = load_state(bridge, started[0]["session_id"])
        assert state is None or state.status == SessionStatus.CANCELLED


def test_a_signal_before_any_request_ends_quietly(bridge: Bridge) -> None:
    proc = bridge.spawn()
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    err = _finish(proc)
    assert proc.returncode == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("how", sorted(SIGNALS))
def test_nonoka_run_saves_the_session_on_a_signal(project: Path, server: ScriptedOpenAIServer,
                                                  scripted: list[ScriptItem], how: str) -> None:
    scripted.append(Delay(30, text("never sent")))
    env = {**os.environ, **model_env(server.base_url)}
    env.pop("NONOKA_DATABASE_URL", None)
    proc = subprocess.Popen([*NONOKA, "run", "a long question"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not server.requests:  # the model call is in flight
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(SIGNALS[how])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "interrupted" in err and "Traceback" not in err, err
    con = sqlite3.connect(project / ".nonoka" / "sessions.db")
    try:
        rows = con.execute("SELECT session_id, status FROM cli_sessions").fetchall()
        kinds = [k for (k,) in con.execute("SELECT kind FROM events ORDER BY seq")]
    finally:
        con.close()
    assert len(rows) == 1 and rows[0][1] == "cancelled", rows
    assert "finish" in kinds, kinds
    bridge = Bridge(project, server)
    state = load_state(bridge, rows[0][0])
    assert state.status == SessionStatus.CANCELLED
    assert [e.content for e in state.memory_entries][-1] == "a long question"


def _nonoka_frames(err: str) -> list[str]:
    """The traceback lines that name a file of nonoka's own, at a line that ran: ``line 0,
    in <module>`` is a module's first instruction, where CPython runs a signal's handler
    that came while it was still finding the module, before any of its code."""
    return [line for line in err.splitlines()
            if line.strip().startswith("File ") and f"{os.sep}nonoka{os.sep}" in line
            and not line.endswith(", line 0, in <module>")]


def test_a_sigint_while_the_bridge_starts_ends_quietly(bridge: Bridge) -> None:
    """SIGINT in the bridge's first milliseconds, while Python imports nonoka (before the
    bridge's own handlers): no KeyboardInterrupt traceback out of nonoka's code, exit 0
    as for any signal before a request.

    Earlier still, while the interpreter itself starts (its streams, ``site``, ``runpy``
    looking for the package), CPython's own handler is in charge and may print its
    traceback, or drop the signal where the import system ignores exceptions (the bridge
    then ends at end of input): no code of nonoka runs yet. Those runs are only counted
    here."""
    outcomes: dict[str, int] = {}
    for delay_ms in (0, 5, 10, 15, 20, 25, 30, 40, 50) * 2:
        proc = bridge.spawn()
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGINT)
        outcome = _outcome(proc, _finish(proc, starting=True), delay_ms)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # Then at moments the bridge itself reports (its imports, as ``-X importtime`` lists
    # them on stderr, whatever the machine's speed): nonoka's code runs by then.
    for marker in ("| nonoka", "nonoka.errors", "nonoka.signals", "nonoka.bridge.server"):
        for _ in range(3):
            proc = _spawn_until_imported(bridge, marker)
            proc.send_signal(signal.SIGINT)
            err = "".join(line for line in _finish(proc).splitlines(keepends=True)
                          if not line.startswith("import time:"))
            assert _outcome(proc, err, marker) == "exit 0", (marker, proc.returncode, err)


def _outcome(proc: subprocess.Popen[bytes], err: str, when: object) -> str:
    """How a bridge signalled while starting ended: its exit, or what the interpreter
    did with the signal before nonoka's code ran; never a traceback from that code."""
    assert not _nonoka_frames(err), (when, err)
    if SWALLOWED.fullmatch(err):
        return "dropped by the interpreter"
    if "Traceback" in err or "Fatal Python error" in err:
        return "interpreter start-up"
    assert proc.returncode in (0, -signal.SIGINT), (when, proc.returncode, err)
    assert not err, (when, err)
    return f"exit {proc.returncode}"


def _spawn_until_imported(bridge: Bridge, marker: str) -> subprocess.Popen[bytes]:
    """A bridge that has imported the module ``marker`` names (its ``-X importtime``
    line read from stderr; the rest of stderr stays in the pipe)."""
    proc = subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=bridge.project,
                            env={**bridge.env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline().decode()
        assert line, f"the bridge ended before importing {marker}"
        if line.rstrip().endswith(marker):
            return proc


def test_a_sigterm_while_the_bridge_starts_exits_0(bridge: Bridge) -> None:
    """SIGTERM once nonoka's code runs: exit 0 (before the interpreter runs any of it,
    the plain death by the signal), never a traceback."""
    for delay_ms in (0, 10, 20, 30, 40) * 2:
        proc = bridge.spawn()
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGTERM)
        err = _finish(proc)
        assert proc.returncode in (0, -signal.SIGTERM) and not err, (delay_ms, err)


class _SignalBeforeTheWait(StopSignals):
    """A real stop signal that lands right after the bridge last looked for one, before it
    waits for input: the moment a counted-but-unseen signal would leave the bridge waiting
    for ever. Installed, so its handlers are the process's: use it in ``_installed``."""

    def __init__(self) -> None:
        super().__init__()
        self._fired = False

    def stopped(self) -> bool:
        seen = super().stopped()
        if not self._fired:
            self._fired = True
            signal.raise_signal(signal.SIGINT)  # its handler runs now, and only counts
        return seen


@contextlib.contextmanager
def _installed(signals: StopSignals) -> Iterator[StopSignals]:
    signals.install()
    try:
        yield signals
    finally:
        signals.uninstall()


def test_a_request_left_unread_by_a_signal_fails_with_a_code() -> None:
    """Stopped before it read the request waiting in its input, the bridge does not end
    with exit 0 and no output (a host would take that for an empty answer): 128 + the
    signal, and a line on stderr. With nothing waiting, or at the end of the input, 0."""
    line = json.dumps(chat([user("hi")], new_session=True)).encode() + b"\n"
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as stream, open(write_end, "wb") as writer:
        signals = StopSignals()
        reader = LineReader(stream, 1 << 20)
        assert stopped_code(signals, reader) == 0  # no signal: nothing in the input
        signals._handle(signal.SIGTERM, None)
        assert stopped_code(signals, reader) == 0  # nothing waiting
        writer.write(line)
        writer.flush()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert stopped_code(signals, reader) == 128 + signal.SIGTERM
        assert "before it read the request" in err.getvalue()


class _SignalAsTheLineIsRead(LineReader):
    """A stop signal that lands as the read of the request returns: the moment a line
    already taken from the input could be dropped and the bridge end with 0, unanswered."""

    def __init__(self, stream: io.BufferedReader, signals: StopSignals) -> None:
        super().__init__(stream, 1 << 20)
        self.signals = signals

    def read(self) -> bytes | ProtocolError | None:
        line = super().read()
        self.signals._handle(signal.SIGTERM, None)
        return line


def test_a_signal_as_the_request_is_read_fails_with_a_code() -> None:
    """The request read as a stop signal came is not answered and not forgotten: it goes
    back to the input, and the exit code is 128 + the signal with a line on stderr."""
    line = json.dumps(chat([user("hi")], new_session=True)).encode() + b"\n"
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as stream, open(write_end, "wb") as writer:
        writer.write(line)
        writer.flush()
        signals = StopSignals()
        reader = _SignalAsTheLineIsRead(stream, signals)
        out = io.BytesIO()
        assert _first_request(reader, Output(out), signals, RequestLines()) is None
        assert out.getvalue() == b""  # not acknowledged
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert stopped_code(signals, reader) == 128 + signal.SIGTERM
        assert "before it read the request" in err.getvalue()


@pytest.mark.parametrize("waiting", [True, False])
def test_a_signal_while_the_bridge_imports_with_a_request_waiting_fails_with_a_code(
        tmp_path: Path, waiting: bool) -> None:
    """Before the bridge's own handlers (while it imports), a stop signal with a request
    already in its input ends it with 128 + the signal and a line on stderr, never exit 0
    with nothing on stdout; with nothing waiting, quietly with 0. The process is a
    ``nonoka bridge`` as far as the package can tell (its name and first argument) that
    signals itself right after importing ``nonoka``: the moment is exact."""
    script = tmp_path / "nonoka"
    script.write_text("import os, signal, time\nimport nonoka\n"
                      "os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(30)\n")
    proc = subprocess.run([sys.executable, str(script), "bridge"], capture_output=True,
                          input=json.dumps(chat([user("hi")])) + "\n" if waiting else "",
                          text=True, timeout=60)
    if waiting:
        assert proc.returncode == 128 + signal.SIGTERM, proc
        assert "before it read the request" in proc.stderr and proc.stdout == ""
    else:
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_signal_just_before_the_first_wait_ends_it() -> None:
    """A signal that came as the bridge was about to wait for its first request stops it
    before it answers anything, though the request then arrives."""
    read_end, write_end = os.pipe()
    out = io.BytesIO()
    with (open(read_end, "rb") as stream, open(write_end, "wb") as writer,
          _installed(_SignalBeforeTheWait()) as signals):
        writer.write(json.dumps(chat([user("hi")], new_session=True)).encode() + b"\n")
        writer.flush()
        first = _first_request(LineReader(stream, 1 << 20), Output(out), signals,
                               RequestLines())
    assert signals.received == 1 and signals.last == signal.SIGINT
    assert first is None and out.getvalue() == b""


class _SignalWhereRaisingIsIgnored(LineReader):
    """A stop signal whose handler runs inside a weakref callback as the wait begins: where
    Python drops anything a handler raises (the import system's module locks end in such
    callbacks, so an ``import`` at the start of the wait was such a place). If the wait
    misses the signal, input comes after 30 s (``missed``) rather than never, so that the
    test fails instead of hanging."""

    def __init__(self, stream: io.BufferedReader, writer: io.BufferedWriter) -> None:
        super().__init__(stream, 1 << 20)
        self.writer = writer
        self.missed = False

    def wait(self, wakeup: int | None = None) -> None:
        class Lock:
            pass

        lock = Lock()
        kept = weakref.ref(lock, lambda _: signal.raise_signal(signal.SIGTERM))
        del lock  # the callback runs here, and the handler in it
        assert kept() is None
        timer = threading.Timer(30, self._end_the_wait)
        timer.start()
        try:
            super().wait(wakeup)
        finally:
            timer.cancel()

    def _end_the_wait(self) -> None:
        self.missed = True
        self.writer.write(b"\n")
        self.writer.flush()


def test_a_signal_handled_where_raising_is_ignored_still_ends_the_wait() -> None:
    read_end, write_end = os.pipe()
    out = io.BytesIO()
    with (open(read_end, "rb") as stream, open(write_end, "wb") as writer,
          _installed(StopSignals()) as signals):
        reader = _SignalWhereRaisingIsIgnored(stream, writer)
        first = _first_request(reader, Output(out), signals, RequestLines())
    assert not reader.missed, "the wait went on after the signal"
    assert signals.last == signal.SIGTERM
    assert first is None and out.getvalue() == b""



def _wakeup_after(setup: str, fd: int, another: int) -> int:
    """The wake-up descriptor left after ``fd`` was set, then a ``StopSignals`` installed,
    ``setup`` done to it (``another`` set, say), and uninstalled (the process's
    descriptor is cleared after)."""
    import asyncio

    signal.set_wakeup_fd(fd)
    signals = StopSignals()
    signals.install()
    loop = asyncio.new_event_loop()
    try:
        if setup == "attached":
            signals.attach(loop, lambda: None)
            signals.detach()
        elif setup == "another set since":
            signal.set_wakeup_fd(another)
        elif setup == "closed meanwhile":
            os.close(fd)
        signals.uninstall()
    finally:
        loop.close()
    return signal.set_wakeup_fd(-1)


@pytest.mark.parametrize("setup", ["", "attached", "another set since", "closed meanwhile"])
def test_uninstall_gives_back_the_wake_up_descriptor_set_before_install(setup: str) -> None:
    """An event loop's own signal handling (or a library user's) keeps its wake-up
    descriptor across a ``StopSignals`` installed and removed; one set since stays, and
    one closed meanwhile is not given back."""
    read_end, write_end = os.pipe()
    other_read, other_write = os.pipe()
    for end in (write_end, other_write):
        os.set_blocking(end, False)
    try:
        left = _wakeup_after(setup, write_end, other_write)
    finally:
        os.close(read_end)
        os.close(other_read)
        os.close(other_write)
        if setup != "closed meanwhile":
            os.close(write_end)
    expected = {"another set since": other_write, "closed meanwhile": -1}
    assert left == expected.get(setup, write_end)
