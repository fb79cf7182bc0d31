"""Whole-run figures from the samples (and the kernel's exact CPU total)."""

from __future__ import annotations

from tensorgauge.model import RunRecord, Sample, Summary


def summarise(record: RunRecord, samples: list[Sample]) -> Summary:
    """CPU-seconds, cores busy (mean over the wall time, peak over one interval), peaks."""
    sampled_cpu = samples[-1].cpu_seconds if samples else 0.0
    # The kernel's total at exit is exact; an incomplete run has only the samples.
    cpu = record.cpu_seconds_total if record.cpu_seconds_total is not None else sampled_cpu
    wall = record.wall_seconds if record.wall_seconds is not None else (samples[-1].t if samples else 0.0)
    mean = cpu / wall if wall > 0 else 0.0
    busy = [s.cores_busy for s in samples if s.cores_busy is not None]
    uss = [s.uss_bytes for s in samples if s.uss_bytes is not None]
    # The job's own processes, as sampled. Not ru_maxrss: the forked child carries the
    # monitor's memory until it execs (25 MiB for `sleep 1`).
    rss_peak = max((s.rss_bytes for s in samples), default=0)
    return Summary(
        cpu_seconds=round(cpu, 4),
        cores_busy_mean=round(mean, 3),
        cores_busy_peak=round(max(busy + [mean]), 3),
        rss_peak_bytes=rss_peak,
        uss_peak_bytes=max(uss) if uss else None,
        threads_peak=max((s.threads for s in samples), default=0),
        processes_peak=max((s.processes for s in samples), default=0),
        samples=len(samples),
        gpu=summarise_gpus(samples),
    )


def summarise_gpus(samples: list[Sample]) -> list[dict]:
    """Per GPU: utilisation mean/peak, memory peak (all processes, and the job's own) and total, power mean."""
    by_index: dict[int, list] = {}
    for sample in samples:
        for gpu in sample.gpus:
            by_index.setdefault(gpu.index, []).append(gpu)
    out = []
    for index, readings in sorted(by_index.items()):
        util = [g.util_percent for g in readings if g.util_percent is not None]
        mem = [g.memory_used_bytes for g in readings if g.memory_used_bytes is not None]
        power = [g.power_watts for g in readings if g.power_watts is not None]
        job = [g.job_memory_bytes for g in readings if g.job_memory_bytes is not None]
        out.append({
            "index": index,
            "name": readings[-1].name,
            "util_percent_mean": round(sum(util) / len(util), 1) if util else None,
            "util_percent_peak": max(util) if util else None,
            "memory_used_peak_bytes": max(mem) if mem else None,
            "memory_total_bytes": readings[-1].memory_total_bytes,
            "power_watts_mean": round(sum(power) / len(power), 1) if power else None,
            "job_memory_peak_bytes": max(job) if job else None,
        })
    return out
