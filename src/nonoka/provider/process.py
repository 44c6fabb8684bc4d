"""One ``nonoka bridge`` process: spawn it, exchange NDJSON lines, and always reap it.

The provider spawns a fresh bridge for every model step, so this is the code that runs
on every turn. It owns the failure modes of a child process — it may not start, may die
early, may hang — and turns each into a ``BridgeError`` that names the command, its exit
code and the tail of its stderr (where the bridge logs), so a person can see what went
wrong without re-running anything. stderr is drained continuously into a bounded buffer:
a chatty bridge must neither block on a full pipe nor grow the provider's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Mapping, Sequence

from nonoka.errors import NonokaError
from nonoka.protocol.frames import DEFAULT_MAX_FRAME_BYTES, ProtocolError
from nonoka.protocol.values import ErrorCode

__all__ = ("STDERR_TAIL_BYTES", "BridgeError", "BridgeProcess", "BridgeTimeoutError",
           "StderrTail", "describe_exit", "merged_env")

STDERR_TAIL_BYTES = 8192
"""How much of the bridge's stderr is kept (the end of it: that is where the failure is)."""
_READ_CHUNK = 65536
_REAP_TIMEOUT = 5.0
"""How long to wait for pipes to reach end of file once the process is gone."""


class BridgeError(NonokaError):
    """The bridge could not start, broke the protocol, or ended before ``finish``.

    ``command``, ``returncode`` and ``stderr_tail`` repeat what the message says, for
    programs; ``returncode`` is negative when a signal ended the process.
    """

    def __init__(self, message: str, *, command: Sequence[str] = (),
                 returncode: int | None = None, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.command = list(command)
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class BridgeTimeoutError(BridgeError, TimeoutError):
    """The bridge did not finish within the provider's timeout and was stopped."""


class StderrTail:
    """The last ``limit`` bytes written to a stream."""

    def __init__(self, limit: int = STDERR_TAIL_BYTES) -> None:
        self.limit = limit
        self.truncated = False
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        excess = len(self._buffer) - self.limit
        if excess > 0:
            del self._buffer[:excess]
            self.truncated = True

    def text(self) -> str:
        """The tail as text; a cut-off start is marked so nobody mistakes it for the whole."""
        text = self._buffer.decode("utf-8", "replace")
        return "..." + text if self.truncated else text


class BridgeProcess:
    """A running bridge with piped stdin, stdout and stderr.

    Use ``spawn`` to start one and ``aclose`` (always, in a ``finally``) to make sure it
    is gone and its pipes are closed, whatever happened in between.
    """

    def __init__(self, command: Sequence[str], process: asyncio.subprocess.Process,
                 tail: StderrTail) -> None:
        self.command = list(command)
        self.tail = tail
        self._process = process
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._closed = False

    @classmethod
    async def spawn(cls, command: Sequence[str], *, env: Mapping[str, str] | None = None,
                    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                    stderr_limit: int = STDERR_TAIL_BYTES) -> BridgeProcess:
        """Start ``command``; a command that cannot be executed raises ``BridgeError``."""
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env) if env is not None else None,
                # The reader's buffer limit bounds one line; a frame may be this long.
                limit=max_frame_bytes + 2,
            )
        except (OSError, ValueError) as exc:
            raise BridgeError(
                f"could not start the bridge: {exc}; bridge command: `{shlex.join(command)}` "
                "(check that the command exists and is executable, or pass `command=`)",
                command=command,
            ) from exc
        return cls(command, process, StderrTail(stderr_limit))

    # -- state -------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def command_text(self) -> str:
        return shlex.join(self.command)

    # -- lines -------------------------------------------------------------------------

    async def write_line(self, line: bytes) -> bool:
        """Send one frame; ``False`` when the bridge no longer reads (it exited)."""
        stdin = self._process.stdin
        if stdin is None or stdin.is_closing():
            return False
        try:
            stdin.write(line)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def read_line(self) -> bytes:
        """The next line from stdout (with its ``\\n``), or ``b""`` at end of file.

        A line longer than the frame limit raises ``ProtocolError`` (``frame_too_large``).
        Cancelling this call loses no data: the stream keeps what it buffered.
        """
        stdout = self._process.stdout
        assert stdout is not None
        try:
            return await stdout.readline()
        except ValueError as exc:  # the reader's limit: one line over the frame limit
            raise ProtocolError(ErrorCode.FRAME_TOO_LARGE,
                                f"the bridge wrote a line over the frame limit ({exc})") from None

    async def close_stdin(self) -> None:
        """Signal end of input; a bridge that finished its request then exits.

        Data still queued (a request the bridge never read) is dropped rather than
        waited for: closing would otherwise wait for a reader that may never come.
        """
        stdin = self._process.stdin
        if stdin is None or stdin.is_closing():
            return
        if stdin.transport.get_write_buffer_size():
            stdin.transport.abort()
            return
        stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await stdin.wait_closed()

    # -- ending ------------------------------------------------------------------------

    async def wait(self, within: float | None) -> bool:
        """Wait for the process to exit; ``True`` when it did ``within`` that many seconds."""
        try:
            await asyncio.wait_for(self._process.wait(), within)
        except TimeoutError:
            return False
        return True

    def send_signal(self, sig: int) -> None:
        """Signal the process unless it is already gone."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def stop(self, grace: float, *, signal_first: bool = False) -> None:
        """End the process politely, then firmly: close stdin, SIGTERM, SIGKILL.

        Each step gets ``grace`` seconds. SIGTERM lets a bridge save its session first.
        ``signal_first`` skips waiting after closing stdin — for a bridge that is busy
        with a request, which end of input does not stop.
        """
        await self.close_stdin()
        if not signal_first and await self.wait(grace):
            return
        self.terminate()
        if await self.wait(grace):
            return
        self.kill()
        await self.wait(None)

    async def aclose(self) -> None:
        """Make sure the process is gone and every pipe is closed; safe to call twice.

        Pipes are read to end of file because the subprocess transport only closes once
        all of them have; an unclosed transport would leak and warn.
        """
        if self._closed:
            return
        self._closed = True
        await self.close_stdin()
        self.kill()
        await self._process.wait()
        stdout = self._process.stdout
        if stdout is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_read_to_eof(stdout), _REAP_TIMEOUT)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), _REAP_TIMEOUT)
        if not self._stderr_task.done():
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr_task

    async def failure(self, what: str, *, grace: float, signal_first: bool = False,
                      error_type: type[BridgeError] = BridgeError) -> BridgeError:
        """Stop the process and describe ``what`` went wrong with its exit code and stderr."""
        await self.stop(grace, signal_first=signal_first)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), _REAP_TIMEOUT)
        tail = self.tail.text().rstrip()
        code = self._process.returncode
        message = (f"{what}; bridge command: `{self.command_text}`; {describe_exit(code)}; "
                   + (f"stderr (last {self.tail.limit} bytes):\n{tail}" if tail
                      else "stderr: (empty)"))
        return error_type(message, command=self.command, returncode=code, stderr_tail=tail)

    async def _drain_stderr(self) -> None:
        stderr = self._process.stderr
        if stderr is None:
            return
        while chunk := await stderr.read(_READ_CHUNK):
            self.tail.feed(chunk)


def describe_exit(returncode: int | None) -> str:
    """``exit code 3``, ``killed by SIGKILL (exit code -9)`` or ``still running``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (exit code {returncode})"
    return f"exit code {returncode}"


async def _read_to_eof(stream: asyncio.StreamReader) -> None:
    while await stream.read(_READ_CHUNK):
        pass


def merged_env(extra: Mapping[str, str] | None) -> dict[str, str] | None:
    """``os.environ`` with ``extra`` laid over it (``None`` when there is nothing to add)."""
    if extra is None:
        return None
    return {**os.environ, **extra}
