"""Benchmark results of a ``bench`` run: the suite's ``bench_result`` events joined
with what the recorder measured in each benchmark's phase (pure)."""

from __future__ import annotations

from tensorgauge.hook.protocol import BenchResult
from tensorgauge.model import Event, Phase, payloads

PHASE_PREFIX = "bench "


def bench_results(events: list[Event], phases: list[Phase]) -> dict[str, dict]:
    """{name: {value, unit, higher_is_better, seconds, group, cores_busy_mean, rss_peak_bytes}}."""
    by_name = {p.name[len(PHASE_PREFIX):]: p for p in phases if p.name.startswith(PHASE_PREFIX)}
    results = {}
    for result in payloads(events, BenchResult):
        name = result.get("name")
        if not isinstance(name, str):
            continue
        phase = by_name.get(name)
        results[name] = {
            "value": result.get("value"), "unit": result.get("unit"),
            "higher_is_better": result.get("higher_is_better"), "seconds": result.get("seconds"),
            "group": result.get("group"),
            "cores_busy_mean": round(phase.cores_busy_mean, 3) if phase else None,
            "rss_peak_bytes": phase.rss_peak_bytes if phase else None}
    return results
