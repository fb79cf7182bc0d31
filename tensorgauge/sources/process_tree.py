"""The job's process tree, read with psutil.

Listing descendants costs ~1.7 ms, so the tree is re-listed at most every
``refresh_seconds``; between refreshes the known processes are read (~50 us
each). CPU time of processes that ended is kept through their parent's
``children_user``/``children_system`` once reaped, so the tree's cumulative CPU
is the sum over live processes of self + reaped children.
"""

from __future__ import annotations

import psutil

from tensorgauge.sources import TreeReading


class PsutilProcessTree:
    def __init__(self, root_pid: int, refresh_seconds: float = 1.0, clock=None):
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
        try:
            children = self._root.children(recursive=True)
        except psutil.Error:
            children = []
        known = {p.pid: p for p in self._procs}
        # Keep the Process objects we already have: psutil caches per-object state.
        self._procs = [self._root] + [known.get(c.pid, c) for c in children if c.pid != self._root.pid]

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
