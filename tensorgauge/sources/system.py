"""CPU utilisation of the CPUs the job may use, and the machine's memory."""

from __future__ import annotations

import os

import psutil

from tensorgauge.sources import MemoryReading


class PsutilSystem:
    def __init__(self, cpus: list[int] | None = None):
        """``cpus``: indices of the CPUs to report (default: this process's affinity)."""
        if cpus is None:
            try:
                cpus = sorted(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cpus = list(range(psutil.cpu_count() or 1))
        self.cpus = cpus

    def cpu_busy_total(self) -> list[tuple[float, float]] | None:
        try:
            per_cpu = psutil.cpu_times(percpu=True)
        except (OSError, psutil.Error):
            return None
        out = []
        for index in self.cpus:
            if index >= len(per_cpu):
                continue
            t = per_cpu[index]
            idle = t.idle + getattr(t, "iowait", 0.0)
            total = sum(t)
            # guest time is already inside user on Linux
            total -= getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)
            out.append((total - idle, total))
        return out

    def memory(self) -> MemoryReading | None:
        try:
            vm = psutil.virtual_memory()
        except (OSError, psutil.Error):
            return None
        try:
            swap = psutil.swap_memory().used
        except (OSError, psutil.Error):
            swap = None
        return MemoryReading(mem_used_bytes=vm.total - vm.available, mem_available_bytes=vm.available,
                             mem_total_bytes=vm.total, swap_used_bytes=swap)

    def runnable(self, path: str = "/proc/loadavg") -> int | None:
        """The kernel's count of runnable threads (4th field of /proc/loadavg: R/total)."""
        try:
            with open(path) as f:
                return int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
