"""Cores the machine's other processes keep busy over a span of the job: the machine's busy CPU time
(``/proc/stat``) less the job's own (its process and the processes it started: data-loading workers
are the job's), over the wall time. The input A/B reads it around
each block of real and of compute-only steps: a neighbour that comes and goes between the two falls on
one side only, and its round says nothing about the job's input. Standard library only (it runs in the
job); None where ``/proc/stat`` cannot be read."""

from __future__ import annotations

import os
import time

_IDLE_FIELDS = (3, 4)  # idle, iowait (of user nice system idle iowait irq softirq steal ...)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Both counts are in ticks (10 ms): over a shorter span than this, one tick more or fewer on either side
# reads as 0.2 cores or more (the input A/B's excursions of 2-4 steps of 4 ms read 0.65 cores "disturbed").
MIN_SPAN_SECONDS = 10 / _TICKS


def _machine_busy_seconds() -> float | None:
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()[1:9]
    except OSError:
        return None
    ticks = [int(f) for f in fields]
    steal = ticks[7] if len(ticks) > 7 else 0  # the hypervisor's, not a process's here
    return (sum(ticks) - sum(ticks[i] for i in _IDLE_FIELDS) - steal) / _TICKS


def _children(pid: int | str) -> list[str]:
    """The live child processes of ``pid`` (any of its threads' children)."""
    found: list[str] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as listed:
                    found += listed.read().split()
            except OSError:
                continue
    except OSError:
        pass
    return found


def _tree_cpu_seconds(pid: int | str, depth: int = 0) -> float:
    """CPU seconds of ``pid``'s descendants (live ones: ``/proc/PID/stat``'s utime and stime)."""
    total = 0.0
    for child in _children(pid) if depth < 4 else []:
        try:
            with open(f"/proc/{child}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS + _tree_cpu_seconds(child, depth + 1)
        except (OSError, IndexError, ValueError):  # it ended meanwhile
            continue
    return total


Mark = tuple[float, float, float]  # (wall, machine busy CPU seconds, the job's CPU seconds): see mark()


def mark() -> Mark | None:
    """(wall, machine busy CPU seconds, the job's CPU seconds) now; None without ``/proc/stat``."""
    busy = _machine_busy_seconds()
    if busy is None:
        return None
    own = os.times()
    return time.monotonic(), busy, own.user + own.system + _tree_cpu_seconds(os.getpid())


def other_cores(begin: Mark | None, end: Mark | None) -> float | None:
    """Cores the other processes kept busy between two :func:`mark` readings (None where either is, or
    where they are less than :data:`MIN_SPAN_SECONDS` apart)."""
    if begin is None or end is None or end[0] - begin[0] < MIN_SPAN_SECONDS:
        return None
    return round(max(0.0, (end[1] - begin[1]) - (end[2] - begin[2])) / (end[0] - begin[0]), 3)
