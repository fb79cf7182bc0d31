"""Vega-Lite chart specs for the HTML report, from an analysed run's timeline
(:mod:`tensorgauge.analyse.timeline`: bins that keep each one's peak, so a
one-second spike in a day still shows). Pure dicts."""

from __future__ import annotations

import json
import math

from tensorgauge.analyse.input_stages import stage_table_rows

WIDTH = 900
SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier only: nothing is fetched


def _r(x: float | None, digits: int = 4) -> float | None:
    """Rounded to ``digits`` significant digits: smaller pages, same pictures."""
    if x is None or x == 0 or not math.isfinite(x):
        return x
    return round(x, max(0, digits - 1 - int(math.floor(math.log10(abs(x))))))


def phase_bands(phases, depth_max: int = 1) -> list[dict]:
    depths: list[int] = []
    bands = []
    for p in phases:
        depth = depths[p.parent] + 1 if p.parent is not None and p.parent < len(depths) else 0
        depths.append(depth)
        if depth <= depth_max and p.end > p.start:
            bands.append({"phase": p.name, "kind": p.kind, "start": _r(p.start), "end": _r(p.end), "depth": depth})
    return bands


Span = tuple[float, float]  # the x axis: seconds from the run's start, (from, to)


def _domain(span: Span) -> list:
    return [_r(span[0]) or 0, _r(span[1])]


def _x(span: Span) -> dict:
    return {"field": "t", "type": "quantitative", "title": "seconds from start", "scale": {"domain": _domain(span)}}


# Drag to pan, scroll to zoom along time (the bins, each with its peak: every sample of a
# stretch is `report RUN --from --to`).
ZOOM = {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}


