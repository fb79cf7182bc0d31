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
- I/O counters use psutil, USS/PSS ``/proc/PID/smaps_rollup``; the sampler asks for them rarely.

A reading's ``rss_bytes`` counts the pages the tree's processes share once: the largest process's RSS
plus the others' private memory (:class:`~.shared_memory.ResidentOnce`), so a forked child is not
its parent's memory again.

What a memory budget counts (:meth:`charged_bytes`) is what the kernel charges: the cgroup's own
charge where the tree is a cgroup's, else RSS with pages shared between the tree's processes counted
once (:mod:`.shared_memory`). A job that leaves its cgroup (writes its pid into another's
``cgroup.procs``, in any one v1 hierarchy) is seen leaving, and watched as a process tree from then
(``left_cgroup``).
Orphans the monitor adopted as a subreaper (:mod:`.reaper`) are part of the tree.

Where /proc is missing (not Linux) everything falls back to psutil. CPU time
of processes that ended is kept through their parent's children times once
reaped, so the tree's cumulative CPU is the sum over live processes of self +
waited-for children.
"""

from __future__ import annotations

import os

import psutil

from tensorgauge.sources import TreeReading
from tensorgauge.sources.reaper import Adopted
from tensorgauge.sources.shared_memory import ResidentOnce, SharedOnce, read_rollup

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

    def __init__(self, clock=None) -> None:
        from tensorgauge.sources.clock import MonotonicClock

        self._clock = clock or MonotonicClock()
        self._shared = SharedOnce(self._clock.now)
        self._resident = ResidentOnce(self._clock.now)  # the samples' memory: shared pages counted once
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
        """(USS, PSS) of the tree: ``smaps_rollup`` (psutil where /proc has none); the PSS also
        refreshes what the budget counts (:class:`~.shared_memory.SharedOnce`)."""
        uss = pss = 0
        rss, pss_by_pid = {}, {}
        uss_by_pid: dict[int, tuple[int, int]] = {}
        for pid in self._pids:
            private = read_rollup(pid) if _HAVE_PROC else None
            if private is None:
                proc = self._process(pid)
                try:
                    full = proc.memory_full_info() if proc else None
                except psutil.Error:
                    full = None
                if full is None:
                    return None, None
                private = (full.uss, getattr(full, "pss", 0))
            uss += private[0]
            pss += private[1]
            pss_by_pid[pid] = private[1]
            rss[pid] = read_rss(pid) or private[1]
            uss_by_pid[pid] = (private[0], rss[pid])
        if not self._pids:
            return None, None
        self._shared.rebase(rss, pss_by_pid)
        self._resident.note(uss_by_pid)
        return uss, pss

    def charged_bytes(self, line_bytes: int | None) -> int | None:
        """The tree's memory as the kernel charges it, read now: RSS, pages its processes share counted
        once (see :class:`~.shared_memory.SharedOnce`; ``line_bytes``: where the caller acts)."""
        rss = {pid: r for pid in self._pids if (r := read_rss(pid)) is not None}
        return self._shared.charged(rss, line_bytes) if rss else None

    memory_counted = "RSS, pages shared between the job's processes counted once (PSS)"


def tree_pids(root_pid: int, adopted: Adopted | None = None) -> list[int]:
    """``root_pid``, its descendants, and the orphans adopted from its tree with theirs."""
    pids = [root_pid, *descendants(root_pid)]
    for orphan in adopted.pids() if adopted is not None else []:
        pids += [orphan, *descendants(orphan)]
    return list(dict.fromkeys(pids))


class ProcfsProcessTree(_Tree):
    def __init__(self, root_pid: int, refresh_seconds: float = 1.0, clock=None, adopted: Adopted | None = None):
        """``adopted``: the job's orphans this monitor adopted (see :mod:`.reaper`), watched too."""
        super().__init__(clock)
        self._refresh_seconds = refresh_seconds
        self._next_refresh = 0.0
        self.root_pid, self.adopted = root_pid, adopted
        self._pids = [root_pid]

    def _refresh(self) -> None:
        now = self._clock.now()
        if now >= self._next_refresh:
            self._next_refresh = now + self._refresh_seconds
            self._pids = tree_pids(self.root_pid, self.adopted)
            self._forget_ended()
        elif self.adopted is not None:  # an orphan at once (~50 us: the monitor's own children), not a second later
            self._pids += [p for orphan in self.adopted.pids() if orphan not in self._pids
                           for p in (orphan, *descendants(orphan))]

    def read(self, io: bool = True) -> TreeReading | None:
        self._refresh()
        cpu = 0.0
        threads = 0
        rss: dict[int, int] = {}
        alive = []
        for pid in self._pids:
            stat = read_stat(pid)
            if stat is None:
                continue
            alive.append(pid)
            self._note(pid, stat[2])
            cpu += stat[0]
            threads += stat[1]
            rss[pid] = stat[2]
        self._pids = alive
        if not alive:
            return None
        read_bytes, write_bytes = self._io(alive) if io else (None, None)
        return TreeReading(cpu_seconds=self._monotonic_cpu(cpu), rss_bytes=self._resident.total(rss),
                           threads=threads, processes=len(alive), read_bytes=read_bytes, write_bytes=write_bytes,
                           open_fds=self._open_fds(alive) if io else None, pids=tuple(alive))


