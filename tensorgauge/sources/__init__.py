"""Sources: the only code that reads the OS, NVML or TensorFlow internals.

Each source is a small Protocol with one real implementation here and a fake
in :mod:`tensorgauge.testing`. A reading that cannot be taken is ``None``;
sources never raise inside the sampling loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tensorgauge.model import GpuReading


@dataclass
class TreeReading:
    """The job's process tree at one instant (cumulative counters). A field named like a
    :class:`~tensorgauge.model.Sample` field lands in it as it is (see the sampler)."""

    cpu_seconds: float
    rss_bytes: int  # shared pages counted once (see process_tree)
    threads: int
    processes: int
    read_bytes: int | None = None
    write_bytes: int | None = None
    open_fds: int | None = None  # read with the I/O counters
    pids: tuple[int, ...] = ()  # the tree's processes (to find the job's share of each GPU)


@dataclass
class MemoryReading:
    """The machine, read once a second; fields named like Sample fields land in it as they are."""

    mem_used_bytes: int
    mem_available_bytes: int
    mem_total_bytes: int
    swap_used_bytes: int | None = None


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic, system-wide clock (comparable across processes)."""


class ProcessTree(Protocol):
    def read(self, io: bool = True) -> TreeReading | None:
        """Cumulative CPU, RSS, threads (and I/O when ``io``) of the tree; None once it is gone."""

    def read_private(self) -> tuple[int | None, int | None]:
        """(USS, PSS) of the tree: expensive, called every few seconds."""


class System(Protocol):
    def cpu_busy_total(self) -> list[tuple[float, float]] | None:
        """(busy, total) cumulative seconds for each CPU the job may run on."""

    def memory(self) -> MemoryReading | None:
        """Memory of the whole machine."""

    def runnable(self) -> int | None:
        """Threads running or ready to run on the whole machine."""


class Gpus(Protocol):
    @property
    def names(self) -> list[str]:
        """The GPUs' model names, in NVML's index order ([] without a driver)."""

    def read(self, pids: tuple[int, ...] = ()) -> list[GpuReading]:
        """One reading per GPU; an empty list where there is no NVIDIA driver."""

    def close(self) -> None: ...
