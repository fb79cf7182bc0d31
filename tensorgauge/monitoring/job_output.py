"""The job's terminal output passed through the monitor, for ``run --live``: a panel redrawn in
place cannot share the terminal with a job that writes to it directly (each of the job's lines
moves the cursor the panel counts on: old frames pile up and the job's lines are overwritten).

The job writes to a pseudo-terminal instead of the real one, so it still sees a terminal (line
buffering, progress bars, colours, its width); a thread of the monitor reads it and hands the
complete lines, in batches, to ``on_lines`` (printed above the panel) and the line being written
(a progress bar redrawn with carriage returns) to ``on_partial``. Only the monitor's standard
streams that are the panel's terminal are passed through; one redirected to a file or a pipe stays
the job's own, as without ``--live``. stdin stays the real terminal."""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import select
import termios
import threading
import time
from collections.abc import Callable

READ_BYTES = 65536
BATCH_BYTES = 1 << 20  # the job's lines are printed in batches: the panel is redrawn once per batch, not per line
BATCH_SECONDS = 0.05  # a batch is shown within this
DRAIN_SECONDS = 2.0  # after the job's end, what its leftovers (a daemon holding the terminal) may still write


def shown(line: str) -> str:
    """What a terminal leaves on screen of a line written with carriage returns (a progress bar redrawn
    in place) and backspaces: the last non-empty text after a carriage return, each backspace taking
    back the character before it."""
    segments = [s for s in line.split("\r") if s]
    text = segments[-1] if segments else ""
    if "\b" not in text:
        return text
    kept: list[str] = []
    for char in text:
        if char == "\b":
            if kept:
                kept.pop()
        else:
            kept.append(char)
    return "".join(kept)


class LineSplitter:
    """Bytes from the job into complete lines, as shown, and the line still being written."""

    def __init__(self) -> None:
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> list[str]:
        *complete, self._pending = (self._pending + self._decode.decode(data)).split("\n")
        return [shown(line) for line in complete]

    @property
    def partial(self) -> str:
        return shown(self._pending)

    def end(self) -> list[str]:
        """The line left unfinished when the job ended (a terminal leaves it on screen)."""
        self._pending += self._decode.decode(b"", final=True)
        last, self._pending = shown(self._pending), ""
        return [last] if last else []


def _same_terminal(fd: int, other: int) -> bool:
    try:
        return os.isatty(fd) and os.isatty(other) and os.fstat(fd).st_rdev == os.fstat(other).st_rdev
    except OSError:
        return False


class JobOutput:
    """The pseudo-terminal the job writes to (:meth:`popen_args`), read on a thread from
    :meth:`start` (after the job's fork) until :meth:`close`."""

    def __init__(self, on_lines: Callable[[list[str]], None], on_partial: Callable[[str], None],
                 fds: tuple[int, ...], terminal_fd: int):
        self.on_lines, self.on_partial, self.fds, self.terminal_fd = on_lines, on_partial, fds, terminal_fd
        self.master = self.slave = -1  # opened by popen_args, when the job is about to start
        self._size = b""
        self._shown = True  # False once printing failed (a closed stderr): what the job writes is then dropped
        self.lines = LineSplitter()
        self._thread: threading.Thread | None = None
        self._stop_at: float | None = None

    @classmethod
    def for_terminal(cls, terminal_fd: int, on_lines: Callable[[list[str]], None],
                     on_partial: Callable[[str], None]) -> JobOutput | None:
        """Passes through the monitor's stdout and stderr where they are the terminal ``terminal_fd``
        (the live panel's); None where neither is."""
        fds = tuple(fd for fd in (1, 2) if _same_terminal(fd, terminal_fd))
        return cls(on_lines, on_partial, fds, terminal_fd) if fds else None

    def _follow_size(self) -> None:
        """The job's terminal takes the real one's size (rows, columns), now and when it is resized."""
        with contextlib.suppress(OSError):
            size = fcntl.ioctl(self.terminal_fd, termios.TIOCGWINSZ, b"\0" * 8)
            if size != self._size:
                fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)
                self._size = size

    def popen_args(self) -> dict[str, int]:
        """The job's ``stdout``/``stderr`` for Popen: the pseudo-terminal, opened now."""
        if self.master < 0:
            self.master, self.slave = os.openpty()  # neither inherited: only the job's 1 and 2 become the slave
            self._follow_size()
            attrs = termios.tcgetattr(self.slave)
            attrs[1] &= ~termios.ONLCR  # "\n" stays "\n" (not "\r\n")
            termios.tcsetattr(self.slave, termios.TCSANOW, attrs)
        return {{1: "stdout", 2: "stderr"}[fd]: self.slave for fd in self.fds}

    def start(self) -> None:
        """The job has started (it holds the terminal now): read it. Call it after the monitor's signal
        mask is set, so the reading thread inherits the mask."""
        os.close(self.slave)
        self.slave = -1
        self._thread = threading.Thread(target=self._read, name="tensorgauge-job-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            if self._stop_at is not None and time.monotonic() > self._stop_at:
                break
            try:
                ready, _, _ = select.select([self.master], [], [], 0.1)
            except (OSError, ValueError):
                break
            if not ready:
                if self._stop_at is not None:  # the job has ended and nothing more came
                    break
                self._follow_size()
                continue
            data = self._read_batch()
            if not data:
                break
            complete = self.lines.feed(data)
            self._show(complete, self.lines.partial)

    def _read_batch(self) -> bytes:
        """What the job has written, read while more is waiting (a terminal hands over ~4 KiB a read) up to
        :data:`BATCH_BYTES` or :data:`BATCH_SECONDS`: each batch is one print and one redraw of the panel.
        Empty once every process holding the terminal has closed it."""
        chunks: list[bytes] = []
        size, deadline = 0, time.monotonic() + BATCH_SECONDS
        while size < BATCH_BYTES:
            try:
                data = os.read(self.master, READ_BYTES)
            except OSError:  # EIO: every writer has gone
                break
            if not data:
                break
            chunks.append(data)
            size += len(data)
            if time.monotonic() > deadline or not select.select([self.master], [], [], 0.002)[0]:
                break
        return b"".join(chunks)

    def _show(self, complete: list[str], partial: str) -> None:
        """Hand lines on; where that fails the terminal is still read (a job whose writes are not read
        would block), and the rest dropped."""
        if not self._shown:
            return
        try:
            if complete:
                self.on_lines(complete)
            self.on_partial(partial)
        except Exception:
            self._shown = False

    def close(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """After the job's end: what it wrote is read to the end (at most ``drain_seconds`` more where
        something it left running still writes), its last unfinished line is printed, the terminal closed."""
        if self._thread is not None:
            self._stop_at = time.monotonic() + drain_seconds
            self._thread.join(drain_seconds + 1.0)
            if self._thread.is_alive():  # stuck printing (a terminal that takes nothing): left to end with us
                return
            self._thread = None
        for fd in (self.slave, self.master):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.slave = self.master = -1
        self._show(self.lines.end(), "")
