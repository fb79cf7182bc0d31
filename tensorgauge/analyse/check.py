"""``tensorgauge check``: a run against its baseline, with limits, noise-aware, and the causes (pure).

Each check compares one figure of the run with the baseline's: the steady step (median) of each of
the job's own fit/evaluate/predict calls, the run's CPU-seconds and its RSS peak. A check fails
only when the figure is past its limit *and* past the noise of that figure between unchanged runs
(:data:`NOISE`, measured on the 2-core VM: see docs/measurements.md) — for a step, also when the step
distributions separate (the run's lower quartile above the baseline's upper quartile, from the
stored step digests); past the limit but short of that it is ``within noise``, and passes. So is a time measured while other work kept the machine's cores busier
than during the baseline (:data:`BUSIER_CORES`): the run says so. The causes name what changed in the job, the most direct first:
how fit runs (eager, XLA, steps per execution, batch), its input pipeline's stages, the model's
size, the input's share of the step, new findings, then the environment (:mod:`.compare`). A run that
did not complete (:mod:`.ending`: killed, stopped, exited non-zero) fails whatever its figures: they
cover only what ran before it ended.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tensorgauge.analyse.compare import Side, environment_differences
from tensorgauge.analyse.ending import Ending, ending
from tensorgauge.analyse.job_changes import format_change, format_value, input_share_change, job_changes
from tensorgauge.analyse.phases import model_calls
from tensorgauge.model import MEMORY_MEASURES
from tensorgauge.units import format_bytes, format_seconds

# Run-to-run ratios an unchanged job reaches on a noisy 2-core VM, with a margin: below these, a
# difference is not established. Unchanged runs of benchmarks/check_job.py against one baseline: steps
# 0.87-1.25x, the whole run's CPU time (its import included) 0.81-1.16x, RSS 0.99-1.01x (docs/measurements.md).
NOISE = {"step": 1.20, "cpu": 1.20, "memory": 1.05}
# A run during which other work kept this many more cores busy than during the baseline's: its times
# are not comparable (an unchanged job ran 1.4-1.8x slower, and used 1.3-1.45x the CPU, beside a test suite).
BUSIER_CORES = 0.25

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
    counted: str | None = None  # what the figure counts, where a name alone does not say (the RSS peak's measure)

    @property
    def ratio(self) -> float:
        return self.current / self.baseline

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": round(self.ratio, 4)}

    def describe(self) -> str:
        a, b = _figure(self.baseline, self.unit), _figure(self.current, self.unit)
        counted = f" ({self.counted})" if self.counted else ""
        return f"{self.name}{counted}: {a} -> {b} ({format_change(self.ratio)})"


@dataclass
class CheckResult:
    baseline: str
    current: str
    checks: list[Check] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    new_findings: list[dict] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    busier_cores: float | None = None  # other work on the machine during the run, against the baseline's
    not_compared: list[str] = field(default_factory=list)  # figures the two runs measured differently, and why
    ended: Ending = field(default_factory=lambda: Ending(True, "ended"))  # how the run ended
    baseline_ended: Ending = field(default_factory=lambda: Ending(True, "ended"))

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
        return (self.ended.completed and not self.failed
                and not (self.limits.no_new_findings and self.new_findings))

    @property
    def not_completed(self) -> str | None:
        """Why the run fails whatever its figures: 'did not complete: it was killed by ... in 'epoch 2''."""
        return None if self.ended.completed else f"did not complete: it {self.ended.describe()}"

    def to_dict(self) -> dict:
        return {"schema": "tensorgauge.check/1", "baseline": self.baseline, "current": self.current,
                "passed": self.passed, "completed": self.ended.completed, "ending": self.ended.to_dict(),
                "limits": asdict(self.limits), "checks": [c.to_dict() for c in self.checks],
                "causes": self.causes, "new_findings": self.new_findings, "busier_cores": self.busier_cores,
                "not_compared": self.not_compared, "note": self.note}


def _figure(value: float, unit: str) -> str:
    if unit == "bytes":
        return format_bytes(int(value))
    return format_seconds(value) if unit == "s" else f"{value:.2f} {unit}"


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
    if sa.rss_peak_bytes and sb.rss_peak_bytes and sa.rss_peak_measure == sb.rss_peak_measure:
        checks.append(Check("RSS peak", "memory", sa.rss_peak_bytes, sb.rss_peak_bytes, "bytes",
                            1 + limits.max_memory_growth, NOISE["memory"],
                            counted=MEMORY_MEASURES[sa.rss_peak_measure]))
    busier = busier_by(a, b)
    for c in checks:
        if c.ratio > c.limit:
            comparable = c.measure == "memory" or busier is None or busier < BUSIER_CORES
            c.verdict = "fail" if c.ratio > c.noise and comparable and c.separated is not False else "within noise"
    return checks


def not_compared(a: Side, b: Side) -> list[str]:
    """The figures the baseline ``a`` and the run ``b`` measured differently: not checked, and why."""
    sa, sb = a.report.summary, b.report.summary
    if not (sa.rss_peak_bytes and sb.rss_peak_bytes) or sa.rss_peak_measure == sb.rss_peak_measure:
        return []
    return [f"RSS peak: the baseline's counts {MEMORY_MEASURES[sa.rss_peak_measure]}; this run's, "
            f"{MEMORY_MEASURES[sb.rss_peak_measure]} (another tensorgauge version recorded it): save the "
            "baseline again to check memory"]


def busier_by(a: Side, b: Side) -> float | None:
    """How many more cores other work kept busy during run ``b`` than during ``a`` (None: not read)."""
    oa, ob = a.report.summary.other_cores_mean, b.report.summary.other_cores_mean
    return None if oa is None or ob is None else round(ob - oa, 3)


def causes(a: Side, b: Side, new_findings: list[dict]) -> list[str]:
    """What changed in the job between the baseline ``a`` and the run ``b``, most direct first."""
    out = job_changes(a, b)
    share = input_share_change(a, b)
    if share:
        out.append(share)
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
    return CheckResult(a.label, b.label, measure(a, b, limits), causes(a, b, new), new, limits, busier_by(a, b),
                       not_compared(a, b), ending(b.report.record, b.report.phases),
                       ending(a.report.record, a.report.phases))
