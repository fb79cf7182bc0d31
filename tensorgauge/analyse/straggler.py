"""The workers of one distributed job side by side, and which one the others wait for
(pure: from each worker's analysed run).

In synchronous training (MultiWorkerMirroredStrategy) every worker steps at the
pace of the slowest, so step times alone cannot name it. The profiler window of
``--diagnose`` can: a worker waiting for the others spends that time inside the
all-reduce ops, so the straggler is the one with the least all-reduce time per
step, and the others' excess over it is what they wait for it. Its cause is
what it does more of than the others: producing input (tf.data), on fewer
CPUs, on other hardware, or computing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorgauge.hook.protocol import InputProbe
from tensorgauge.model import Event, Finding, Phase, RunRecord, payloads

WAIT_MIN_SECONDS = 0.002  # per step: less than this between workers is noise
WAIT_MIN_SHARE = 0.10  # ... or than this share of the step


@dataclass
class WorkerRow:
    worker: str
    run_id: str
    hostname: str | None
    fit_seconds: float | None
    steps: int | None
    step_seconds_p50: float | None
    cores_busy_mean: float | None
    cores_allowed: float | None
    cpu_model: str | None
    allreduce_seconds_per_step: float | None  # from the --diagnose window
    input_work_seconds_per_step: float | None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def worker_row(report) -> WorkerRow:
    """The worker's line, from its analysed run (a :class:`~tensorgauge.analyse.run_report.RunReport`)."""
    return worker_row_of(report.record, report.phases, report.events)


