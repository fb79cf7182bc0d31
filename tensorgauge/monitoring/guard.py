"""The job dies with its monitor: a tiny guardian process that outlives a killed monitor.

The monitor keeps the write end of a pipe; the guardian (a separate ``python -I``
in its own session, so no terminal signal reaches it) waits on the read end. A
monitor that ends normally writes one byte first and the guardian leaves; a
monitor that dies (SIGKILL, a crash) closes the pipe with nothing written, and
the guardian stops the job's whole tree: its process group and every process
in its cgroup, SIGTERM then, half a second later, SIGKILL.
"""

from __future__ import annotations

import os
import subprocess
import sys

GRACE_SECONDS = 0.5

# Runs in the guardian: the standard library only, no site packages (-I).
_GUARDIAN = r"""
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the monitor's blocked signals are not ours
fd, pgid, procs_files, grace = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
try:
    alive = os.read(fd, 1)
except OSError:
    alive = b""
if alive:
    sys.exit(0)

def members():
    pids = set()
    for path in filter(None, procs_files.split(os.pathsep)):
        try:
            with open(path) as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return pids

def send(sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass
    for pid in members():
        try:
            os.kill(pid, sig)
        except OSError:
            pass

send(signal.SIGTERM)
deadline = time.monotonic() + grace
while time.monotonic() < deadline:
    try:
        os.killpg(pgid, 0)
    except OSError:
        if not members():
            sys.exit(0)
    time.sleep(0.02)
send(signal.SIGKILL)
"""


class Guard:
    """``Guard.start(pgid, procs_files)`` after the job starts; ``release()`` when the monitor ends well."""

    def __init__(self, write_fd: int, process: subprocess.Popen):
        self._write_fd: int | None = write_fd
        self.process = process

    @classmethod
    def start(cls, pgid: int, procs_files: list[str]) -> Guard:
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, True)
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-c", _GUARDIAN, str(read_fd), str(pgid), os.pathsep.join(procs_files),
                 str(GRACE_SECONDS)],
                pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(read_fd)
        return cls(write_fd, process)

    def release(self) -> None:
        """The monitor ends on its own terms: the guardian leaves the job alone."""
        if self._write_fd is None:
            return
        try:
            os.write(self._write_fd, b"x")
        except OSError:
            pass
        os.close(self._write_fd)
        self._write_fd = None
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
