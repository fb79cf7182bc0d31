"""The job dies with its monitor: a tiny guardian process that outlives a killed monitor.

The guardian (a separate ``python -I`` in its own session, so no terminal signal
reaches it) starts before the job, with the job's cgroup (made before the job
too), and waits on a pipe whose write end the monitor keeps. Once the job runs,
the monitor writes its process group (``PGID\\n``); a monitor that ends normally
writes ``x`` and the guardian leaves; a monitor that dies (SIGKILL, a crash)
closes the pipe without it, and the guardian stops the job's whole tree: its
process group and every process in its cgroup, SIGTERM then, half a second
later, SIGKILL; then, however that went, it removes the run's private folder and its cgroup folders
(it once left before its clean-up when the job ended within the grace: 2 of 3 kills left them). A monitor killed
between the job's fork and its word leaves no process group to stop: the
guardian then watches the cgroup for the whole half second, where the job
places itself before its first instruction (it once found it still empty,
left, and the job's first child outlived the monitor). There is no moment when
the job runs unguarded.
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
fd, procs_files, grace, leftover = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
said = b""
while True:
    try:
        chunk = os.read(fd, 64)
    except OSError:
        chunk = b""
    if not chunk:
        break
    said += chunk
    if b"x" in said:
        sys.exit(0)
pgid = int(said.split()[0]) if said.split() else None

def members():
    pids = set()
    for path in filter(None, procs_files.split(os.pathsep)):
        try:
            with open(path) as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return pids

def group_alive():
    if pgid is None:
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False

def send(sig):
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in members():
        try:
            os.kill(pid, sig)
            if sig != signal.SIGKILL:
                os.kill(pid, signal.SIGCONT)  # a stopped process gets a signal only once it runs
        except OSError:
            pass

def clean_up():
    # The run's private files (in RAM) and its cgroup folders: never left behind by a killed monitor.
    # A cgroup folder goes once its last member has gone (rmdir refuses it before).
    import shutil
    if os.path.basename(leftover).startswith("tensorgauge-"):
        shutil.rmtree(leftover, ignore_errors=True)
    folders = [os.path.dirname(p) for p in filter(None, procs_files.split(os.pathsep))]
    folders = [f for f in folders if os.path.basename(f).startswith("tensorgauge-")]
    deadline = time.monotonic() + 2.0
    while folders and time.monotonic() < deadline:
        for folder in list(folders):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            folders.remove(folder)
        if folders:
            time.sleep(0.02)

try:
    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if pgid is None:  # killed between the job's fork and its process group's word: the job may still
            send(signal.SIGTERM)  # be placing itself in its cgroup; it shows there within the grace
        elif not group_alive() and not members():
            break
        time.sleep(0.02)
    else:
        send(signal.SIGKILL)
finally:
    clean_up()
"""


class Guard:
    """``Guard.start(procs_files)`` before the job starts, ``watch(pgid)`` once it runs, ``release()``
    when the monitor ends well."""

    def __init__(self, write_fd: int, process: subprocess.Popen):
        self._write_fd: int | None = write_fd
        self.process = process

    @classmethod
    def start(cls, procs_files: list[str], leftover: str = "") -> Guard:
        """``leftover``: the run's private folder, removed once the job is stopped."""
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, True)
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _GUARDIAN, str(read_fd), os.pathsep.join(procs_files),
                 str(GRACE_SECONDS), leftover],
                pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(write_fd, process)

    def watch(self, pgid: int) -> None:
        """The job's process group, to stop with its cgroup's members."""
        self._say(f"{pgid}\n".encode())

    def _say(self, data: bytes) -> None:
        if self._write_fd is not None:
            try:
                os.write(self._write_fd, data)
            except OSError:
                pass

    def release(self) -> None:
        """The monitor ends on its own terms: the guardian leaves the job alone."""
        if self._write_fd is None:
            return
        self._say(b"x")
        os.close(self._write_fd)
        self._write_fd = None
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