def worker_row_of(record: RunRecord, phases: list[Phase], events: list[Event]) -> WorkerRow:
    """The worker's line from what it needs of the run: its record, its phases (the longest fit) and its
    ``input_probe`` events (any others are passed over)."""
    host = record.env.get("host") or {}
    worker = (record.env.get("worker") or {}).get("worker") or record.name or record.run_id
    fits = [p for p in phases if p.kind == "fit"]
    fit = max(fits, key=lambda p: p.wall_seconds) if fits else None
    probe = next((p for p in payloads(events, InputProbe) if p.get("step_seconds")), None)
    steps = len(probe.get("step_seconds") or []) if probe else 0
    totals: Mapping[str, Any] = probe or {}  # read by the name of a total

    def per_step(key: str) -> float | None:
        value = totals.get(key)
        return round(value / steps, 6) if isinstance(value, (int, float)) and steps else None

    return WorkerRow(worker=str(worker), run_id=record.run_id, hostname=host.get("hostname"),
                     fit_seconds=round(fit.wall_seconds, 3) if fit else None, steps=fit.steps if fit else None,
                     step_seconds_p50=fit.step_seconds_p50 if fit else None,
                     cores_busy_mean=round(fit.cores_busy_mean, 2) if fit else None,
                     cores_allowed=host.get("cores_allowed"), cpu_model=host.get("cpu_model"),
                     allreduce_seconds_per_step=per_step("collective_seconds"),
                     input_work_seconds_per_step=per_step("input_work_seconds"))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def straggler(rows: list[WorkerRow]) -> Finding | None:
    """The worker the others wait for, its measured cause, and how long the others wait."""
    allreduce = {r.worker: r.allreduce_seconds_per_step for r in rows if r.allreduce_seconds_per_step is not None}
    measured = [r for r in rows if r.worker in allreduce]
    if len(rows) < 2 or len(measured) < len(rows):
        return None
    slow = min(measured, key=lambda r: allreduce[r.worker])
    others = [r for r in measured if r is not slow]
    waits = {r.worker: allreduce[r.worker] - allreduce[slow.worker] for r in others}
    wait = statistics.median(waits.values())
    step = slow.step_seconds_p50 or max(wait, 1e-9)
    if wait < max(WAIT_MIN_SECONDS, WAIT_MIN_SHARE * step):
        return None
    causes: list[str] = []
    evidence: dict[str, object] = {"others_wait_seconds_per_step": {k: round(v, 6) for k, v in waits.items()},
                            "step_seconds_p50": slow.step_seconds_p50}
    input_others = [r.input_work_seconds_per_step or 0.0 for r in others]
    extra_input = (slow.input_work_seconds_per_step or 0.0) - statistics.median(input_others)
    if extra_input >= 0.5 * wait:
        causes.append(f"input: its tf.data pipeline works {_ms(slow.input_work_seconds_per_step or 0.0)} a step, the others "
                      f"{_ms(statistics.median(input_others))}")
        evidence["input_work_seconds_per_step"] = {r.worker: r.input_work_seconds_per_step for r in measured}
    cores = [r.cores_allowed for r in others if r.cores_allowed]
    if slow.cores_allowed and cores and slow.cores_allowed < min(cores):
        causes.append(f"CPU quota: it may use {slow.cores_allowed:g} CPUs, the others {min(cores):g}")
        evidence["cores_allowed"] = {r.worker: r.cores_allowed for r in measured}
    models = {r.cpu_model for r in others}
    if slow.cpu_model and models and slow.cpu_model not in models:
        causes.append(f"different hardware: {slow.cpu_model} against {', '.join(sorted(m for m in models if m))}")
        evidence["cpu_model"] = {r.worker: r.cpu_model for r in measured}
    if not causes:
        causes.append(f"compute: {slow.cores_busy_mean} cores busy during fit against "
                      f"{statistics.median(r.cores_busy_mean or 0.0 for r in others):.2f} on the others")
    fixes = {"input": "Speed up its input pipeline (num_parallel_calls=tf.data.AUTOTUNE, prefetch, cache, "
                      "preprocessing offline) or give it the same data path as the others.",
             "CPU quota": "Give every worker the same CPU quota, or fewer workers with more CPUs each.",
             "different hardware": "Run the workers on the same machine type, or give the slower machine a "
                                   "smaller share of the data.",
             "compute": "Check what else runs on that machine (tensorgauge compare its run with another "
                        "worker's) and balance the load."}
    return Finding(
        id="straggler", severity="high" if wait >= 0.25 * step else "moderate",
        title=f"Worker {slow.worker} is the straggler: the others wait {_ms(wait)} a step for it "
              f"({wait / step:.0%} of a {_ms(step)} step) — " + "; ".join(causes),
        evidence={"straggler": slow.worker, "run_id": slow.run_id, **evidence},
        fix=fixes[causes[0].split(":")[0]],
        expected_gain=f"up to {_ms(wait)} a step on every worker")


@dataclass
class Spread:
    """How a fleet's workers spread around their median step time, and the slowest of them."""

    workers: int
    measured: int  # workers with a step time
    step_seconds_median: float | None
    step_seconds_p90: float | None
    slowest: list[tuple[WorkerRow, float]]  # (worker, its step p50 over the median: 1.5 = 50% slower)

    def to_dict(self) -> dict:
        return {"workers": self.workers, "measured": self.measured, "step_seconds_median": self.step_seconds_median,
                "step_seconds_p90": self.step_seconds_p90,
                "slowest": [{"worker": w.worker, "run_id": w.run_id, "step_seconds_p50": w.step_seconds_p50,
                             "over_median": round(r, 3)} for w, r in self.slowest]}


def spread(rows: list[WorkerRow], slowest: int = 5) -> Spread:
    """The median and 90th percentile of the workers' step times, and the ``slowest`` workers."""
    timed = sorted((r for r in rows if r.step_seconds_p50), key=lambda r: r.step_seconds_p50 or 0.0, reverse=True)
    if not timed:
        return Spread(len(rows), 0, None, None, [])
    steps = sorted(r.step_seconds_p50 or 0.0 for r in timed)
    median = statistics.median(steps)
    p90 = steps[min(len(steps) - 1, int(0.9 * len(steps)))]
    return Spread(len(rows), len(timed), median, p90,
                  [(r, (r.step_seconds_p50 or 0.0) / median if median else 1.0) for r in timed[:slowest]])
