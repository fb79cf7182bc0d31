"""The run over time, at the resolution a page can show: what the report's charts draw.

Computed once per run (and stored with its analysis), so a report of a day's
run reads a few hundred KB, not 864,000 samples. Samples are grouped into at
most :data:`MAX_BINS` equal time bins; each bin keeps its peak (and the mean
and minimum where they mean something), so a one-second spike in a day still
shows. Step figures come from the step digests: steps per second from their
per-second counts, the histogram from their sketch's quantiles.
"""

from __future__ import annotations

import math

import numpy as np

from tensorgauge.series import SampleSeries
from tensorgauge.steps import StepDigest

MAX_BINS = 1500
MAX_HEATMAP_CELLS = 40_000
MAX_STEP_TICKS = 3000
HISTOGRAM_BINS = 50
HISTOGRAM_QUANTILES = 2000
GIB = float(2**30)


def _r(x: float | None, digits: int = 4) -> float | None:
    """Rounded to ``digits`` significant digits: smaller pages, same pictures."""
    if x is None or x == 0 or not math.isfinite(x):
        return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
    return round(x, max(0, digits - 1 - int(math.floor(math.log10(abs(x))))))


def _groups(t: np.ndarray, wall: float, count: int, start: float = 0.0) -> tuple[np.ndarray, np.ndarray, float]:
    """(first index of each non-empty bin, its bin number, bin width) of sorted times ``t`` in [start, wall]."""
    width = max(wall - start, float(t[-1]) - start, 1e-9) / count
    number = np.clip(((t - start) / width).astype(np.int64), 0, count - 1)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(number)) + 1])
    return starts, number[starts], width


def _reduce(values: np.ndarray, starts: np.ndarray, how: str) -> np.ndarray:
    """Per group (rows from each start to the next): NaN-ignoring max, min or mean (NaN: none reported)."""
    present = ~np.isnan(values)
    counts = np.add.reduceat(present, starts, axis=0)
    if how == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.add.reduceat(np.where(present, values, 0.0), starts, axis=0) / counts
    else:
        fill = -np.inf if how == "max" else np.inf
        reduce = np.maximum if how == "max" else np.minimum
        out = reduce.reduceat(np.where(present, values, fill), starts, axis=0).astype(np.float64)
    return np.where(counts > 0, out, np.nan)


def _gib(values: np.ndarray) -> list:
    return [_r(v / GIB) for v in values.tolist()]


def series_rows(samples: SampleSeries, wall: float, start: float = 0.0) -> list[dict]:
    """One row per bin: cores busy mean, minimum and peak, RSS peak and minimum, machine memory used,
    GPU util and memory peak (over all GPUs)."""
    if not len(samples):
        return []
    starts, _, _ = _groups(samples.t, wall, MAX_BINS, start)
    busy = samples["cores_busy"]
    columns = {"t": [_r(x) for x in samples.t[starts].tolist()],
               "cores_mean": [_r(x) for x in _reduce(busy, starts, "mean").tolist()],
               "cores_min": [_r(x) for x in _reduce(busy, starts, "min").tolist()],
               "cores_peak": [_r(x) for x in _reduce(busy, starts, "max").tolist()],
               "rss_gib": _gib(_reduce(samples["rss_bytes"], starts, "max")),
               "rss_min_gib": _gib(_reduce(samples["rss_bytes"], starts, "min")),
               "mem_used_gib": _gib(_reduce(samples["mem_used_bytes"], starts, "max"))}
    if samples.gpu_index:
        def over_gpus(name: str) -> np.ndarray:
            values = samples.gpu[name]
            return np.fmax.reduce(values, axis=1) if values.shape[1] else np.full(len(samples), np.nan)

        util = _reduce(over_gpus("util_percent"), starts, "max")
        columns["gpu_util_peak"] = [None if math.isnan(x) else x for x in util.tolist()]
        columns["gpu_mem_gib"] = _gib(_reduce(over_gpus("memory_used_bytes"), starts, "max"))
        job = _reduce(over_gpus("job_memory_bytes"), starts, "max")
        if np.any(~np.isnan(job)):
            columns["gpu_job_gib"] = _gib(job)
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    return [{k: v for k, v in row.items() if v is not None or k in ("cores_mean", "cores_peak", "mem_used_gib")}
            for row in rows]


