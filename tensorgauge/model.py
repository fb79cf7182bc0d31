"""The recorded data: samples, hook events, runs, phases and findings.

Plain dataclasses with ``to_dict``/``from_dict``. Times are seconds since the
run's start unless a name says otherwise; sizes are bytes. The stored records
(:class:`GpuReading`, :class:`Sample`, :class:`Event`, :class:`RunRecord`)
declare each field once, with its kind, unit and source (:func:`declared`):
the store's columns, its row decoding and migrations, and the bundle checks
are all derived from these declarations (see :mod:`tensorgauge.checks`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Literal, TypeVar

from tensorgauge.hook.protocol import P, as_payload, kind_of

RUN_SCHEMA = "tensorgauge.run/1"

Severity = Literal["high", "moderate", "low", "info"]  # a finding's, most severe first
# What a run's sampled memory (``rss_bytes``, so its RSS peaks) counts, and how outputs name it.
MemoryMeasure = Literal["rss_shared_once", "rss_summed"]
MEMORY_MEASURES: dict[str, str] = {"rss_shared_once": "shared pages counted once",
                                   "rss_summed": "each process's RSS summed, shared pages counted again"}
PHASE_KINDS = ("import", "fit", "epoch", "evaluate", "predict", "save", "load", "custom")


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _from_dict(cls, data: dict[str, Any]):
    """Build ``cls`` from ``data``, ignoring keys this version does not know."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return cls(**{k: v for k, v in data.items() if k in names})


