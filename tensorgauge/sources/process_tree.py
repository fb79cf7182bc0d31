"""The job's process tree, read with psutil.

Descendants are found through ``/proc/PID/task/TID/children`` (~50 us for a
process; psutil's ``children(recursive=True)`` scans every process on the
machine, ~2 ms), re-listed at most every ``refresh_seconds``. CPU time of processes that ended is kept through their parent's
``children_user``/``children_system`` once reaped, so the tree's cumulative CPU
is the sum over live processes of self + reaped children.
"""

from __future__ import annotations

import os

import psutil

from tensorgauge.sources import TreeReading


def _children_from_proc(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from /proc; None where the kernel does not offer them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                children.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread just ended
            return None
        except (OSError, ValueError):
            continue
    return children


def descendants(root_pid: int) -> list[int]:
    """Every descendant of ``root_pid``, parents before children."""
    out: list[int] = []
    queue = [root_pid]
    while queue:
        pid = queue.pop(0)
        children = _children_from_proc(pid)
        if children is None:  # no /proc children files: fall back to psutil's scan
            try:
                return [p.pid for p in psutil.Process(root_pid).children(recursive=True)]
            except psutil.Error:
                return []
        for child in children:
            if child not in out and child != root_pid:
                out.append(child)
                queue.append(child)
    return out


class PsutilProcessTree:
    def __init__(self, root_pid: int, refresh_seconds: float = 0.2, clock=None):
        from tensorgauge.sources.clock import MonotonicClock

        self._clock = clock or MonotonicClock()
        self._refresh_seconds = refresh_seconds
        self._next_refresh = 0.0
        self._cpu_max = 0.0
        try:
            self._root = psutil.Process(root_pid)
        except psutil.Error:
            self._root = None
        self._procs: list[psutil.Process] = [self._root] if self._root else []

    def _refresh(self) -> None:
        if self._root is None:
            return
        now = self._clock.now()
        if now < self._next_refresh:
            return
        self._next_refresh = now + self._refresh_seconds
        known = {p.pid: p for p in self._procs}
        procs = []
        for pid in descendants(self._root.pid):
            proc = known.get(pid)  # keep our Process objects: psutil caches per-object state
            if proc is None:
                try:
                    proc = psutil.Process(pid)
                except psutil.Error:
                    continue
            procs.append(proc)
        self._procs = [self._root] + procs

    def read(self) -> TreeReading | None:
        self._refresh()
        cpu = 0.0
        rss = threads = processes = 0
        read_bytes = write_bytes = 0
        io_ok = True
        alive = []
        for proc in self._procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    mem = proc.memory_info()
                    n_threads = proc.num_threads()
                    try:
                        io = proc.io_counters()
                    except (psutil.AccessDenied, AttributeError):
                        io = None
            except psutil.Error:
                continue
            alive.append(proc)
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += mem.rss
            threads += n_threads
            processes += 1
            if io is None:
                io_ok = False
            else:
                read_bytes += io.read_bytes
                write_bytes += io.write_bytes
        self._procs = alive
        if not alive:
            return None
        # A process that exited but is not reaped yet drops out for a moment.
        self._cpu_max = max(self._cpu_max, cpu)
        return TreeReading(
            cpu_seconds=self._cpu_max,
            rss_bytes=rss,
            threads=threads,
            processes=processes,
            read_bytes=read_bytes if io_ok else None,
            write_bytes=write_bytes if io_ok else None,
        )

    def read_private(self) -> tuple[int | None, int | None]:
        uss = pss = 0
        for proc in self._procs:
            try:
                full = proc.memory_full_info()
            except psutil.Error:
                return None, None
            uss += full.uss
            pss += getattr(full, "pss", 0)
        return (uss, pss) if self._procs else (None, None)
