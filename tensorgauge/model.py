"""The recorded data: samples, hook events, runs, phases and findings.

Plain dataclasses with ``to_dict``/``from_dict``. Times are seconds since the
run's start unless a name says otherwise; sizes are bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

RUN_SCHEMA = "tensorgauge.run/1"

PHASE_KINDS = ("import", "fit", "epoch", "evaluate", "predict", "save", "load", "custom")


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _from_dict(cls, data: dict[str, Any]):
    """Build ``cls`` from ``data``, ignoring keys this version does not know."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(slots=True)
class GpuReading:
    """One GPU at one instant, as NVML reports it (None: not reported)."""

    index: int
    name: str | None = None
    util_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    job_memory_bytes: int | None = None  # held by the job's own processes (NVML per process)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuReading:
        return _from_dict(cls, data)


@dataclass(slots=True)
class Sample:
    """The job's process tree and the machine at one instant."""

    t: float
    cpu_seconds: float  # cumulative user+system of the tree since it started
    cores_busy: float | None  # tree CPU-seconds per second since the previous sample
    rss_bytes: int
    threads: int
    processes: int
    read_bytes: int | None = None  # cumulative, tree
    write_bytes: int | None = None
    uss_bytes: int | None = None  # read only every few seconds (expensive)
    pss_bytes: int | None = None
    mem_used_bytes: int | None = None  # whole machine
    mem_available_bytes: int | None = None
    cpu_percent: list[float] | None = None  # per CPU the job may run on
    runnable: int | None = None  # threads running or waiting for a CPU, whole machine (once a second)
    gpus: list[GpuReading] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        sample = _from_dict(cls, data)
        sample.gpus = [GpuReading.from_dict(g) for g in data.get("gpus") or []]
        return sample


@dataclass(slots=True)
class Event:
    """A message from the hook inside the job (phase begin/end, steps, facts)."""

    t: float
    pid: int
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunRecord:
    """What the store keeps about one run, apart from its samples and events."""

    run_id: str
    command: list[str]
    started_at: str  # ISO-8601, local time with offset
    name: str | None = None
    cwd: str | None = None
    interval_seconds: float = 0.1
    t0_monotonic: float | None = None  # the run's start on CLOCK_MONOTONIC, to align other logs
    tree_source: str | None = None  # how the process tree was read: "cgroup" or "procfs"
    wall_seconds: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    oom_killed: bool = False
    complete: bool = False
    env: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] | None = None
    cpu_seconds_total: float | None = None  # exact, from the kernel at exit
    rss_max_bytes: int | None = None  # the kernel's peak RSS of the largest process (ru_maxrss)
    samples_taken: int | None = None  # how many samples the monitor took: the store should hold as many
    job_id: str | None = None  # runs of one distributed job share it (see tensorgauge.cluster)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        return _from_dict(cls, data)


@dataclass
class Phase:
    """A span of the job: import, fit, epoch, evaluate, predict, save, load, custom."""

    name: str
    kind: str
    start: float
    end: float
    parent: int | None = None  # index into the run's phase list
    pid: int | None = None
    cpu_seconds: float = 0.0
    cores_busy_mean: float = 0.0
    cores_busy_peak: float = 0.0
    rss_start_bytes: int | None = None
    rss_peak_bytes: int = 0
    rss_end_bytes: int | None = None
    steps: int | None = None
    step_seconds_p50: float | None = None
    step_seconds_p95: float | None = None
    step_seconds_max: float | None = None
    gpu_util_mean: float | None = None
    gpu_util_peak: float | None = None
    gpu_memory_peak_bytes: int | None = None
    complete: bool = True  # False when the job ended inside the phase
    error: str | None = None  # the exception's type when the phase ended by one

    @property
    def wall_seconds(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["wall_seconds"] = self.wall_seconds
        return data


@dataclass
class Finding:
    """A diagnosis with a stable id, its evidence and the fix."""

    id: str
    severity: str  # high | moderate | low | info
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""
    expected_gain: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Summary:
    """Whole-run figures."""

    cpu_seconds: float
    cores_busy_mean: float
    cores_busy_peak: float
    rss_peak_bytes: int
    uss_peak_bytes: int | None
    threads_peak: int
    processes_peak: int
    samples: int
    gpu: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
