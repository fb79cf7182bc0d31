"""``tensorgauge check``: a run against its baseline, with limits, noise-aware, and the causes (pure).

Each check compares one figure of the run with the baseline's: the steady step (median) of each of
the job's own fit/evaluate/predict calls, the run's CPU-seconds and its RSS peak. A check fails
only when the figure is past its limit *and* past the noise of that figure between unchanged runs
(:data:`NOISE`, measured on the 2-core VM: see docs/measurements.md) — for a step, also when the step
distributions separate (the run's lower quartile above the baseline's upper quartile, from the
stored step digests); past the limit but short of that it is ``within noise``, and passes. So is a time measured while other work kept the machine's cores busier
than during the baseline (:data:`BUSIER_CORES`): the run says so. The causes name what changed in the job, the most direct first:
how fit runs (eager, XLA, steps per execution, batch), its input pipeline's stages, the model's
size, the input's share of the step, new findings, then the environment (:mod:`.compare`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from tensorgauge.analyse.compare import Side, environment_differences, format_value
from tensorgauge.analyse.phases import model_calls
from tensorgauge.hook.protocol import Kind
from tensorgauge.units import format_bytes, format_seconds

# Run-to-run ratios an unchanged job reaches on a noisy 2-core VM, with a margin: below these, a
# difference is not established. Unchanged runs of benchmarks/check_job.py against one baseline: steps
# 0.87-1.25x, the whole run's CPU time (its import included) 0.81-1.16x, RSS 0.99-1.01x (docs/measurements.md).
NOISE = {"step": 1.20, "cpu": 1.20, "memory": 1.05}
# A run during which other work kept this many more cores busy than during the baseline's: its times
# are not comparable (an unchanged job ran 1.4-1.8x slower, and used 1.3-1.45x the CPU, beside a test suite).
BUSIER_CORES = 0.25
CONFIG = (("run_eagerly", "fit runs eagerly (run_eagerly)"), ("functions_run_eagerly",
                                                               "tf.functions run eagerly"),
          ("jit_compile", "XLA (jit_compile)"), ("steps_per_execution", "steps_per_execution"),
          ("batch_size", "batch size"), ("intra_op_threads", "TensorFlow intra-op threads"),
          ("inter_op_threads", "TensorFlow inter-op threads"), ("backend", "Keras backend"))


@dataclass
class Limits:
    max_slower: float = 0.10  # a step or the run's CPU time this much longer fails
    max_memory_growth: float = 0.10
    no_new_findings: bool = False


@dataclass
class Check:
    name: str
    measure: str  # "step", "cpu" or "memory"
    baseline: float
    current: float
    unit: str  # "s", "CPU-s", "bytes"
    limit: float  # the ratio allowed
    noise: float  # the ratio unchanged runs reach
    verdict: str = "pass"  # "pass", "within noise", "fail"
    separated: bool | None = None  # steps: the run's lower quartile above the baseline's upper one (None: not known)

    @property
    def ratio(self) -> float:
        return self.current / self.baseline

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": round(self.ratio, 4)}

    def describe(self) -> str:
        a, b = _figure(self.baseline, self.unit), _figure(self.current, self.unit)
        return f"{self.name}: {a} -> {b} ({_change(self.ratio)})"


@dataclass
class CheckResult:
    baseline: str
    current: str
    checks: list[Check] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    new_findings: list[dict] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    busier_cores: float | None = None  # other work on the machine during the run, against the baseline's

    @property
    def note(self) -> str | None:
        """Why a time past its limit is not established, when the machine is the reason."""
        if self.busier_cores is not None and self.busier_cores >= BUSIER_CORES and any(
                c.verdict == "within noise" and c.measure != "memory" for c in self.checks):
            return (f"the machine was busier during this run ({self.busier_cores:+.2f} cores of other work than "
                    "during the baseline): its times are not comparable; run it again on a quiet machine")
        return None

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "fail"]

    @property
    def passed(self) -> bool:
        return not self.failed and not (self.limits.no_new_findings and self.new_findings)

    def to_dict(self) -> dict:
        return {"schema": "tensorgauge.check/1", "baseline": self.baseline, "current": self.current,
                "passed": self.passed, "limits": asdict(self.limits), "checks": [c.to_dict() for c in self.checks],
                "causes": self.causes, "new_findings": self.new_findings, "busier_cores": self.busier_cores,
                "note": self.note}


def _figure(value: float, unit: str) -> str:
    if unit == "bytes":
        return format_bytes(int(value))
    return format_seconds(value) if unit == "s" else f"{value:.2f} {unit}"


def _change(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.0f}%"


def _calls(side: Side) -> dict[str, Any]:
    """The job's own fit/evaluate/predict calls with steps, by name (the first of each)."""
    out: dict[str, Any] = {}
    for p in model_calls(side.report.phases, ("fit", "evaluate", "predict")):
        if p.step_seconds_p50 and p.name not in out:
            out[p.name] = p
    return out


