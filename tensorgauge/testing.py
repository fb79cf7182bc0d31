"""Fakes for the sources, shipped so users' and our own tests can drive the
monitor, sampler, store and analysis exactly: a clock, a process tree, a
system, GPUs and NVML, and :func:`FakeSources` to hand them all to a
:class:`~tensorgauge.monitoring.monitor.Monitor`, ``run`` or ``monitor()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from tensorgauge.model import GpuReading
from tensorgauge.sources import MemoryReading, TreeReading


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class FakeProcessTree:
    """Returns the queued readings in turn; None once they run out (tree gone)."""

    readings: list[TreeReading | None] = field(default_factory=list)
    private: tuple[int | None, int | None] = (None, None)
    private_calls: int = 0

    io_requests: list[bool] = field(default_factory=list)
    between: list[int] = field(default_factory=list)  # RSS read between samples (rss_now), in turn
    last_rss: int | None = None

    def read(self, io: bool = True) -> TreeReading | None:
        self.io_requests.append(io)
        reading = self.readings.pop(0) if self.readings else None
        self.last_rss = reading.rss_bytes if reading else None
        return reading

    def rss_now(self) -> int | None:
        return self.between.pop(0) if self.between else self.last_rss

    def read_private(self):
        self.private_calls += 1
        return self.private


@dataclass
class FakeSystem:
    """Per-CPU (busy, total) cumulative seconds in turn, and a fixed memory reading."""

    per_cpu: list[list[tuple[float, float]] | None] = field(default_factory=list)
    mem: MemoryReading | None = None

    def cpu_busy_total(self):
        return self.per_cpu.pop(0) if self.per_cpu else None

    running: int | None = None

    def memory(self):
        return self.mem

    def runnable(self):
        return self.running


class NVMLError(Exception):
    pass


class FakeNvml:
    """Stands in for the ``pynvml`` module: ``gpus`` is a list of dicts with
    util, used, total, power_mw and processes, a list of (pid, bytes held or
    None) (a field left out or None: the call raises, as NotSupported does)."""

    def __init__(self, gpus: list[dict] | None = None, driver: bool = True):
        self.gpus = gpus or []
        self.driver = driver
        self.shutdown_called = False

    def nvmlInit(self):
        if not self.driver:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _get(self, handle, key):
        value = self.gpus[handle].get(key)
        if value is None:
            raise NVMLError("Not Supported")
        return value

    def nvmlDeviceGetName(self, handle):
        return self._get(handle, "name")

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self._get(handle, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = self._get(handle, "used")
        return SimpleNamespace(used=used, total=self.gpus[handle].get("total", used), free=0)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._get(handle, "power_mw")

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._get(handle, "processes")]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        self._get(handle, "processes")
        return []


@dataclass
class FakeGpus:
    """Returns the queued readings per call (the last one again once they run out)."""

    readings: list[list[GpuReading]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    closed: bool = False

    def read(self, pids: tuple[int, ...] = ()) -> list[GpuReading]:
        if len(self.readings) > 1:
            return self.readings.pop(0)
        return list(self.readings[0]) if self.readings else []

    def close(self) -> None:
        self.closed = True


def FakeSources(clock: FakeClock | None = None, tree: FakeProcessTree | None = None,
                system: FakeSystem | None = None, gpus: FakeGpus | None = None, host: dict | None = None):
    """:class:`~tensorgauge.monitoring.monitor.Sources` made of fakes (each may be given)."""
    from tensorgauge.monitoring.monitor import Sources

    fake_tree = tree or FakeProcessTree()
    fake_gpus = gpus or FakeGpus()
    return Sources(clock=clock or FakeClock(), system=system or FakeSystem(),
                   open_gpus=lambda: fake_gpus, make_cgroup=lambda run_id, allowed: None,
                   watch_tree=lambda pid, run_id, group: (fake_tree, None),
                   host=lambda: dict(host or {"hostname": "fake", "cores_allowed": 2.0}))


@dataclass
class InMemoryExporter:
    """An :class:`~tensorgauge.monitoring.monitor.Exporter` that keeps what it is shown, for tests (the
    OpenTelemetry SDK's ``InMemoryMetricReader``, here): ``tensorgauge.monitor(exporters=[exporter])``
    or ``run(..., observers=[exporter])``, then read ``record``, ``samples``, ``events``, ``report``."""

    record: object = None  # the RunRecord it was started with
    samples: list = field(default_factory=list)
    events: list = field(default_factory=list)
    report: dict | None = None  # the analysed run (tensorgauge.run/1), where the caller concludes it
    closed_with: tuple[float | None] | None = None  # (timeout,) once closed
    dropped: int = 0

    def start(self, record) -> None:
        self.record = record

    def observe(self, sample, events) -> None:
        if sample is not None:
            self.samples.append(sample)
        self.events.extend(events)

    def conclude(self, report: dict) -> None:
        self.report = report

    def close(self, timeout: float | None = None) -> None:
        self.closed_with = (timeout,)
