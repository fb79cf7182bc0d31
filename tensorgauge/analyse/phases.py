"""Phases from the hook's events, with per-phase figures from the samples.

Boundaries and CPU-seconds come from the events themselves: the hook stamps
each begin/end with the time and the emitting process's own CPU seconds, so a
phase's CPU is exact, not integrated from samples. Cores busy peak, RSS peak
and GPU figures come from the samples inside the phase (columns: a day's
864,000 samples take a few vectorised passes). Step figures come from the
phase's step digests (:mod:`tensorgauge.steps`): the count and maximum exact,
quantiles within 1%. A phase still open when the job ended (killed mid-fit)
ends at the run's end, marked incomplete, its CPU taken from the samples; one
whose end may be among events the monitor dropped (``phase_end_unrecorded``)
too, marked ``end_dropped`` instead of cut.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tensorgauge.hook.protocol import TRAIN_LOOP, Kind, PhaseBegin, PhaseEnd, PhaseEndUnrecorded
from tensorgauge.hook.protocol import StepDigest as DigestPayload
from tensorgauge.model import PHASE_KINDS, Event, Phase, Sample

if TYPE_CHECKING:  # numpy loads when phases are built, not for main_fit and top_level
    from tensorgauge.series import SampleSeries
    from tensorgauge.steps import StepDigest


def as_series(samples: SampleSeries | list[Sample]) -> SampleSeries:
    from tensorgauge.series import SampleSeries

    return samples if isinstance(samples, SampleSeries) else SampleSeries.from_samples(samples)


def spans_outside(begin: float, end: float, pauses: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of [begin, end] outside ``pauses`` (the tool's own; they may overlap), in order."""
    out, at = [], begin
    for a, b in sorted(pauses):
        if b <= at or a >= end:
            continue
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < end:
        out.append((at, end))
    return out


def seconds_outside(begin: float, seconds: float, pauses: list[tuple[float, float]]) -> float:
    """Seconds of [begin, begin + seconds] outside ``pauses`` (the tool's own)."""
    return sum(b - a for a, b in spans_outside(begin, begin + seconds, pauses))


def cpu_at(series: SampleSeries, t: float) -> float:
    """The tree's cumulative CPU at ``t``, interpolated between samples."""
    import numpy as np

    if not len(series):
        return 0.0
    return float(np.interp(t, series.t, series["cpu_seconds"]))


def step_digests(events: list[Event]) -> dict[tuple[int, object], StepDigest]:
    """(pid, phase id) -> the phase's steps: its ``step_digest`` events merged (raw ``steps`` events,
    from a run stored by an older version, digested first). A damaged digest is left out."""
    from tensorgauge.steps import StepDigest, digest_steps

    out: dict[tuple[int, object], StepDigest] = {}
    for event in digest_steps(events):
        if event.kind != Kind.STEP_DIGEST:
            continue
        payload = event.read(DigestPayload)
        try:
            digest = StepDigest.from_payload(payload)
        except ValueError:
            continue
        key = (event.pid, payload.get("phase"))
        if key in out:
            out[key].merge(digest)
        else:
            out[key] = digest
    return out


def _first_seconds(digest) -> float | None:
    """The seconds of the earliest step a digest kept (by its end; the first kept when ends are unknown)."""
    timed = [(end, seconds) for end, seconds in digest.first if end is not None and math.isfinite(end)]
    if timed:
        return min(timed)[1]
    return digest.first[0][1] if digest.first else None


def build_phases(events: list[Event], samples: SampleSeries | list[Sample], end: float | None = None,
                 digests: dict[tuple[int, object], StepDigest] | None = None) -> list[Phase]:
    """Every phase of the run, ordered by start; ``parent`` indexes this list."""
    series = as_series(samples)
    run_end = end if end is not None else (float(series.t[-1]) if len(series) else 0.0)
    phases: list[Phase] = []
    index_of: dict[tuple[int, object], int] = {}
    begin_cpu: dict[int, float | None] = {}
    exact: set[int] = set()  # phases whose CPU the hook's own stamps give

    begin, end_kind, unrecorded = Kind.PHASE_BEGIN, Kind.PHASE_END, Kind.PHASE_END_UNRECORDED
    for event in events:
        kind_of_event = event.kind
        if kind_of_event == begin:
            data = event.read(PhaseBegin)
            pid = event.pid
            kind = data.get("phase_kind")
            parent = data.get("parent")
            phase = Phase(str(data.get("name") or kind or "phase"), kind if kind in PHASE_KINDS else "custom",
                          event.t, run_end, index_of.get((pid, parent)) if parent is not None else None, pid,
                          rss_start_bytes=data.get("rss"), complete=False)
            index_of[(pid, data.get("id"))] = len(phases)
            begin_cpu[len(phases)] = data.get("cpu")  # None: not known (a train loop recognised late)
            phases.append(phase)
        elif kind_of_event == end_kind:
            ended = event.read(PhaseEnd)
            index = index_of.get((event.pid, ended.get("id")))
            if index is None:
                continue
            phase = phases[index]
            phase.end = max(event.t, phase.start)
            phase.complete = True
            phase.error = ended.get("error")
            phase.rss_end_bytes = ended.get("rss")
            began, cpu = begin_cpu[index], ended.get("cpu")
            if began is not None and cpu is not None:
                phase.cpu_seconds = max(0.0, cpu - began)
                exact.add(index)
        elif kind_of_event == unrecorded:
            index = index_of.get((event.pid, event.read(PhaseEndUnrecorded).get("id")))
            if index is not None and not phases[index].complete:
                phases[index].end_dropped = True

    for index, phase in enumerate(phases):
        if index not in exact:
            # Never closed, or begun at an unknown CPU: estimated from the tree's samples.
            phase.cpu_seconds = max(0.0, cpu_at(series, phase.end) - cpu_at(series, phase.start))
        _sample_figures(phase, series)

    steps_of = _steps_by_phase(step_digests(events) if digests is None else digests, index_of, phases)
    for index, digest in steps_of.items():
        if digest.count:
            phase = phases[index]
            phase.steps = digest.count
            phase.step_seconds_p25 = _round(digest.quantile(0.25))
            phase.step_seconds_p50 = _round(digest.quantile(0.5))
            phase.step_seconds_p75 = _round(digest.quantile(0.75))
            phase.step_seconds_p95 = _round(digest.quantile(0.95))
            phase.step_seconds_max = _round(digest.seconds_max)
            phase.step_seconds_first = _round(_first_seconds(digest))

    _nest_in_loops(phases)
    order = sorted(range(len(phases)), key=lambda i: (phases[i].start, i))
    new_index = {old: new for new, old in enumerate(order)}
    ordered = [phases[i] for i in order]
    for phase in ordered:
        phase.parent = new_index.get(phase.parent) if phase.parent is not None else None
    return ordered


