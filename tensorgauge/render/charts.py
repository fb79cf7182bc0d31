"""Vega-Lite chart specs for the HTML report, from analysed runs (pure dicts).

Long runs are downsampled into at most :data:`MAX_BINS` time bins for display;
each bin keeps its peak (and the mean where a mean means something), so a
one-second spike in a one-hour run still shows.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter

from tensorgauge.hook.protocol import Kind
from tensorgauge.model import Sample

MAX_BINS = 1500
MAX_HEATMAP_CELLS = 40_000
MAX_STEP_TICKS = 3000
HISTOGRAM_BINS = 50
STEP_RATE_MIN_SECONDS = 0.1  # the narrowest bin of the steps-per-second chart
WIDTH = 900
SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier only: nothing is fetched


def _r(x: float | None, digits: int = 4) -> float | None:
    """Rounded to ``digits`` significant digits: smaller pages, same pictures."""
    if x is None or x == 0 or not math.isfinite(x):
        return x
    return round(x, max(0, digits - 1 - int(math.floor(math.log10(abs(x))))))


def bins(samples: list[Sample], wall: float, max_bins: int = MAX_BINS) -> list[list[Sample]]:
    """The samples in at most ``max_bins`` equal time bins over [0, wall] (empty bins dropped)."""
    if not samples:
        return []
    width = max(wall, samples[-1].t, 1e-9) / max_bins
    grouped: dict[int, list[Sample]] = {}
    for s in samples:
        grouped.setdefault(min(int(s.t / width), max_bins - 1), []).append(s)
    return [grouped[k] for k in sorted(grouped)]


def series(samples: list[Sample], wall: float) -> list[dict]:
    """One row per bin: cores busy mean and peak, RSS peak, machine memory used, GPU util/memory peak."""
    rows = []
    for group in bins(samples, wall):
        busy = [s.cores_busy for s in group if s.cores_busy is not None]
        gpus = [g for s in group for g in s.gpus]
        used = [s.mem_used_bytes for s in group if s.mem_used_bytes is not None]
        row = {"t": _r(group[0].t),
               "cores_mean": _r(sum(busy) / len(busy)) if busy else None, "cores_peak": _r(max(busy)) if busy else None,
               "rss_gib": _r(max(s.rss_bytes for s in group) / 2**30),
               "mem_used_gib": _r(max(used) / 2**30) if used else None}
        if gpus:
            row["gpu_util_peak"] = max((g.util_percent or 0.0) for g in gpus)
            row["gpu_mem_gib"] = _r(max((g.memory_used_bytes or 0) for g in gpus) / 2**30)
            job = [g.job_memory_bytes for g in gpus if g.job_memory_bytes is not None]
            if job:
                row["gpu_job_gib"] = _r(max(job) / 2**30)
        rows.append(row)
    return rows


def heatmap(samples: list[Sample], wall: float) -> list[dict]:
    """Per CPU and bin: the peak busy percent."""
    cpus = max((len(s.cpu_percent) for s in samples if s.cpu_percent), default=0)
    if not cpus:
        return []
    count = max(1, min(MAX_BINS, MAX_HEATMAP_CELLS // cpus, len(samples)))
    width = max(wall, samples[-1].t, 1e-9) / count
    cells = []
    for group in bins(samples, wall, count):
        start = min(int(group[0].t / width), count - 1) * width
        for cpu in range(cpus):
            values = [s.cpu_percent[cpu] for s in group if s.cpu_percent and len(s.cpu_percent) > cpu]
            if values:
                cells.append({"t": _r(start), "t2": _r(start + width), "cpu": cpu, "busy": _r(max(values), 3)})
    return cells


def phase_bands(phases, depth_max: int = 1) -> list[dict]:
    depths: list[int] = []
    bands = []
    for p in phases:
        depth = depths[p.parent] + 1 if p.parent is not None and p.parent < len(depths) else 0
        depths.append(depth)
        if depth <= depth_max and p.end > p.start:
            bands.append({"phase": p.name, "kind": p.kind, "start": _r(p.start), "end": _r(p.end), "depth": depth})
    return bands


def _numbers(events, key: str) -> list[float]:
    """The ``key`` lists of the ``steps`` events (an event holding anything but numbers is skipped)."""
    out: list[float] = []
    for e in events:
        if e.kind == Kind.STEPS:
            try:
                out.extend([x + 0.0 for x in e.data.get(key) or ()])
            except TypeError:
                continue
    return out


def step_ends(events) -> list[float]:
    """When each training step ended, in seconds from the run's start (the recorder made them relative)."""
    return _numbers(events, "ends")


def step_seconds(events) -> list[float]:
    return _numbers(events, "seconds")


