"""The tree's memory without a cgroup, as the kernel charges it: pages its processes share counted once.

Summed RSS counts a page once for every process that maps it: a parent holding 200 MiB with 8 forked
read-only workers (a ``multiprocessing`` pool, a ``DataLoader``) summed to 1.9 GiB while the kernel
charged 216 MiB. PSS (each resident page divided among the processes that map it) sums to what the
kernel holds, but reading it walks the process's page tables: ``/proc/PID/smaps_rollup`` measured
4.1 ms for a 200 MiB process and 23 ms for a 2 GiB one on the 2-core VM (psutil's
``memory_full_info``: 7.4 ms and 22 ms), against 24 us for its RSS (``statm``). So the budget
reads RSS every time and PSS only where it changes the answer (:class:`SharedOnce`), and each sample's
memory counts the largest process's RSS and the others' private memory, read as they appear
(:class:`ResidentOnce`): a brief fork of a 420 MiB process is no 840 MiB peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PSS_EVERY_SECONDS = 0.1  # at most this often for new processes or a figure past its line
REFRESH_SECONDS = 1.0  # near the line, PSS again this often (a worker writing its parent's pages
# copies them: its RSS stays, the kernel's charge grows)
NEAR_SHARE = 0.6  # of the line: "near"
SLACK_SHARE = 0.05  # of the line: sharing this small is not worth a PSS read before acting


def read_rollup(pid: int) -> tuple[int, int] | None:
    """(USS, PSS) bytes of one process from ``/proc/PID/smaps_rollup``; None when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    return _parse_rollup(text)