def _bands_layer(bands: list[dict], span: Span) -> dict:
    return {"data": {"values": bands}, "mark": {"type": "rect", "opacity": 0.18},
            "encoding": {"x": {"field": "start", "type": "quantitative", "scale": {"domain": _domain(span)}},
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


def cores_chart(rows: list[dict], bands: list[dict], ends: list[float], span: Span, allowed: float | None) -> dict:
    layers = [_bands_layer(bands, span),
              {"data": {"values": rows}, "mark": {"type": "area", "opacity": 0.3, "color": "#4c78a8"},
               "encoding": {"x": _x(span), "y": {"field": "cores_peak", "type": "quantitative",
                                                  "title": "cores busy"}}},
              {"data": {"values": rows}, "mark": {"type": "line", "color": "#1f3b63"}, "params": [ZOOM],
               "encoding": {"x": _x(span), "y": {"field": "cores_mean", "type": "quantitative"},
                            "tooltip": [{"field": "t", "title": "s"}, {"field": "cores_mean", "title": "mean"},
                                        {"field": "cores_peak", "title": "peak"}]}}]
    if allowed:
        layers.append({"data": {"values": [{"allowed": allowed}]}, "mark": {"type": "rule", "strokeDash": [4, 4]},
                       "encoding": {"y": {"field": "allowed", "type": "quantitative"}}})
    if ends:
        layers.append({"data": {"values": [{"t": t} for t in ends]},
                       "mark": {"type": "tick", "orient": "vertical", "color": "#e45756", "opacity": 0.6,
                                "size": 12},
                       "encoding": {"x": _x(span), "y": {"datum": 0}}})
    return {"$schema": SCHEMA, "width": WIDTH, "height": 220, "title": "Cores busy, phases and steps",
            "layer": layers}


def step_rate_chart(rows: list[dict], span: Span) -> dict | None:
    if not rows:
        return None
    return {"$schema": SCHEMA, "width": WIDTH, "height": 90, "title": "Training steps per second",
            "data": {"values": rows}, "mark": {"type": "rect", "color": "#e45756"},
            "encoding": {"x": _x(span), "x2": {"field": "t2"},
                         "y": {"field": "steps_per_s", "type": "quantitative", "title": "steps/s"}}}


def heatmap_chart(cells: list[dict], span: Span) -> dict | None:
    if not cells:
        return None
    return {"$schema": SCHEMA, "width": WIDTH, "height": {"step": 12}, "title": "Each CPU's busy % (peak per bin)",
            "data": {"values": cells}, "mark": "rect",
            "encoding": {"x": {"field": "t", "type": "quantitative", "title": "seconds from start",
                               "scale": {"domain": _domain(span)}}, "x2": {"field": "t2"},
                         "y": {"field": "cpu", "type": "ordinal", "title": "CPU"},
                         "color": {"field": "busy", "type": "quantitative", "title": "busy %",
                                   "scale": {"domain": [0, 100], "scheme": "viridis"}}}}


def memory_chart(rows: list[dict], bands: list[dict], span: Span) -> dict:
    fields = [("rss_gib", "job RSS")] + ([("mem_used_gib", "machine used")] if any(r.get("mem_used_gib") for r in rows)
                                          else [])
    return {"$schema": SCHEMA, "width": WIDTH, "height": 160, "title": "Memory (GiB, peak per bin)",
            "layer": [_bands_layer(bands, span),
                      {"data": {"values": rows},
                       "transform": _fold(fields),
                       "mark": "line", "params": [ZOOM],
                       "encoding": {"x": _x(span), "y": {"field": "gib", "type": "quantitative", "title": "GiB"},
                                    "stroke": _series_stroke(fields, "memory")}}]}


HELD = (("weights_bytes", "model weights"), ("optimizer_bytes", "optimizer variables"),
        ("input_arrays_bytes", "input arrays"), ("data_buffers_bytes", "tf.data buffers"),
        ("step_working_bytes", "step working memory"), ("residual_bytes", "the rest (framework, Python)"))


def held_chart(phases) -> dict | None:
    """What held the memory at each phase's RSS peak: one stacked bar per phase (its breakdown)."""
    rows = [{"phase": f"{i}: {p.name}", "held": label, "gib": _r(p.memory_breakdown[key] / 2**30), "order": n}
            for i, p in enumerate(phases) if p.memory_breakdown
            for n, (key, label) in enumerate(HELD) if p.memory_breakdown.get(key)]
    if not rows:
        return None
    return {"$schema": SCHEMA, "width": WIDTH - 250, "height": {"step": 16},  # room for the phase names, legend
            "title": "What held the memory at each phase's peak (GiB)", "data": {"values": rows},
            "mark": "bar",
            "encoding": {"y": {"field": "phase", "type": "nominal", "sort": None, "title": None},
                         "x": {"field": "gib", "type": "quantitative", "stack": "zero", "title": "GiB"},
                         "color": {"field": "held", "type": "nominal", "title": "held by",
                                   "sort": [label for _, label in HELD], "scale": {"scheme": "tableau10"}},
                         "order": {"field": "order"},
                         "tooltip": [{"field": "phase"}, {"field": "held"}, {"field": "gib", "title": "GiB"}]}}


def gpu_chart(rows: list[dict], bands: list[dict], span: Span) -> dict | None:
    """GPU utilisation (%) above GPU memory (GiB: the device's, and the job's own where NVML says)."""
    values = [r for r in rows if "gpu_util_peak" in r]
    if not values:
        return None
    memory = [("gpu_mem_gib", "device used")] + ([("gpu_job_gib", "the job's own")]
                                                  if any("gpu_job_gib" in r for r in values) else [])
    return {"$schema": SCHEMA, "title": "GPU (peak per bin over all GPUs)", "data": {"values": values},
            "vconcat": [
                {"width": WIDTH, "height": 110,
                 "layer": [_bands_layer(bands, span),
                           {"mark": {"type": "line", "color": "#54a24b"}, "encoding": {
                               "x": _x(span), "y": {"field": "gpu_util_peak", "type": "quantitative",
                                                    "title": "utilisation %", "scale": {"domain": [0, 100]}}}}]},
                {"width": WIDTH, "height": 110, "transform": _fold(memory),
                 "mark": "line",
                 "encoding": {"x": _x(span), "y": {"field": "gib", "type": "quantitative", "title": "GiB"},
                              "stroke": _series_stroke(memory, "GPU memory")}}]}


def histogram_chart(bars: list[dict]) -> dict | None:
    """Steps per bin of step time (ms): a log axis where the bins span more than 10x (a log scale has no
    zero to leave out, and Vega-Lite warns in the page's console when told to)."""
    if not bars:
        return None
    wide = bars[-1]["to_ms"] / bars[0]["from_ms"] > 10
    return {"$schema": SCHEMA, "width": WIDTH, "height": 150, "title": "Step times",
            "data": {"values": bars}, "mark": "rect",
            "encoding": {"x": {"field": "from_ms", "type": "quantitative", "title": "step (ms)",
                               "scale": {"type": "log"} if wide else {"type": "linear", "zero": False}},
                         "x2": {"field": "to_ms"}, "y": {"field": "steps", "type": "quantitative", "title": "steps"},
                         "tooltip": [{"field": "from_ms"}, {"field": "to_ms"}, {"field": "steps"}]}}


def overlay_chart(rows_by_run: dict[str, list[dict]], field: str, title: str, y_title: str) -> dict:
    """Two runs on one time axis (each from its own start)."""
    values = [{**r, "run": run} for run, rows in rows_by_run.items() for r in rows]
    return {"$schema": SCHEMA, "width": WIDTH, "height": 180, "title": title, "data": {"values": values},
            "mark": "line", "encoding": {"x": {"field": "t", "type": "quantitative", "title": "seconds from start"},
                                         "y": {"field": field, "type": "quantitative", "title": y_title},
                                         "color": {"field": "run", "type": "nominal"}}}


def stages_chart(rows: list[dict]) -> dict | None:
    """The pipeline's stages as timed on their own: one bar per stage, its own cost per batch (ms)."""
    values = [{"stage": f"{i}: {r['stage']}" + (f" {r['function']}" if r.get("function") else ""),
               "ms": _r(r["seconds_per_batch"] * 1000), "share": r.get("share"), "where": r.get("location") or "",
               "cores": r.get("cores")}
              for i, r in enumerate(rows) if r.get("seconds_per_batch") is not None]
    if not values:
        return None
    return {"$schema": SCHEMA, "width": WIDTH - 250, "height": {"step": 18},
            "title": "Input cost by pipeline stage (ms a batch, source first)", "data": {"values": values},
            "mark": "bar",
            "encoding": {"y": {"field": "stage", "type": "nominal", "sort": None, "title": None},
                         "x": {"field": "ms", "type": "quantitative", "title": "ms a batch"},
                         "tooltip": [{"field": "stage"}, {"field": "where"}, {"field": "ms"},
                                     {"field": "share", "format": ".0%"}, {"field": "cores"}]}}


def run_charts(report) -> dict[str, dict]:
    """Every chart of one run, by id (absent when there is nothing to draw)."""
    timeline = report.timeline
    wall = report.record.wall_seconds or timeline.get("wall_seconds") or 1.0
    span = (timeline.get("from_seconds") or 0.0, timeline.get("to_seconds") or wall)
    rows = timeline["series"]
    bands = phase_bands(report.phases)
    allowed = (report.record.env.get("host") or {}).get("cores_allowed")
    charts = {"cores": cores_chart(rows, bands, timeline["step_ticks"], span, allowed),
              "steps": step_rate_chart(timeline["step_rate"], span),
              "heatmap": heatmap_chart(timeline["heatmap"], span),
              "memory": memory_chart(rows, bands, span),
              "held": held_chart(report.phases),
              "gpu": gpu_chart(rows, bands, span),
              "histogram": histogram_chart(timeline["histogram"]),
              "stages": stages_chart(stage_table_rows(report.input_split))}
    return {k: v for k, v in charts.items() if v is not None}
