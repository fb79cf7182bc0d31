"""Whole-run figures from the samples (and the kernel's exact CPU total)."""

from __future__ import annotations

import numpy as np

from tensorgauge.model import MemoryMeasure, RunRecord, Sample, Summary, shown_metrics
from tensorgauge.series import SampleSeries


def _peak(values: np.ndarray) -> float | None:
    present = values[~np.isnan(values)]
    return float(present.max()) if len(present) else None


def _mean(values: np.ndarray) -> float | None:
    present = values[~np.isnan(values)]
    return float(present.mean()) if len(present) else None


def summarise(record: RunRecord, samples: SampleSeries | list[Sample]) -> Summary:
    """CPU-seconds, cores busy (mean over the wall time, peak over one interval), peaks."""
    series = samples if isinstance(samples, SampleSeries) else SampleSeries.from_samples(samples)
    n = len(series)
    sampled_cpu = float(series["cpu_seconds"][-1]) if n else 0.0
    # The kernel's total at exit is exact; an incomplete run has only the samples.
    cpu = record.cpu_seconds_total if record.cpu_seconds_total is not None else sampled_cpu
    wall = record.wall_seconds if record.wall_seconds is not None else (float(series.t[-1]) if n else 0.0)
    mean = cpu / wall if wall > 0 else 0.0
    busy = _peak(series["cores_busy"])
    uss = _peak(series["uss_bytes"])
    processes = int(_peak(series["processes"]) or 0)
    # The job's own processes, as sampled. Not ru_maxrss: the forked child carries the
    # monitor's memory until it execs (25 MiB for `sleep 1`).
    return Summary(
        cpu_seconds=round(cpu, 4),
        cores_busy_mean=round(mean, 3),
        cores_busy_peak=round(max(busy if busy is not None else mean, mean), 3),
        rss_peak_bytes=int(_peak(series["rss_bytes"]) or 0),
        rss_peak_measure=memory_measure(record, processes),
        uss_peak_bytes=int(uss) if uss is not None else None,
        threads_peak=int(_peak(series["threads"]) or 0),
        processes_peak=processes,
        samples=n,
        gpu=summarise_gpus(series),
        other_cores_mean=other_cores(series),
        metrics={m.name: _mean_peak(series[m.name]) for m in shown_metrics()},
    )


def memory_measure(record: RunRecord, processes_peak: int) -> MemoryMeasure:
    """What the run's sampled memory counts: a run recorded before the measure was kept (or naming one this
    version does not know) summed each process's RSS, the same figure where the job ran one process at a time."""
    if record.memory_measure == "rss_shared_once" or processes_peak <= 1:
        return "rss_shared_once"
    return "rss_summed"


def _mean_peak(values: np.ndarray) -> dict[str, float | None]:
    """The mean and peak of the readings taken (None where none was)."""
    mean = _mean(values)
    return {"mean": round(mean, 4) if mean is not None else None, "peak": _peak(values)}


def other_cores(series: SampleSeries) -> float | None:
    """Cores busy with other work than the job's, on the CPUs it may use, on average: the machine's busy
    share of those CPUs less the job's own cores busy (None without per-CPU readings)."""
    if not len(series) or not series.cpu_percent.size:
        return None
    machine = np.nansum(series.cpu_percent, axis=1) / 100.0
    job = series["cores_busy"]
    read = ~np.isnan(job) & ~np.all(np.isnan(series.cpu_percent), axis=1)
    if not read.any():
        return None
    return round(float(np.clip(machine[read] - job[read], 0.0, None).mean()), 3)


def _last_name(series: SampleSeries, j: int) -> str | None:
    codes = series.gpu["name"][:, j]
    codes = codes[~np.isnan(codes)]
    return series.gpu_names[int(codes[-1])] if len(codes) else None


def summarise_gpus(series: SampleSeries) -> list[dict]:
    """Per GPU: utilisation mean/peak, memory peak (all processes, and the job's own) and total, power mean."""
    out = []
    for j, index in enumerate(series.gpu_index):
        util = series.gpu["util_percent"][:, j]
        mean, power = _mean(util), _mean(series.gpu["power_watts"][:, j])
        memory, job = _peak(series.gpu["memory_used_bytes"][:, j]), _peak(series.gpu["job_memory_bytes"][:, j])
        totals = series.gpu["memory_total_bytes"][:, j]
        totals = totals[~np.isnan(totals)]
        util_peak = _peak(util)
        out.append({
            "index": index,
            "name": _last_name(series, j),
            "util_percent_mean": round(mean, 1) if mean is not None else None,
            "util_percent_peak": util_peak,
            "memory_used_peak_bytes": int(memory) if memory is not None else None,
            "memory_total_bytes": int(totals[-1]) if len(totals) else None,
            "power_watts_mean": round(power, 1) if power is not None else None,
            "job_memory_peak_bytes": int(job) if job is not None else None,
        })
    return out