def read_private(pid: int) -> int | None:
    """Private bytes (USS) of one process; 0 for one that has no memory left (it ended, or is ending: its
    rollup is empty); None when it cannot be read (another user's)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    except OSError:
        return None
    if not text.strip():
        return 0
    rollup = _parse_rollup(text)
    return rollup[0] if rollup is not None else None


def _parse_rollup(text: bytes) -> tuple[int, int] | None:
    values = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(b":")
        if name in (b"Pss", b"Private_Clean", b"Private_Dirty"):
            try:
                values[name] = int(rest.split()[0]) << 10
            except (IndexError, ValueError):
                return None
    if len(values) != 3:
        return None
    return values[b"Private_Clean"] + values[b"Private_Dirty"], values[b"Pss"]


class SharedOnce:
    """The tree's memory with shared pages counted once, cheaply enough to read every 2 ms.

    One process: its RSS (nothing inside the tree shares it). Several, far below the line: their RSS
    sum until PSS was first read, then the PSS last read plus what each process's RSS grew by since
    (an upper bound: new private pages raise RSS and PSS alike; a process new since then is counted
    from the next reading). Near the line (:data:`NEAR_SHARE`) PSS is read again, at most every
    :data:`PSS_EVERY_SECONDS`: when processes appeared, when the figure passed the line and the last
    reading showed real sharing (else it is tight enough to act on), and every :data:`REFRESH_SECONDS`."""

    def __init__(self, clock: Callable[[], float], read: Callable[[int], tuple[int, int] | None] = read_rollup):
        self._clock, self._read = clock, read
        self._pss: int | None = None  # the tree's PSS at the last reading
        self._rss: dict[int, int] = {}  # each process's RSS then
        self._slack = 0  # RSS sum less PSS then: how much the tree shared
        self._at = float("-inf")
        self.readings = 0  # PSS readings taken (each costs ~20 us per MiB resident)

    def rebase(self, rss: dict[int, int], pss_by_pid: dict[int, int]) -> int:
        """A PSS reading of the tree (the sampler's every few seconds, or our own); returns its sum."""
        self._pss = sum(pss_by_pid.values())
        self._rss = {pid: rss[pid] for pid in pss_by_pid if pid in rss}
        self._slack = max(0, sum(self._rss.values()) - self._pss)
        self._at = self._clock()
        return self._pss

    def _read_pss(self, rss: dict[int, int]) -> int:
        self.readings += 1
        pss = {pid: r[1] for pid in rss if (r := self._read(pid)) is not None}
        pss.update({pid: rss[pid] for pid in rss if pid not in pss})  # unreadable: its RSS
        return self.rebase(rss, pss)

    def charged(self, rss: dict[int, int], line: int | None) -> int:
        """The tree's memory now from each process's RSS now; ``line``: the figure the caller acts at."""
        total = sum(rss.values())
        if len(rss) <= 1 or line is None:
            return total
        if self._pss is None:  # never read: the RSS sum bounds it, and is exact enough far below the line
            return self._read_pss(rss) if total > NEAR_SHARE * line else total
        grown = sum(max(0, r - self._rss[pid]) for pid, r in rss.items() if pid in self._rss)
        known = self._pss + grown
        new = sum(r for pid, r in rss.items() if pid not in self._rss)
        since = self._clock() - self._at
        if known + new > NEAR_SHARE * line and since >= PSS_EVERY_SECONDS and (
                new or since >= REFRESH_SECONDS or (known > line and self._slack > SLACK_SHARE * line)):
            return self._read_pss(rss)
        return known


READ_DUTY = 0.02  # of one core: what reading new processes' private memory costs at most, on average
READ_CREDIT_SECONDS = 0.5  # what it may spend at once: a pool of 8 forks of 200 MiB took 67-130 ms to read


class ResidentOnce:
    """The tree's resident memory with the pages its processes share counted once, for every sample.

    The largest process counts its RSS, each other process its private memory (USS): a forked child
    shares its parent's pages until it writes them, and counts only the pages it copied; a child that
    exec'd counts what it holds of its own. One process is its RSS, with no reading. A new process's
    USS is read from ``smaps_rollup`` as it appears (~8 ms for a fork of a 200 MiB process), within
    :data:`READ_DUTY` of a core (a token bucket of measured time), and every process's comes with the
    sampler's USS/PSS every few seconds (:meth:`note`); between, a process counts its USS then plus
    what its RSS grew since (pages a fork copies on writing raise its USS, not its RSS: they count from
    the next of those). A process never read (the credit spent) counts its RSS: an upper bound. Pages
    two smaller processes share that the largest does not map count once per process."""

    def __init__(self, clock: Callable[[], float], read: Callable[[int], int | None] = read_private,
                 timer: Callable[[], float] = time.perf_counter):
        """``clock``: accrues the credit; ``timer``: measures what each reading cost."""
        self._clock, self._read, self._timer = clock, read, timer
        self._private: dict[int, tuple[int, int]] = {}  # pid -> (USS, RSS) when read
        self._credit = READ_CREDIT_SECONDS
        self._at = clock()  # when the credit was last accrued
        self.readings = 0

    def note(self, private: dict[int, tuple[int, int]]) -> None:
        """(USS, RSS) of processes read elsewhere (the sampler's USS/PSS every few seconds): no reading needed."""
        self._private.update(private)

    def total(self, rss: dict[int, int]) -> int:
        """The tree's memory now, from each process's RSS now (pid -> bytes)."""
        self._private = {pid: known for pid, known in self._private.items() if pid in rss}
        if len(rss) <= 1:
            return sum(rss.values())
        largest = max(rss, key=rss.__getitem__)
        others = [pid for pid in rss if pid != largest]
        now = self._clock()
        self._credit = min(READ_CREDIT_SECONDS, self._credit + READ_DUTY * max(0.0, now - self._at))
        self._at = now
        new = [pid for pid in others if pid not in self._private]
        if new and self._credit > 0:
            self._read_new(new, rss)
        return rss[largest] + sum(self._counted(pid, rss[pid]) for pid in others)

    def _read_new(self, pids: list[int], rss: dict[int, int]) -> None:
        started = self._timer()
        for pid in pids:
            uss = self._read(pid)
            self._private[pid] = (rss[pid] if uss is None else uss, rss[pid])  # unreadable: all of its RSS
        self._credit -= self._timer() - started
        self.readings += 1

    def _counted(self, pid: int, rss_now: int) -> int:
        known = self._private.get(pid)
        if known is None:
            return rss_now
        uss, rss_then = known
        return min(rss_now, uss + max(0, rss_now - rss_then))
