"""The job's process tree: CPU, RSS, threads, I/O and private memory.

Two implementations, and cost is what sets them apart at 10 samples a second
(measured on a 2-core VM):

:class:`CgroupProcessTree` (used when the job can have a cgroup of its own):
CPU from the cgroup's counters, members from ``cgroup.procs``, RSS from
``/proc/PID/statm``. None of these touch the job's threads, so the job does
not notice being watched.

:class:`ProcfsProcessTree` (the fallback):

- CPU, threads and RSS come from one read of ``/proc/PID/stat`` per process
  (~40 us); psutil's ``cpu_times`` + ``memory_info`` + ``num_threads`` read
  the same file among others and cost ~600 us per tick. The kernel locks the
  run queue of every running thread to read a process's CPU time: a Keras fit
  on 2 cores ran 1.7% slower while watched this way.
- Descendants are found through ``/proc/PID/task/TID/children`` (~50 us;
  psutil's ``children(recursive=True)`` scans every process, ~2 ms), re-listed
  at most every ``refresh_seconds``.
- I/O counters and USS/PSS use psutil, and the sampler asks for them rarely.

Where /proc is missing (not Linux) everything falls back to psutil. CPU time
of processes that ended is kept through their parent's children times once
reaped, so the tree's cumulative CPU is the sum over live processes of self +
waited-for children.
"""

from __future__ import annotations

import os

import psutil

from tensorgauge.sources import TreeReading

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HAVE_PROC = os.path.exists("/proc/self/stat")