def histogram(values: list[float], count: int = HISTOGRAM_BINS) -> list[dict]:
    """Pre-binned counts (a step list can hold millions of values), on a log scale when they span 10x."""
    values = sorted(v for v in values if v > 0)
    if not values:
        return []
    lo, hi = values[0], values[-1]
    if hi / lo > 10:
        a, b = math.log10(lo), math.log10(hi)
        edges = [10 ** (a + i * (b - a) / count) for i in range(count + 1)]
    else:
        edges = [lo + i * (hi - lo) / count for i in range(count + 1)] if hi > lo else [lo, lo]
    edges[-1] = hi
    bars, below = [], 0
    for i in range(len(edges) - 1):
        upto = bisect.bisect_right(values, edges[i + 1]) if i < len(edges) - 2 else len(values)
        if upto > below:
            bars.append({"from_ms": _r(edges[i] * 1000), "to_ms": _r(edges[i + 1] * 1000), "steps": upto - below})
        below = upto
    return bars


def _x(wall: float) -> dict:
    return {"field": "t", "type": "quantitative", "title": "seconds from start", "scale": {"domain": [0, _r(wall)]}}


def _bands_layer(bands: list[dict], wall: float) -> dict:
    return {"data": {"values": bands}, "mark": {"type": "rect", "opacity": 0.18},
            "encoding": {"x": {"field": "start", "type": "quantitative", "scale": {"domain": [0, _r(wall)]}},
                         "x2": {"field": "end"},
                         "color": {"field": "kind", "type": "nominal", "title": "phase",
                                   "scale": {"scheme": "tableau10"}},
                         "tooltip": [{"field": "phase"}, {"field": "start", "title": "from s"},
                                     {"field": "end", "title": "to s"}]}}


def _fold(fields: list[tuple[str, str]]) -> list[dict]:
    """One row per field and bin, as (series, gib); a field read less often (machine memory,
    once a second) leaves no gaps: its missing bins are dropped, not drawn as breaks."""
    return [{"fold": [f for f, _ in fields], "as": ["series", "gib"]}, {"filter": "isValid(datum.gib)"}]


def _series_stroke(fields: list[tuple[str, str]], title: str) -> dict:
    """A line per folded field, its legend showing each field's label."""
    labels = json.dumps(dict(fields))
    return {"field": "series", "type": "nominal", "title": title,
            "legend": {"labelExpr": f"{labels}[datum.label] || datum.label"}}


def cores_chart(rows: list[dict], bands: list[dict], ends: list[float], wall: float, allowed: float | None) -> dict:
    layers = [_bands_layer(bands, wall),
              {"data": {"values": rows}, "mark": {"type": "area", "opacity": 0.3, "color": "#4c78a8"},
               "encoding": {"x": _x(wall), "y": {"field": "cores_peak", "type": "quantitative",
                                                  "title": "cores busy"}}},
              {"data": {"values": rows}, "mark": {"type": "line", "color": "#1f3b63"},
               "encoding": {"x": _x(wall), "y": {"field": "cores_mean", "type": "quantitative"},
                            "tooltip": [{"field": "t", "title": "s"}, {"field": "cores_mean", "title": "mean"},
                                        {"field": "cores_peak", "title": "peak"}]}}]
    if allowed:
        layers.append({"data": {"values": [{"allowed": allowed}]}, "mark": {"type": "rule", "strokeDash": [4, 4]},
                       "encoding": {"y": {"field": "allowed", "type": "quantitative"}}})
    if ends and len(ends) <= MAX_STEP_TICKS:
        layers.append({"data": {"values": [{"t": _r(t)} for t in ends]},
                       "mark": {"type": "tick", "orient": "vertical", "color": "#e45756", "opacity": 0.6,
                                "size": 12},
                       "encoding": {"x": _x(wall), "y": {"datum": 0}}})
    return {"$schema": SCHEMA, "width": WIDTH, "height": 220, "title": "Cores busy, phases and steps",
            "layer": layers}


def step_rate_chart(ends: list[float], wall: float) -> dict | None:
    if not ends:
        return None
    count = min(MAX_BINS, max(1, int(wall / STEP_RATE_MIN_SECONDS)))
    width = wall / count if wall > 0 else 1.0
    inverse = 1.0 / width
    counts = Counter(int(t * inverse) for t in ends)
    clamped: Counter = Counter()
    for i, n in counts.items():
        clamped[min(max(i, 0), count - 1)] += n
    rows = [{"t": _r(i * width), "t2": _r((i + 1) * width), "steps_per_s": _r(n / width)}
            for i, n in sorted(clamped.items())]
    return {"$schema": SCHEMA, "width": WIDTH, "height": 90, "title": "Training steps per second",
            "data": {"values": rows}, "mark": {"type": "rect", "color": "#e45756"},
            "encoding": {"x": _x(wall), "x2": {"field": "t2"},
                         "y": {"field": "steps_per_s", "type": "quantitative", "title": "steps/s"}}}