class Record:
    """What every stored record has: its dict form and back (keys this version does not know are left out)."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        return _from_dict(cls, data)


R = TypeVar("R", bound=Record)


def declared(kind: str, unit: str | None = None, source: str = "", default: Any = MISSING,
             default_factory: Any = MISSING, item: type | None = None, shown: str | None = None,
             exported: str | None = None) -> Any:
    """A field with its kind (see :data:`tensorgauge.checks.KINDS`; ``?``: may be None),
    its unit, where the figure comes from, and for a list of records the record type. A sampled
    figure ``shown`` (its label) appears in every output (see :func:`shown_metrics`), named
    ``exported`` (default: the field's name) where a name outlives the run (Prometheus, TensorBoard)."""
    metadata = {"kind": kind, "unit": unit, "source": source, "item": item, "shown": shown, "exported": exported}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(slots=True)
class GpuReading(Record):
    """One GPU at one instant, as NVML reports it (None: not reported)."""

    index: int = declared("int", source="NVML device index")
    name: str | None = declared("text?", source="NVML", default=None)
    util_percent: float | None = declared("number?", "%", "NVML, averaged over 1/6 to 1 s", default=None)
    memory_used_bytes: int | None = declared("int?", "bytes", "NVML, all processes", default=None)
    memory_total_bytes: int | None = declared("int?", "bytes", "NVML", default=None)
    power_watts: float | None = declared("number?", "W", "NVML", default=None)
    job_memory_bytes: int | None = declared("int?", "bytes", "NVML per process, summed over the job's tree",
                                            default=None)


@dataclass(slots=True)
class Sample:
    """The job's process tree and the machine at one instant."""

    t: float = declared("number", "s", "monitor clock, from the run's start")
    cpu_seconds: float = declared("number", "s", "tree user+system since the job started")
    cores_busy: float | None = declared("number?", "cores", "tree CPU-seconds per second since the last sample",
                                        shown="cores busy")
    rss_bytes: int = declared("int", "bytes", "tree RSS, pages its processes share counted once", shown="RSS")
    threads: int = declared("int", "threads", source="tree", shown="threads")
    processes: int = declared("int", "processes", source="tree", shown="processes")
    read_bytes: int | None = declared("int?", "bytes", "tree, cumulative, once a second", default=None)
    write_bytes: int | None = declared("int?", "bytes", "tree, cumulative, once a second", default=None)
    open_fds: int | None = declared("int?", "descriptors", "tree's open file descriptors, once a second", default=None,
                                    shown="open file descriptors")
    uss_bytes: int | None = declared("int?", "bytes", "tree, every few seconds (expensive)", default=None)
    pss_bytes: int | None = declared("int?", "bytes", "tree, every few seconds (expensive)", default=None)
    mem_used_bytes: int | None = declared("int?", "bytes", "whole machine, once a second", default=None,
                                          shown="machine memory used", exported="machine_memory_used_bytes")
    mem_available_bytes: int | None = declared("int?", "bytes", "whole machine, once a second", default=None)
    swap_used_bytes: int | None = declared("int?", "bytes", "whole machine's swap in use, once a second",
                                           default=None, shown="machine swap used", exported="machine_swap_used_bytes")
    cpu_percent: list[float] | None = declared("numbers?", "%", "per CPU the job may run on", default=None)
    runnable: int | None = declared("int?", "threads", "running or waiting for a CPU, whole machine, once a second",
                                    default=None, shown="runnable threads on the machine",
                                    exported="machine_runnable_threads")
    gpus: list[GpuReading] = declared("records", source="NVML", default_factory=list, item=GpuReading)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        sample = _from_dict(cls, data)
        sample.gpus = [GpuReading.from_dict(g) for g in data.get("gpus") or []]
        return sample


@dataclass(frozen=True)
class Metric:
    """A sampled figure every output shows: the :class:`Sample` field, its label and unit, and the
    name it is exported under."""

    name: str
    label: str
    unit: str | None
    exported: str


def shown_metrics() -> tuple[Metric, ...]:
    """The :class:`Sample` fields declared ``shown``, in their order: ``show``, the report, Prometheus,
    TensorBoard and the live view each show all of them (a new one needs no change there)."""
    return tuple(Metric(f.name, f.metadata["shown"], f.metadata["unit"], f.metadata["exported"] or f.name)
                 for f in fields(Sample) if f.metadata.get("shown"))


@dataclass(slots=True)
class Event(Record):
    """A message from the hook inside the job (phase begin/end, steps, facts):
    ``data`` is the payload :mod:`tensorgauge.hook.protocol` declares for ``kind``."""

    t: float = declared("number", "s", "the job's monotonic clock, from the run's start")
    pid: int = declared("int", source="the writing process")
    kind: str = declared("text", source="tensorgauge.hook.protocol.Kind")
    data: dict[str, Any] = declared("object", source="tensorgauge.hook.protocol.PAYLOADS", default_factory=dict)

    def read(self, payload: type[P]) -> P:
        """``data`` read as ``payload``, the TypedDict :mod:`~tensorgauge.hook.protocol` declares for this
        event's kind: its keys are checked by the type checker, so a field is named in one place."""
        return as_payload(self.data, payload)


def payloads(events: Iterable[Event], payload: type[P]) -> list[P]:
    """The data of each of ``events`` whose kind declares ``payload``, in order, typed as it."""
    kind = kind_of(payload)
    return [as_payload(e.data, payload) for e in events if e.kind == kind]


@dataclass
class RunRecord(Record):
    """What the store keeps about one run, apart from its samples and events."""

    run_id: str = declared("text", source="monitor")
    command: list[str] = declared("texts", source="the command line")
    started_at: str = declared("text", "ISO-8601", "local time with offset")
    name: str | None = declared("text?", source="--name", default=None)
    cwd: str | None = declared("text?", source="monitor", default=None)
    interval_seconds: float = declared("number", "s", "--interval", default=0.1)
    t0_monotonic: float | None = declared("number?", "s", "the run's start on CLOCK_MONOTONIC, to align other logs",
                                          default=None)
    tree_source: str | None = declared("text?", source='how the tree was read: "cgroup" or "procfs"', default=None)
    wall_seconds: float | None = declared("number?", "s", "monitor", default=None)
    exit_code: int | None = declared("int?", source="the job", default=None)
    signal: int | None = declared("int?", source="the signal that ended the job", default=None)
    oom_killed: bool = declared("bool", source="cgroup OOM counter", default=False)
    complete: bool = declared("bool", source="the monitor saw the end", default=False)
    env: dict[str, Any] = declared("object", source="fingerprint: ENV_PARTS", default_factory=dict)
    budget: dict[str, Any] | None = declared("object?", source="BUDGET_FIELDS", default=None)
    cpu_seconds_total: float | None = declared("number?", "s", "exact, from the kernel at exit", default=None)
    rss_max_bytes: int | None = declared("int?", "bytes", "ru_maxrss of the largest waited-for process; the fork "
                                         "carries the monitor's memory until exec, so it is no RSS peak of the job",
                                         default=None)
    samples_taken: int | None = declared("int?", "samples", "the monitor: the store should hold as many",
                                         default=None)
    samples_lost: int | None = declared("int?", "samples", "taken but never stored (the store failed)",
                                        default=None)
    recording_error: str | None = declared("text?", source="why recording stopped early or lost data",
                                           default=None)
    job_id: str | None = declared("text?", source="runs of one distributed job share it (sources.cluster)",
                                  default=None)
    events_skipped: int | None = declared("int?", "events", "lines from the job that were not valid events",
                                          default=None)
    events_dropped: int | None = declared("int?", "events", "valid events from the job not kept: past the most "
                                          "a run keeps, or still unread when the run ended", default=None)
    diagnosis: str | None = declared("text?", source="the input A/B's setting: 'auto', 'always' (--diagnose), "
                                     "'off' (--no-diagnose), 'in-process' (tensorgauge.monitor(), %%tensorgauge: "
                                     "not run)", default=None)
    parent_run_id: str | None = declared("text?", source="the run this one is a trial of, listed under it by "
                                         "'runs': --try-fixes' first run, or a pytest --tensorgauge session's "
                                         "first test", default=None)
    memory_measure: MemoryMeasure | None = declared("text?", source="what the samples' rss_bytes counts "
                                                    "(MEMORY_MEASURES); null: recorded before it was kept, "
                                                    "each process's RSS summed", default=None)
    exports: dict[str, Any] | None = declared("object?", "exports", "what each exporter that counts its losses "
                                              "(--otlp) lost, as it closed after the run: {name: {\"dropped\": n}}; "
                                              "null: none ran", default=None)


# The parts of RunRecord.env and RunRecord.budget that tensorgauge reads (other keys are kept, never read).
HOST_FIELDS = {"hostname": "text?", "cpu_model": "text?", "cpu_flags": "texts?", "cores_logical": "int?",
               "cores_physical": "int?", "cpus_allowed": "ints?", "cgroup_cpu_quota_cores": "number?",
               "cores_allowed": "number?", "ram_bytes": "int?", "cgroup_memory_limit_bytes": "int?",
               "os": "text?", "os_release": "text?", "kernel": "text?", "machine": "text?",
               "nvidia_driver": "text?", "monitor_python": "text?", "env_vars": "text_map?", "gpus": "texts?"}
JOB_FIELDS = {"python": "text?", "executable": "text?", "thread_env": "text_map?", "affinity_cpus": "int?",
              "numpy_version": "text?", "blas": "objects?", "tensorflow_version": "text?", "tf_build": "object?",
              "onednn_enabled": "bool?", "devices_physical": "texts?", "gpus_visible": "int?",
              "intra_op_threads": "int?", "inter_op_threads": "int?", "keras_version": "text?",
              "keras_backend": "text?", "backend_version": "text?", "backend_devices": "texts?",
              "backend_gpus": "int?", "backend_cuda": "text?"}
WORKER_FIELDS = {"task_type": "text?", "task_index": "int?", "worker": "text?", "cluster": "object?"}
ENV_PARTS = {"host": HOST_FIELDS, "job": JOB_FIELDS, "worker": WORKER_FIELDS}
BUDGET_FIELDS = {"max_memory_bytes": "int?", "max_cpus": "number?", "max_gpu_memory_bytes": "int?",
                 "soft_memory_bytes": "int?", "stopped": "bool?", "reason": "text?", "checkpoint": "text?",
                 "graceful": "bool?", "peak_bytes": "int?", "peak_t": "number?", "stop_requested_at": "number?",
                 "enforced_by": "texts?", "gpu_memory_limit": "object?", "gpu_memory_peak_bytes": "int?",
                 "cores_busy_mean": "number?", "killed_at": "number?", "memory_counted": "text?",
                 "left_cgroup": "object?"}
GPU_LIMIT_FIELDS = {"gpus": "int?", "error": "text?"}


@dataclass(slots=True)
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
    step_seconds_p25: float | None = None  # the quartiles: where the steps' distribution lies (tensorgauge check)
    step_seconds_p75: float | None = None
    step_seconds_max: float | None = None
    step_seconds_first: float | None = None  # the first step: it traces and compiles (or builds) the step
    gpu_util_mean: float | None = None
    gpu_util_peak: float | None = None
    gpu_memory_peak_bytes: int | None = None  # the GPUs' memory used (every process's)
    gpu_job_memory_peak_bytes: int | None = None  # of that, the job's own processes' (NVML's per-process figure)
    complete: bool = True  # False when its end is not recorded: the job ended inside it, or (end_dropped) maybe not
    end_dropped: bool = False  # its end may be among the job's events that were dropped: not said to be the job's end
    error: str | None = None  # the exception's type when the phase ended by one
    memory_breakdown: dict[str, Any] | None = None  # at its RSS peak (see tensorgauge.analyse.memory_breakdown)

    @property
    def wall_seconds(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        # asdict's recursive deep copy took most of a run's end with tens of thousands of phases; every field
        # but the breakdown is a scalar
        data = {name: getattr(self, name) for name in _PHASE_FIELDS}
        if self.memory_breakdown is not None:
            data["memory_breakdown"] = copy.deepcopy(self.memory_breakdown)
        data["wall_seconds"] = self.wall_seconds
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Phase:
        return _from_dict(cls, data)


_PHASE_FIELDS = tuple(f.name for f in fields(Phase))


@dataclass
class Finding:
    """A diagnosis with a stable id, its evidence and the fix."""

    id: str
    severity: Severity
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
    other_cores_mean: float | None = None  # cores busy with other work on the CPUs the job may use, on average
    rss_peak_measure: MemoryMeasure = "rss_shared_once"  # what rss_peak_bytes counts (MEMORY_MEASURES)
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)  # per shown metric: mean, peak

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
