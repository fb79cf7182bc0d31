"""Turns source readings into :class:`~tensorgauge.model.Sample` records.

The sampler owns no thread and no storage: the caller (the runner, or
``tensorgauge.monitor``) calls :meth:`Sampler.sample` on its own schedule. Rates
(cores busy, per-CPU utilisation) are computed against the previous call.
Every sample has the tree's CPU, RSS and threads and per-CPU utilisation; I/O
counters and machine memory come once a second (None in between), USS/PSS
every five seconds: together that keeps the monitor under 1% of a core.
"""

from __future__ import annotations

from dataclasses import fields

from tensorgauge.model import Sample
from tensorgauge.sources import Clock, Gpus, MemoryReading, ProcessTree, System, TreeReading

PRIVATE_MEMORY_EVERY_SECONDS = 5.0  # USS/PSS costs ~0.3-11 ms per process
SLOW_EVERY_SECONDS = 1.0  # I/O counters and machine memory: ~100 us, and they change slowly


class Sampler:
    def __init__(self, tree: ProcessTree, system: System, gpus: Gpus, clock: Clock, t0: float,
                 cpu_baseline: float = 0.0):
        """``t0``: the run's start on ``clock``; samples carry ``t`` relative to it.
        ``cpu_baseline``: CPU the tree had used before the run began (in-process runs)."""
        self.tree, self.system, self.gpus, self.clock, self.t0 = tree, system, gpus, clock, t0
        self.cpu_baseline = cpu_baseline
        self._last_cpu: tuple[float, float] | None = None  # (t, tree cpu seconds)
        self._last_per_cpu: list[tuple[float, float]] | None = None
        self._next_private = t0
        self._next_slow = t0
        self.last: Sample | None = None

    def sample(self) -> Sample | None:
        """Read every source once; None when the process tree is gone."""
        now = self.clock.now()
        slow = now >= self._next_slow
        if slow:
            self._next_slow = now + SLOW_EVERY_SECONDS
        tree = self.tree.read(io=slow)
        if tree is None:
            return None
        t = round(now - self.t0, 6)  # microseconds: what a 10 Hz sample can mean, and it stores in 2 bytes
        cpu = round(tree.cpu_seconds - self.cpu_baseline, 6)
        cores_busy = None
        if self._last_cpu is not None and t > self._last_cpu[0]:
            cores_busy = round(max(0.0, (cpu - self._last_cpu[1]) / (t - self._last_cpu[0])), 4)
        self._last_cpu = (t, cpu)

        uss = pss = None
        if now >= self._next_private:
            uss, pss = self.tree.read_private()
            self._next_private = now + PRIVATE_MEMORY_EVERY_SECONDS

        memory = self.system.memory() if slow else None
        sample = Sample(
            **_same_named(tree, exclude=("cpu_seconds",)),
            **_same_named(memory),
            t=t,
            cpu_seconds=cpu,
            cores_busy=cores_busy,
            uss_bytes=uss,
            pss_bytes=pss,
            cpu_percent=self._per_cpu_percent(),
            runnable=self.system.runnable() if slow else None,
            gpus=self.gpus.read(tree.pids),
        )
        self.last = sample
        return sample

    def _per_cpu_percent(self) -> list[float] | None:
        current = self.system.cpu_busy_total()
        previous, self._last_per_cpu = self._last_per_cpu, current
        if current is None or previous is None or len(previous) != len(current):
            return None
        out = []
        for (busy0, total0), (busy1, total1) in zip(previous, current):
            span = total1 - total0
            out.append(round(100.0 * (busy1 - busy0) / span, 1) if span > 0 else 0.0)
        return out


_SAMPLE_FIELDS = frozenset(f.name for f in fields(Sample))


def _same_named(reading: TreeReading | MemoryReading | None, exclude: tuple[str, ...] = ()) -> dict:
    """The fields of a source's reading that a Sample has under the same name (a new
    figure in a reading reaches the sample, the store and bundles with no code here)."""
    if reading is None:
        return {}
    return {name: getattr(reading, name) for name in _shared_names(type(reading)) if name not in exclude}


_SHARED: dict[type, tuple[str, ...]] = {}


def _shared_names(reading_type: type) -> tuple[str, ...]:
    names = _SHARED.get(reading_type)
    if names is None:
        names = _SHARED[reading_type] = tuple(f.name for f in fields(reading_type) if f.name in _SAMPLE_FIELDS)
    return names