def heatmap_chart(cells: list[dict], wall: float) -> dict | None:
    if not cells:
        return None
    return {"$schema": SCHEMA, "width": WIDTH, "height": {"step": 12}, "title": "Each CPU's busy % (peak per bin)",
            "data": {"values": cells}, "mark": "rect",
            "encoding": {"x": {"field": "t", "type": "quantitative", "title": "seconds from start",
                               "scale": {"domain": [0, _r(wall)]}}, "x2": {"field": "t2"},
                         "y": {"field": "cpu", "type": "ordinal", "title": "CPU"},
                         "color": {"field": "busy", "type": "quantitative", "title": "busy %",
                                   "scale": {"domain": [0, 100], "scheme": "viridis"}}}}


def memory_chart(rows: list[dict], bands: list[dict], wall: float) -> dict:
    fields = [("rss_gib", "job RSS")] + ([("mem_used_gib", "machine used")] if any(r.get("mem_used_gib") for r in rows)
                                          else [])
    return {"$schema": SCHEMA, "width": WIDTH, "height": 160, "title": "Memory (GiB, peak per bin)",
            "layer": [_bands_layer(bands, wall),
                      {"data": {"values": rows},
                       "transform": _fold(fields),
                       "mark": "line",
                       "encoding": {"x": _x(wall), "y": {"field": "gib", "type": "quantitative", "title": "GiB"},
                                    "stroke": _series_stroke(fields, "memory")}}]}


def gpu_chart(rows: list[dict], bands: list[dict], wall: float) -> dict | None:
    """GPU utilisation (%) above GPU memory (GiB: the device's, and the job's own where NVML says)."""
    values = [r for r in rows if "gpu_util_peak" in r]
    if not values:
        return None
    memory = [("gpu_mem_gib", "device used")] + ([("gpu_job_gib", "the job's own")]
                                                  if any("gpu_job_gib" in r for r in values) else [])
    return {"$schema": SCHEMA, "title": "GPU (peak per bin over all GPUs)", "data": {"values": values},
            "vconcat": [
                {"width": WIDTH, "height": 110,
                 "layer": [_bands_layer(bands, wall),
                           {"mark": {"type": "line", "color": "#54a24b"}, "encoding": {
                               "x": _x(wall), "y": {"field": "gpu_util_peak", "type": "quantitative",
                                                    "title": "utilisation %", "scale": {"domain": [0, 100]}}}}]},
                {"width": WIDTH, "height": 110, "transform": _fold(memory),
                 "mark": "line",
                 "encoding": {"x": _x(wall), "y": {"field": "gib", "type": "quantitative", "title": "GiB"},
                              "stroke": _series_stroke(memory, "GPU memory")}}]}


def histogram_chart(bars: list[dict]) -> dict | None:
    if not bars:
        return None
    return {"$schema": SCHEMA, "width": WIDTH, "height": 150, "title": "Step times",
            "data": {"values": bars}, "mark": "rect",
            "encoding": {"x": {"field": "from_ms", "type": "quantitative", "title": "step (ms)",
                               "scale": {"type": "log" if bars[-1]["to_ms"] / bars[0]["from_ms"] > 10 else "linear",
                                         "zero": False}},
                         "x2": {"field": "to_ms"}, "y": {"field": "steps", "type": "quantitative", "title": "steps"},
                         "tooltip": [{"field": "from_ms"}, {"field": "to_ms"}, {"field": "steps"}]}}


def overlay_chart(rows_by_run: dict[str, list[dict]], field: str, title: str, y_title: str) -> dict:
    """Two runs on one time axis (each from its own start)."""
    values = [{**r, "run": run} for run, rows in rows_by_run.items() for r in rows]
    return {"$schema": SCHEMA, "width": WIDTH, "height": 180, "title": title, "data": {"values": values},
            "mark": "line", "encoding": {"x": {"field": "t", "type": "quantitative", "title": "seconds from start"},
                                         "y": {"field": field, "type": "quantitative", "title": y_title},
                                         "color": {"field": "run", "type": "nominal"}}}


def run_charts(report) -> dict[str, dict]:
    """Every chart of one run, by id (absent when there is nothing to draw)."""
    wall = report.record.wall_seconds or (report.samples[-1].t if report.samples else 1.0)
    rows = series(report.samples, wall)
    bands = phase_bands(report.phases)
    ends = step_ends(report.events)
    allowed = (report.record.env.get("host") or {}).get("cores_allowed")
    charts = {"cores": cores_chart(rows, bands, ends, wall, allowed),
              "steps": step_rate_chart(ends, wall),
              "heatmap": heatmap_chart(heatmap(report.samples, wall), wall),
              "memory": memory_chart(rows, bands, wall),
              "gpu": gpu_chart(rows, bands, wall),
              "histogram": histogram_chart(histogram(step_seconds(report.events)))}
    return {k: v for k, v in charts.items() if v is not None}
