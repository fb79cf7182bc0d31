"""Phases from the hook's events, with per-phase figures from the samples.

Boundaries and CPU-seconds come from the events themselves: the hook stamps
each begin/end with the time and the emitting process's own CPU seconds, so a
phase's CPU is exact, not integrated from samples. Cores busy peak, RSS peak
and GPU figures come from the samples inside the phase. A phase still open
when the job ended (killed mid-fit) ends at the run's end, marked incomplete,
its CPU taken from the samples.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

from tensorgauge.hook.protocol import Kind
from tensorgauge.model import PHASE_KINDS, Event, Phase, Sample


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    index = max(0, math.ceil(q / 100.0 * len(sorted_values)) - 1)
    return sorted_values[index]


def cpu_at(samples: list[Sample], times: list[float], t: float) -> float:
    """The tree's cumulative CPU at ``t``, interpolated between samples."""
    if not samples:
        return 0.0
    i = bisect_left(times, t)
    if i == 0:
        return samples[0].cpu_seconds
    if i >= len(samples):
        return samples[-1].cpu_seconds
    a, b = samples[i - 1], samples[i]
    frac = (t - a.t) / (b.t - a.t) if b.t > a.t else 1.0
    return a.cpu_seconds + frac * (b.cpu_seconds - a.cpu_seconds)


def build_phases(events: list[Event], samples: list[Sample], end: float | None = None) -> list[Phase]:
    """Every phase of the run, ordered by start; ``parent`` indexes this list."""
    run_end = end if end is not None else (samples[-1].t if samples else 0.0)
    times = [s.t for s in samples]
    phases: list[Phase] = []
    index_of: dict[tuple[int, object], int] = {}
    begin_cpu: dict[int, float | None] = {}
    step_seconds: dict[int, list[float]] = {}

    begin, end_kind, steps_kind = Kind.PHASE_BEGIN, Kind.PHASE_END, Kind.STEPS
    for event in events:
        kind_of_event = event.kind
        if kind_of_event == begin:
            data = event.data
            pid = event.pid
            kind = data.get("phase_kind")
            parent = data.get("parent")
            phase = Phase(str(data.get("name") or kind or "phase"), kind if kind in PHASE_KINDS else "custom",
                          event.t, run_end, index_of.get((pid, parent)) if parent is not None else None, pid,
                          rss_start_bytes=data.get("rss"), complete=False)
            index_of[(pid, data.get("id"))] = len(phases)
            begin_cpu[len(phases)] = data.get("cpu")
            phases.append(phase)
        elif kind_of_event == end_kind:
            data = event.data
            index = index_of.get((event.pid, data.get("id")))
            if index is None:
                continue
            phase = phases[index]
            phase.end = max(event.t, phase.start)
            phase.complete = True
            phase.error = data.get("error")
            phase.rss_end_bytes = data.get("rss")
            if begin_cpu[index] is not None and data.get("cpu") is not None:
                phase.cpu_seconds = max(0.0, data["cpu"] - begin_cpu[index])
                begin_cpu[index] = None  # mark as measured exactly
        elif kind_of_event == steps_kind:
            data = event.data
            index = index_of.get((event.pid, data.get("phase")))
            if index is not None:
                step_seconds.setdefault(index, []).extend(data.get("seconds") or [])

    for index, phase in enumerate(phases):
        if begin_cpu[index] is not None:
            # Never closed: estimate from the tree's samples.
            phase.cpu_seconds = max(0.0, cpu_at(samples, times, phase.end) - cpu_at(samples, times, phase.start))
        _sample_figures(phase, samples, times)

    # A phase's steps: its own and its epochs' (one pass over the phases: linear in their number).
    steps_of = {index: list(seconds) for index, seconds in step_seconds.items()}
    for child_index, child in enumerate(phases):
        if child.kind == "epoch" and child.parent is not None and child_index in step_seconds:
            steps_of.setdefault(child.parent, []).extend(step_seconds[child_index])
    for index, phase in enumerate(phases):
        own = steps_of.get(index)
        if own:
            own.sort()
            phase.steps = len(own)
            phase.step_seconds_p50 = round(percentile(own, 50), 6)
            phase.step_seconds_p95 = round(percentile(own, 95), 6)
            phase.step_seconds_max = round(own[-1], 6)

    order = sorted(range(len(phases)), key=lambda i: (phases[i].start, i))
    new_index = {old: new for new, old in enumerate(order)}
    ordered = [phases[i] for i in order]
    for phase in ordered:
        phase.parent = new_index.get(phase.parent) if phase.parent is not None else None
    return ordered


def _sample_figures(phase: Phase, samples: list[Sample], times: list[float]) -> None:
    """Cores busy, RSS and GPU figures from the samples inside the phase."""
    wall = phase.wall_seconds
    phase.cores_busy_mean = round(phase.cpu_seconds / wall, 3) if wall > 0 else 0.0
    # A sample's cores_busy covers the interval ending at its t.
    first, last = bisect_right(times, phase.start), bisect_right(times, phase.end)
    if first == last:  # shorter than a sampling interval: the hook's own figures only
        phase.cores_busy_peak = phase.cores_busy_mean
        phase.rss_peak_bytes = max(phase.rss_start_bytes or 0, phase.rss_end_bytes or 0)
        return
    inside = samples[first:last]
    busy = [s.cores_busy for s in inside if s.cores_busy is not None]
    phase.cores_busy_peak = round(max(busy + [phase.cores_busy_mean]), 3)
    rss = [s.rss_bytes for s in inside] + [b for b in (phase.rss_start_bytes, phase.rss_end_bytes) if b]
    phase.rss_peak_bytes = max(rss, default=0)
    util = [g.util_percent for s in inside for g in s.gpus if g.util_percent is not None]
    memory = [g.memory_used_bytes for s in inside for g in s.gpus if g.memory_used_bytes is not None]
    if util:
        phase.gpu_util_mean = round(sum(util) / len(util), 1)
        phase.gpu_util_peak = max(util)
    if memory:
        phase.gpu_memory_peak_bytes = max(memory)


def top_level(phases: list[Phase]) -> list[Phase]:
    return [p for p in phases if p.parent is None]


def main_fit(phases: list[Phase]) -> Phase | None:
    """The run's main training phase, for every rule and view: its longest ``fit``."""
    fits = [p for p in phases if p.kind == "fit"]
    return max(fits, key=lambda p: p.wall_seconds) if fits else None
