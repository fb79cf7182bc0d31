"""Orphans of the job stay in the tree the monitor watches: the monitor is a child subreaper.

A process whose parent exits is re-parented to init, out of the job's tree: a daemon's double fork
(fork, ``setsid``, fork, the middle one exits) allocated 500 MiB under a 300 MiB budget unseen. With
``PR_SET_CHILD_SUBREAPER`` (Linux 3.4+) such orphans are re-parented to the monitor instead, where
:class:`Adopted` finds them among its children, and the monitor reaps them when they end. Elsewhere
(not Linux, no ``prctl``) nothing changes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


@functools.cache
def _prctl():
    """libc's ``prctl`` (from the interpreter's own symbols: no library search, which runs ldconfig)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def subreaper() -> bool | None:
    """Whether this process is a child subreaper now; None where that cannot be known."""
    prctl = _prctl()
    if prctl is None:
        return None
    flag = ctypes.c_int(0)
    if prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return None
    return bool(flag.value)


def set_subreaper(on: bool) -> bool:
    """Make this process a child subreaper (or stop being one); False where the kernel refused."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def own_children() -> set[int]:
    """This process's children (all its threads': an orphan goes to one of them)."""
    children: set[int] = set()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        import psutil

        return {p.pid for p in psutil.Process().children()}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                children.update(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return children


def _environment_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False


def process_group(pid: int) -> int | None:
    """``pid``'s process group; None once it is gone."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Adopted:
    """The job's orphans that this process (a subreaper) adopted: its children that it did not have
    when the job started (``not_job``), other than the job itself, that carry the run's id in their
    environment or are in the job's process group (a host process's own later children do neither)."""

    def __init__(self, job_pid: int, run_marker: bytes, not_job: set[int]):
        """``run_marker``: the ``NAME=VALUE`` environment entry only the job's processes have."""
        self.job_pid, self.run_marker = job_pid, run_marker
        self._not_job = set(not_job) | {job_pid}
        self._known: dict[int, bool] = {}  # pid -> adopted (decided once per process)
        self.seen: set[int] = set()  # every orphan adopted during the run
        self._reaped: set[int] = set()

    def pids(self) -> list[int]:
        """The adopted orphans now (zombies among them reaped)."""
        out = []
        for pid in own_children() - self._not_job:
            adopted = self._known.get(pid)
            if adopted is None:
                adopted = self._known[pid] = (process_group(pid) == self.job_pid
                                              or _environment_has(pid, self.run_marker))
            if adopted:
                out.append(pid)
        self.seen.update(out)
        self.reap()
        return [pid for pid in out if pid not in self._reaped]

    def reap(self) -> list[int]:
        """Wait for the adopted orphans that ended (no zombies left behind); returns their pids."""
        ended = []
        for pid in self.seen - self._reaped:
            try:
                done = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:
                done = True  # not ours to wait for (any more)
            if done:
                ended.append(pid)
        self._reaped.update(ended)
        return ended