def _steps_by_phase(digests: dict[tuple[int, object], StepDigest], index_of: dict[tuple[int, object], int],
                    phases: list[Phase]) -> dict[int, StepDigest]:
    """Each phase's steps (by its index): its own and its epochs' (one pass over the digests: linear in
    their number; the digests themselves are left as they are)."""
    from tensorgauge.steps import StepDigest

    steps_of: dict[int, StepDigest] = {}

    def add(index: int, phase_id: int | None, digest: StepDigest) -> None:
        if index not in steps_of:
            steps_of[index] = StepDigest(phase_id)
        steps_of[index].merge(digest)

    for key, digest in digests.items():
        index = index_of.get(key)
        if index is None:
            continue
        add(index, digest.phase, digest)
        parent = phases[index].parent
        if phases[index].kind == "epoch" and parent is not None:
            add(parent, None, digest)
    return steps_of


def _nest_in_loops(phases: list[Phase]) -> None:
    """A custom training loop is recognised after it began and kept beside the job's other phases
    (see :mod:`tensorgauge.hook.train_loop`): what the same process began inside its span (an
    evaluate, a checkpoint) is its child."""
    loops = [(i, p) for i, p in enumerate(phases) if p.kind == "fit" and p.name == TRAIN_LOOP]
    for index, phase in enumerate(phases):
        if phase.parent is not None:
            continue
        for loop_index, loop in loops:
            if loop_index != index and loop.pid == phase.pid and loop.start <= phase.start < loop.end:
                phase.parent = loop_index
                break


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _sample_figures(phase: Phase, series: SampleSeries) -> None:
    """Cores busy, RSS and GPU figures from the samples inside the phase."""
    import numpy as np

    wall = phase.wall_seconds
    phase.cores_busy_mean = round(phase.cpu_seconds / wall, 3) if wall > 0 else 0.0
    # A sample's cores_busy covers the interval ending at its t.
    first, last = series.bounds(phase.start, phase.end)
    if last <= first:  # shorter than a sampling interval: the hook's own figures only
        phase.cores_busy_peak = phase.cores_busy_mean
        phase.rss_peak_bytes = max(phase.rss_start_bytes or 0, phase.rss_end_bytes or 0)
        return
    inside = slice(first, last)
    busy = series["cores_busy"][inside]
    busy_peak = float(np.nanmax(busy)) if np.any(~np.isnan(busy)) else 0.0
    phase.cores_busy_peak = round(max(busy_peak, phase.cores_busy_mean), 3)
    rss = int(np.nanmax(series["rss_bytes"][inside]))
    phase.rss_peak_bytes = max([rss] + [b for b in (phase.rss_start_bytes, phase.rss_end_bytes) if b])
    if series.gpu_index:
        util = series.gpu["util_percent"][inside]
        memory = series.gpu["memory_used_bytes"][inside]
        if np.any(~np.isnan(util)):
            phase.gpu_util_mean = round(float(np.nanmean(util)), 1)
            phase.gpu_util_peak = float(np.nanmax(util))
        if np.any(~np.isnan(memory)):
            phase.gpu_memory_peak_bytes = int(np.nanmax(memory))
        job = series.gpu["job_memory_bytes"][inside]
        if np.any(~np.isnan(job)):
            phase.gpu_job_memory_peak_bytes = int(np.nanmax(job))


def top_level(phases: list[Phase]) -> list[Phase]:
    return [p for p in phases if p.parent is None]


def model_calls(phases: list[Phase], kinds: tuple[str, ...]) -> list[Phase]:
    """The job's own calls of these kinds (fit, predict, evaluate), not those a fit makes itself
    (its validation), in time order."""
    def inside_fit(phase: Phase) -> bool:  # a validation pass sits in an epoch, in the fit
        seen: set[int] = set()
        parent = phase.parent
        while parent is not None and 0 <= parent < len(phases) and parent not in seen:
            if phases[parent].kind == "fit":
                return True
            seen.add(parent)
            parent = phases[parent].parent
        return False

    return sorted((p for p in phases if p.kind in kinds and not inside_fit(p)), key=lambda p: p.start)


def main_fit(phases: list[Phase]) -> Phase | None:
    """The run's main training phase, for every rule and view: its longest ``fit``."""
    fits = [p for p in phases if p.kind == "fit"]
    return max(fits, key=lambda p: p.wall_seconds) if fits else None
