"""Benchmark results of a ``bench`` run: the suite's ``bench_result`` events joined
with what the recorder measured in each benchmark's phase (pure)."""

from __future__ import annotations

from tensorgauge.hook.protocol import Kind
from tensorgauge.model import Event, Phase

PHASE_PREFIX = "bench "


def bench_results(events: list[Event], phases: list[Phase]) -> dict[str, dict]:
    """{name: {value, unit, higher_is_better, seconds, group, cores_busy_mean, rss_peak_bytes}}."""
    by_name = {p.name[len(PHASE_PREFIX):]: p for p in phases if p.name.startswith(PHASE_PREFIX)}
    results = {}
    for e in events:
        if e.kind != Kind.BENCH_RESULT or not isinstance(e.data.get("name"), str):
            continue
        phase = by_name.get(e.data["name"])
        results[e.data["name"]] = {
            **{k: e.data.get(k) for k in ("value", "unit", "higher_is_better", "seconds", "group")},
            "cores_busy_mean": round(phase.cores_busy_mean, 3) if phase else None,
            "rss_peak_bytes": phase.rss_peak_bytes if phase else None}
    return results