def read_stat(pid: int) -> tuple[float, int, int] | None:
    """(CPU seconds incl. waited-for children, threads, RSS bytes) of one process."""
    if not _HAVE_PROC:
        return _read_psutil(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text[text.rfind(b")") + 2:].split()
    try:
        if fields[0] == b"Z":
            return None  # exited, waiting to be reaped
        cpu = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / _TICKS
        return cpu, int(fields[17]), int(fields[21]) * _PAGE
    except (IndexError, ValueError):
        return None


def _read_psutil(pid: int) -> tuple[float, int, int] | None:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            t = proc.cpu_times()
            return (t.user + t.system + t.children_user + t.children_system, proc.num_threads(),
                    proc.memory_info().rss)
    except psutil.Error:
        return None


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
        children = _children_from_proc(pid) if _HAVE_PROC else None
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


def read_rss(pid: int) -> int | None:
    """Resident bytes of one process from /proc/PID/statm (memory counters only)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def read_name(pid: int) -> str | None:
    """A process's command name (``/proc/PID/comm``)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return None


KEPT_PROCESSES = 64  # the largest processes remembered (by their RSS peak)


class _Tree:
    """What both trees share: I/O counters and USS/PSS through psutil, for ``_pids``, and the
    largest processes seen."""

    def __init__(self) -> None:
        self._pids: list[int] = []
        self._cpu_max = 0.0
        self._psutil: dict[int, psutil.Process] = {}  # kept: psutil caches per-object state
        self._peaks: dict[int, tuple[str | None, int]] = {}  # pid -> (name, RSS peak)

    def _note(self, pid: int, rss: int) -> None:
        """Remember a process's RSS peak and its name then (read again as it grows: an exec renames it)."""
        known = self._peaks.get(pid)
        if known is None or rss > known[1]:
            self._peaks[pid] = (read_name(pid) or (known[0] if known else None), rss)
            if len(self._peaks) > 2 * KEPT_PROCESSES:
                largest = sorted(self._peaks.items(), key=lambda item: -item[1][1])[:KEPT_PROCESSES]
                self._peaks = dict(largest)

    def processes(self, count: int = 5) -> list[dict]:
        """The ``count`` processes with the largest RSS peaks seen: pid, name, rss_peak_bytes."""
        largest = sorted(self._peaks.items(), key=lambda item: -item[1][1])[:count]
        return [{"pid": pid, "name": name, "rss_peak_bytes": rss} for pid, (name, rss) in largest]

    def rss_now(self) -> int | None:
        """The tree's RSS from /proc/PID/statm alone (cheap: read between samples near a memory budget)."""
        values = [r for r in map(read_rss, self._pids) if r is not None]
        return sum(values) if values else None

    def _forget_ended(self) -> None:
        self._psutil = {pid: p for pid, p in self._psutil.items() if pid in self._pids}

    def _monotonic_cpu(self, cpu: float) -> float:
        # A process that exited but is not reaped yet drops out for a moment.
        self._cpu_max = max(self._cpu_max, cpu)
        return self._cpu_max

    def _process(self, pid: int) -> psutil.Process | None:
        proc = self._psutil.get(pid)
        if proc is None:
            try:
                proc = self._psutil[pid] = psutil.Process(pid)
            except psutil.Error:
                return None
        return proc

    def _io(self, pids: list[int]) -> tuple[int | None, int | None]:
        read_bytes = write_bytes = 0
        for pid in pids:
            proc = self._process(pid)
            try:
                counters = proc.io_counters() if proc else None
            except (psutil.Error, AttributeError):
                counters = None
            if counters is None:
                return None, None
            read_bytes += counters.read_bytes
            write_bytes += counters.write_bytes
        return read_bytes, write_bytes

    def _open_fds(self, pids: list[int]) -> int | None:
        """File descriptors the tree holds open (a descriptor leak: sockets, files, pipes never closed)."""
        total = 0
        for pid in pids:
            proc = self._process(pid)
            try:
                total += proc.num_fds() if proc else 0
            except (psutil.Error, AttributeError):
                return None
        return total

    def read_private(self) -> tuple[int | None, int | None]:
        uss = pss = 0
        for pid in self._pids:
            proc = self._process(pid)
            try:
                full = proc.memory_full_info() if proc else None
            except psutil.Error:
                full = None
            if full is None:
                return None, None
            uss += full.uss
            pss += getattr(full, "pss", 0)
        return (uss, pss) if self._pids else (None, None)


class ProcfsProcessTree(_Tree):
    def __init__(self, root_pid: int, refresh_seconds: float = 1.0, clock=None):
        from tensorgauge.sources.clock import MonotonicClock

        super().__init__()
        self._clock = clock or MonotonicClock()
        self._refresh_seconds = refresh_seconds
        self._next_refresh = 0.0
        self.root_pid = root_pid
        self._pids = [root_pid]

    def _refresh(self) -> None:
        now = self._clock.now()
        if now >= self._next_refresh:
            self._next_refresh = now + self._refresh_seconds
            self._pids = [self.root_pid] + descendants(self.root_pid)
            self._forget_ended()

    def read(self, io: bool = True) -> TreeReading | None:
        self._refresh()
        cpu = 0.0
        rss = threads = 0
        alive = []
        for pid in self._pids:
            stat = read_stat(pid)
            if stat is None:
                continue
            alive.append(pid)
            self._note(pid, stat[2])
            cpu += stat[0]
            threads += stat[1]
            rss += stat[2]
        self._pids = alive
        if not alive:
            return None
        read_bytes, write_bytes = self._io(alive) if io else (None, None)
        return TreeReading(cpu_seconds=self._monotonic_cpu(cpu), rss_bytes=rss, threads=threads,
                           processes=len(alive), read_bytes=read_bytes, write_bytes=write_bytes,
                           open_fds=self._open_fds(alive) if io else None, pids=tuple(alive))


class CgroupProcessTree(_Tree):
    """The job's tree as the members of its own cgroup (see :class:`~.cgroup.JobCgroup`)."""

    def __init__(self, group, cpu_before_seconds: float = 0.0):
        """``cpu_before_seconds``: what the job used before it was moved into ``group``."""
        super().__init__()
        self.group = group
        self.cpu_before_seconds = cpu_before_seconds

    def read(self, io: bool = True) -> TreeReading | None:
        # A member with no resident memory has exited and waits to be reaped (a zombie): not counted.
        resident = [(pid, rss) for pid in self.group.pids() if (rss := read_rss(pid))]
        self._pids = [pid for pid, _ in resident]
        for pid, rss in resident:
            self._note(pid, rss)
        self._forget_ended()
        cpu = self.group.cpu_seconds()
        if not self._pids or cpu is None:
            return None
        rss = sum(r for _, r in resident)
        threads = self.group.threads() or len(self._pids)
        read_bytes, write_bytes = self._io(self._pids) if io else (None, None)
        return TreeReading(cpu_seconds=self._monotonic_cpu(self.cpu_before_seconds + cpu), rss_bytes=rss,
                           threads=threads, processes=len(self._pids), read_bytes=read_bytes,
                           write_bytes=write_bytes, open_fds=self._open_fds(self._pids) if io else None,
                           pids=tuple(self._pids))