def heatmap_cells(samples: SampleSeries, wall: float, start: float = 0.0) -> list[dict]:
    """Per CPU and bin: the peak busy percent."""
    cpus = samples.cpu_percent.shape[1]
    if not cpus or not len(samples) or np.all(np.isnan(samples.cpu_percent)):
        return []
    count = max(1, min(MAX_BINS, MAX_HEATMAP_CELLS // cpus, len(samples)))
    starts, numbers, width = _groups(samples.t, wall, count, start)
    peaks = _reduce(samples.cpu_percent, starts, "max")
    cells = []
    for number, row in zip(numbers.tolist(), peaks.tolist()):
        for cpu, value in enumerate(row):
            if not math.isnan(value):
                cells.append({"t": _r(start + number * width), "t2": _r(start + (number + 1) * width), "cpu": cpu,
                              "busy": _r(value, 3)})
    return cells


def step_rate_rows(digest: StepDigest, wall: float) -> list[dict]:
    """Steps per second in at most :data:`MAX_BINS` bins of whole seconds."""
    if not digest.rate:
        return []
    seconds = max(wall, max(digest.rate) + 1.0, 1.0)
    width = max(1, math.ceil(seconds / MAX_BINS))
    binned: dict[int, int] = {}
    for second, n in digest.rate.items():
        binned[second // width] = binned.get(second // width, 0) + n
    return [{"t": i * width, "t2": (i + 1) * width, "steps_per_s": _r(n / width)} for i, n in sorted(binned.items())]


def histogram_bars(digest: StepDigest, count: int = HISTOGRAM_BINS) -> list[dict]:
    """Step times in ``count`` bins (log scale when they span 10x), from the digest's quantiles."""
    values = [v for v in digest.quantiles(min(HISTOGRAM_QUANTILES, digest.count)) if v > 0]
    if not values:
        return []
    weight = digest.count / len(values)
    lo, hi = values[0], values[-1]
    if hi / lo > 10:
        a, b = math.log10(lo), math.log10(hi)
        edges = [10 ** (a + i * (b - a) / count) for i in range(count + 1)]
    else:
        edges = [lo + i * (hi - lo) / count for i in range(count + 1)] if hi > lo else [lo, lo]
    edges[-1] = hi
    positions = np.searchsorted(np.array(values), np.array(edges[1:-1]), side="right").tolist() + [len(values)]
    bars, below = [], 0
    for i, upto in enumerate(positions):
        if upto > below:
            bars.append({"from_ms": _r(edges[i] * 1000), "to_ms": _r(edges[i + 1] * 1000),
                         "steps": round((upto - below) * weight)})
        below = upto
    return bars


def step_ticks(digest: StepDigest) -> list[float]:
    """When each step ended, when every step's end is kept and there are few enough to draw."""
    ends = [e for e, _ in digest.first if not math.isnan(e)]
    if not ends or len(ends) != digest.count or len(ends) > MAX_STEP_TICKS:
        return []
    return [_r(e) or 0.0 for e in sorted(ends)]


def build(samples: SampleSeries, steps: StepDigest, wall: float) -> dict:
    """Everything the report draws over time (``steps``: every step of the run, merged)."""
    return {"wall_seconds": wall, "series": series_rows(samples, wall), "heatmap": heatmap_cells(samples, wall),
            "step_rate": step_rate_rows(steps, wall), "histogram": histogram_bars(steps),
            "step_ticks": step_ticks(steps)}


def window(samples: SampleSeries, whole: dict, start: float, end: float) -> dict:
    """The timeline of the stretch [start, end] of a run, from its samples there (at most
    :data:`MAX_BINS` of them per chart: a 2-minute window at 10 Hz is drawn sample by sample);
    the run's step charts are kept, cut to the window where they are over time."""
    return {**whole, "from_seconds": start, "to_seconds": end, "series": series_rows(samples, end, start),
            "heatmap": heatmap_cells(samples, end, start),
            "step_rate": [r for r in whole.get("step_rate", []) if r["t2"] > start and r["t"] < end],
            "step_ticks": [t for t in whole.get("step_ticks", []) if start <= t <= end]}