def _still_running(pids: list[int], inside: set[int] | None) -> int | None:
    """The first of ``pids`` that is not ``inside`` (a cgroup's members) and still runs (holds memory)."""
    if inside is None:
        return None
    return next((pid for pid in pids if pid not in inside and read_rss(pid)), None)


LEFT_CHECK_SECONDS = 1.0  # how often the tree's processes are checked to be members of the cgroup


class CgroupProcessTree(_Tree):
    """The job's tree as the members of its own cgroup (see :class:`~.cgroup.JobCgroup`).

    With ``root_pid``, a job (or any process of its tree) that leaves the cgroup is found (the job at
    each reading, the rest every :data:`LEFT_CHECK_SECONDS`), said in :attr:`left_cgroup`, and the
    tree is watched through /proc from then (:class:`ProcfsProcessTree`, its adopted orphans too)."""

    def __init__(self, group, cpu_before_seconds: float = 0.0, root_pid: int | None = None, clock=None,
                 adopted: Adopted | None = None):
        """``cpu_before_seconds``: what the job used before it was moved into ``group``."""
        super().__init__(clock)
        self.group = group
        self.cpu_before_seconds = cpu_before_seconds
        self.root_pid, self.adopted = root_pid, adopted
        self.left_cgroup: dict | None = None  # {"pid", "name", "at"} (``at`` on the clock) once one left
        self._outside: ProcfsProcessTree | None = None
        self._next_check = 0.0

    def _left(self, members: list[int]) -> int | None:
        """A process of the job's tree that is not in its cgroup (in every hierarchy of it), if any: the job,
        a member at the last reading, or (every :data:`LEFT_CHECK_SECONDS`) any other."""
        if self.root_pid is None:
            return None
        inside = set(members)
        if self.root_pid not in inside:
            return self.root_pid if read_stat(self.root_pid) is not None else None
        gone = _still_running(self._pids, inside)
        if gone is not None:
            return gone
        now = self._clock.now()
        if now < self._next_check:
            return None
        self._next_check = now + LEFT_CHECK_SECONDS
        return next((pid for pid in tree_pids(self.root_pid, self.adopted)
                     if pid not in inside and read_stat(pid) is not None), None)

    def _watch_outside(self, pid: int) -> None:
        self.left_cgroup = {"pid": pid, "name": read_name(pid), "at": self._clock.now(),
                            "hierarchies": self.group.outside(pid)}
        assert self.root_pid is not None
        self._outside = ProcfsProcessTree(self.root_pid, clock=self._clock, adopted=self.adopted)

    def read(self, io: bool = True) -> TreeReading | None:
        members = self.group.members()
        if self._outside is None and (gone := self._left(members)) is not None:
            self._watch_outside(gone)
        cpu = self.group.cpu_seconds()
        if self._outside is not None:
            reading = self._outside.read(io)
            if reading is not None:  # what stayed in the cgroup counts too (more CPU than /proc's waited-for)
                reading.cpu_seconds = self._monotonic_cpu(max(reading.cpu_seconds,
                                                              self.cpu_before_seconds + (cpu or 0.0)))
                self._pids = list(reading.pids)
            return reading
        # A member with no resident memory has exited and waits to be reaped (a zombie): not counted.
        resident = [(pid, rss) for pid in members if (rss := read_rss(pid))]
        self._pids = [pid for pid, _ in resident]
        for pid, rss in resident:
            self._note(pid, rss)
        self._forget_ended()
        if not self._pids or cpu is None:
            return None
        rss = self._resident.total(dict(resident))
        threads = self.group.threads() or len(self._pids)
        read_bytes, write_bytes = self._io(self._pids) if io else (None, None)
        return TreeReading(cpu_seconds=self._monotonic_cpu(self.cpu_before_seconds + cpu), rss_bytes=rss,
                           threads=threads, processes=len(self._pids), read_bytes=read_bytes,
                           write_bytes=write_bytes, open_fds=self._open_fds(self._pids) if io else None,
                           pids=tuple(self._pids))

    def processes(self, count: int = 5) -> list[dict]:
        if self._outside is None:
            return super().processes(count)
        peaks = {p["pid"]: p for p in super().processes(count) + self._outside.processes(count)}
        return sorted(peaks.values(), key=lambda p: -p["rss_peak_bytes"])[:count]

    def read_private(self) -> tuple[int | None, int | None]:
        return self._outside.read_private() if self._outside is not None else super().read_private()

    def charged_bytes(self, line_bytes: int | None) -> int | None:
        """The cgroup's charge (its working set); the tree's own count once the job left the cgroup,
        or where the cgroup has no memory controller."""
        if self._outside is None and self.root_pid is not None:
            gone = _still_running(self._pids, self.group.memory_members())
            if gone is not None:  # its memory is charged elsewhere from now on
                self._watch_outside(gone)
        if self._outside is not None:
            return self._outside.charged_bytes(line_bytes)
        charged = self.group.memory_charged_bytes()
        return charged if charged is not None else super().charged_bytes(line_bytes)

    @property
    def memory_counted(self) -> str:  # type: ignore[override]
        if self._outside is None and self.group.memory_dir is not None:
            return "the cgroup's charge (its usage less inactive file cache)"
        return _Tree.memory_counted