def measure(a: Side, b: Side, limits: Limits) -> list[Check]:
    checks = []
    calls_a, calls_b = _calls(a), _calls(b)
    for name, p in calls_a.items():
        q = calls_b.get(name)
        if q is not None:
            check_ = Check(f"{name} step p50", "step", p.step_seconds_p50, q.step_seconds_p50, "s",
                           1 + limits.max_slower, NOISE["step"])
            if p.step_seconds_p75 and q.step_seconds_p25:  # the step distributions (the digests' quartiles)
                check_.separated = q.step_seconds_p25 > p.step_seconds_p75
            checks.append(check_)
    sa, sb = a.report.summary, b.report.summary
    if sa.cpu_seconds > 0 and sb.cpu_seconds > 0:
        checks.append(Check("CPU time", "cpu", sa.cpu_seconds, sb.cpu_seconds, "CPU-s", 1 + limits.max_slower,
                            NOISE["cpu"]))
    if sa.rss_peak_bytes and sb.rss_peak_bytes:
        checks.append(Check("RSS peak", "memory", sa.rss_peak_bytes, sb.rss_peak_bytes, "bytes",
                            1 + limits.max_memory_growth, NOISE["memory"]))
    busier = busier_by(a, b)
    for c in checks:
        if c.ratio > c.limit:
            comparable = c.measure == "memory" or busier is None or busier < BUSIER_CORES
            c.verdict = "fail" if c.ratio > c.noise and comparable and c.separated is not False else "within noise"
    return checks


def busier_by(a: Side, b: Side) -> float | None:
    """How many more cores other work kept busy during run ``b`` than during ``a`` (None: not read)."""
    oa, ob = a.report.summary.other_cores_mean, b.report.summary.other_cores_mean
    return None if oa is None or ob is None else round(ob - oa, 3)


def _fit_config(side: Side) -> dict:
    return next((e.data for e in side.report.events if e.kind == Kind.FIT_CONFIG and not e.data.get("loop")),
                None) or next((e.data for e in side.report.events if e.kind == Kind.FIT_CONFIG), {})


def _weights(side: Side) -> int | None:
    found = [e.data.get("weights_bytes") for e in side.report.events
             if e.kind == Kind.MEMORY_FACTS and e.data.get("weights_bytes")]
    return found[-1] if found else None


def _input_share(side: Side) -> float | None:
    split = side.report.input_split or {}
    return split.get("input_share") if split.get("measured") else None


STAGE_NAMES = {"_PrefetchDataset": "prefetch", "_ParallelMapDataset": "map(num_parallel_calls)",
               "_MapDataset": "map", "_CacheDataset": "cache", "_ShuffleDataset": "shuffle",
               "_BatchDataset": "batch", "_ParallelBatchDataset": "batch(num_parallel_calls)"}


def _stages(config: dict) -> list[str]:
    return [STAGE_NAMES.get(s, s.strip("_").removesuffix("Dataset").lower()) for s in config.get("dataset_stages")
            or []]


def _stage_change(sa: list[str], sb: list[str]) -> str:
    """'map(num_parallel_calls) -> map', 'prefetch removed', 'cache added' (stages outermost first)."""
    if len(sa) == len(sb):
        return "; ".join(f"{x} -> {y}" for x, y in zip(sa, sb) if x != y)
    removed, added = [s for s in sa if s not in sb], [s for s in sb if s not in sa]
    return "; ".join(x for x in (f"{', '.join(removed)} removed" if removed else "",
                                 f"{', '.join(added)} added" if added else "") if x) or "reordered"


def causes(a: Side, b: Side, new_findings: list[dict]) -> list[str]:
    """What changed in the job between the baseline ``a`` and the run ``b``, most direct first."""
    out = []
    ca, cb = _fit_config(a), _fit_config(b)
    for key, label in CONFIG:
        if key in ca and key in cb and ca[key] != cb[key] and not (ca[key] is None or cb[key] is None):
            out.append(f"{label}: {format_value(ca[key])} -> {format_value(cb[key])}")
    sa, sb = _stages(ca), _stages(cb)
    if sa and sb and sa != sb:
        out.append(f"the input pipeline changed ({_stage_change(sa, sb)}): {' <- '.join(sa)} -> {' <- '.join(sb)}")
    wa, wb = _weights(a), _weights(b)
    if wa and wb and abs(math.log(wb / wa)) >= math.log(1.05):
        out.append(f"the model's weights: {format_bytes(wa)} -> {format_bytes(wb)} ({_change(wb / wa)}): "
                   "more compute and memory per step")
    ia, ib = _input_share(a), _input_share(b)
    if ia is not None and ib is not None and abs(ib - ia) >= 0.10:
        out.append(f"the input's share of fit's step: {ia:.0%} -> {ib:.0%} (measured by the A/B)")
    for finding in new_findings:
        out.append(f"new finding {finding['id']}: {finding['title']}")
    for diff in environment_differences(a, b):
        out.append(f"{diff['label']}: {format_value(diff['a'])} -> {format_value(diff['b'])}")
    return out


def check(a: Side, b: Side, limits: Limits | None = None) -> CheckResult:
    """The run ``b`` against the baseline ``a``."""
    limits = limits or Limits()
    seen = {f.id for f in a.report.findings}
    new = [{"id": f.id, "severity": f.severity, "title": f.title} for f in b.report.findings if f.id not in seen]
    return CheckResult(a.label, b.label, measure(a, b, limits), causes(a, b, new), new, limits, busier_by(a, b))
