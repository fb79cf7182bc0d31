"""A day-long run (or a week), built through the paths a recorded run takes, then read back.

    .venv/bin/python benchmarks/long_run.py HOURS [--gpus N] [--bundle-v1] [--keep DIR]

Builds a synthetic run of HOURS at 10 samples a second (2 CPUs; N GPUs per sample, default 0),
100 training steps a second, 60 epochs an hour: the monitor's Recorder takes the samples and the
hook's raw events (phase begin/end, a `steps` event every half second) on a fake clock and writes
them into a fresh SQLite store, as `tensorgauge run` does; the run's end chunks the last samples and
stores its analysis. Then times `tensorgauge show`, `report` and `export` of it, `import` of that
bundle into a fresh store and the first `show` there, each in a process of its own (wall seconds
and peak RSS), the store's and outputs' sizes, and `show --from 3h10m
--to 3h12m` (every sample of 2 minutes). With --bundle-v1, also writes the run as a
`tensorgauge.bundle/1` file (every sample an object, every step's time in `steps` events, as 0.1.0
exported it) and times its import. Last, checks the stored phase figures against ones computed
from the full-resolution data by a plain loop.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SAMPLES_PER_SECOND = 10
STEPS_PER_SECOND = 100
EPOCH_SECONDS = 60.0


def synthetic_run(store, hours: float, gpus: int, v1_events: list | None = None, v1_samples: list | None = None):
    """Record the run through a Recorder on a fake clock; returns its run id."""
    from tensorgauge.model import GpuReading, RunRecord, Sample
    from tensorgauge.monitoring.recorder import Recorder
    from tensorgauge.testing import FakeClock

    rng = random.Random(1)
    record = RunRecord(run_id="long-run", command=["python", "train.py"], started_at="2026-11-26T00:00:00+00:00",
                       name=f"{hours:g}h", env={"host": {"cores_allowed": 2.0, "cores_logical": 2}})
    store.save_run(record)
    clock = FakeClock(0.0)
    recorder = Recorder(store, record, t0=0.0, clock=clock)
    total = int(hours * 3600 * SAMPLES_PER_SECOND)
    cpu, rss, read, written, phase_id, epoch_end = 0.0, 1_500_000_000, 0, 0, 1, 0.0
    raw: list[dict] = [{"t": 0.0, "pid": 7, "kind": "phase_begin", "id": 1, "name": "fit", "phase_kind": "fit",
                        "cpu": 0.0, "rss": rss}]
    samples: list = []
    step_end = 0.0
    hourly_rss: list[int] = []  # this process's RSS (the recorder's side of a monitor) each hour
    for i in range(total):
        if i % (3600 * SAMPLES_PER_SECOND) == 0:
            hourly_rss.append(psutil.Process().memory_info().rss)
        t = round(i / SAMPLES_PER_SECOND + rng.uniform(0, 0.002), 6)
        if t >= epoch_end:  # a new epoch
            if phase_id > 1:
                raw.append({"t": t, "pid": 7, "kind": "phase_end", "id": phase_id, "cpu": cpu, "rss": rss})
            phase_id += 1
            epoch_end += EPOCH_SECONDS
            raw.append({"t": t, "pid": 7, "kind": "phase_begin", "id": phase_id, "name": f"epoch {phase_id - 1}",
                        "phase_kind": "epoch", "parent": 1, "cpu": cpu, "rss": rss})
        busy = round(rng.uniform(1.7, 1.9), 2)
        cpu = round(cpu + busy / SAMPLES_PER_SECOND, 2)
        rss += rng.choice((0, 0, 0, 4096, -4096, 1 << 20, -(1 << 20)))
        slow = i % SAMPLES_PER_SECOND == 0
        if slow:
            read += rng.randrange(1 << 20)
            written += rng.randrange(1 << 16)
        samples.append(Sample(
            t=t, cpu_seconds=cpu, cores_busy=busy, rss_bytes=rss, threads=40, processes=1,
            read_bytes=read if slow else None, write_bytes=written if slow else None,
            uss_bytes=rss - 200_000_000 if i % 50 == 0 else None, pss_bytes=rss - 100_000_000 if i % 50 == 0 else None,
            mem_used_bytes=8_000_000_000 + rng.randrange(1 << 24) if slow else None,
            mem_available_bytes=16_000_000_000 - rng.randrange(1 << 24) if slow else None,
            swap_used_bytes=0 if slow else None, runnable=rng.randrange(1, 4) if slow else None,
            cpu_percent=[round(rng.uniform(80, 100), 1), round(rng.uniform(80, 100), 1)],
            gpus=[GpuReading(index=g, name="NVIDIA H100 80GB HBM3", util_percent=float(rng.randrange(90, 100)),
                             memory_used_bytes=70_000_000_000 + (rng.randrange(16) << 20),
                             memory_total_bytes=85_520_809_984, power_watts=float(rng.randrange(500, 600)),
                             job_memory_bytes=69_000_000_000) for g in range(gpus)]))
        if (i + 1) % (SAMPLES_PER_SECOND // 2) == 0:  # every half second: a commit, with half a second of steps
            seconds = [round(rng.lognormvariate(-4.65, 0.15), 7) for _ in range(STEPS_PER_SECOND // 2)]
            ends = [step_end + (k + 1) / STEPS_PER_SECOND for k in range(len(seconds))]
            step_end = ends[-1]
            raw.append({"t": t, "pid": 7, "kind": "steps", "phase": phase_id, "seconds": seconds, "ends": ends})
            if v1_events is not None:
                v1_events.extend(dict(e) for e in raw)
            if v1_samples is not None:
                v1_samples.extend(samples)
            clock.t = t
            recorder.add(samples, raw)
            samples, raw = [], []
    raw.append({"t": clock.t, "pid": 7, "kind": "phase_end", "id": phase_id, "cpu": cpu, "rss": rss})
    raw.append({"t": clock.t, "pid": 7, "kind": "phase_end", "id": 1, "cpu": cpu, "rss": rss})
    recorder.add(samples, raw, force=True)
    if v1_events is not None:
        v1_events.extend(dict(e) for e in raw)
        v1_samples.extend(samples)
    record.wall_seconds, record.cpu_seconds_total, record.complete, record.exit_code = clock.t, cpu, True, 0
    store.save_run(record)  # the run's end: its last rows are chunked
    return record.run_id, hourly_rss


_WRAPPER = ("import resource, subprocess, sys, time\n"
            "start = time.perf_counter()\n"
            "code = subprocess.run(sys.argv[1:]).returncode\n"
            "print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,\n"
            "      code, file=sys.stderr)\n")


def timed(command: list[str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout) of a command, started from a small wrapper process
    (a child forked from this one would carry this process's memory until it execs)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        subprocess.run([sys.executable, "-c", _WRAPPER, *command], stdout=out, stderr=err, text=True)
        out.seek(0)
        err.seek(0)
        lines = err.read().strip().splitlines()
        wall, peak, code = lines[-1].split()
        if int(code) != 0:
            raise SystemExit(f"{' '.join(command)} failed: {' '.join(lines[-5:])[-400:]}")
        return float(wall), int(peak), out.read()


def tg(*args: str) -> list[str]:
    return [sys.executable, "-m", "tensorgauge", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("hours", type=float)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--bundle-v1", action="store_true")
    parser.add_argument("--keep", metavar="DIR")
    options = parser.parse_args()
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store import Store

    folder = Path(options.keep or tempfile.mkdtemp(prefix="tg-long-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "runs.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    store = Store.open(path)
    v1_events: list | None = [] if options.bundle_v1 else None
    v1_samples: list | None = [] if options.bundle_v1 else None
    start = time.perf_counter()
    run_id, hourly_rss = synthetic_run(store, options.hours, options.gpus, v1_events, v1_samples)
    built = time.perf_counter() - start
    start = time.perf_counter()
    RunReport.load(store, run_id)  # what `tensorgauge run` does at the end: analyse once, store it
    analysed = time.perf_counter() - start
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.conn.execute("VACUUM")
    store.close()
    size = sum(os.path.getsize(str(path) + s) for s in ("", "-wal") if os.path.exists(str(path) + s))
    samples = int(options.hours * 3600 * SAMPLES_PER_SECOND)
    print(f"{options.hours:g} h, {options.gpus} GPUs: {samples:,} samples, {samples * 10:,} steps; built in "
          f"{built:.1f} s, analysed at the end in {analysed:.2f} s")
    if options.bundle_v1:
        print("recorder's process RSS: not measured with --bundle-v1 (it keeps every sample for the bundle)")
    else:
        rss_mib = [r / 2**20 for r in hourly_rss]
        print(f"recorder's process RSS at each hour: after 1 h {rss_mib[min(1, len(rss_mib) - 1)]:.0f} MiB, "
              f"last {rss_mib[-1]:.0f} MiB (range over hours 1..: {min(rss_mib[1:] or rss_mib):.0f}-"
              f"{max(rss_mib[1:] or rss_mib):.0f} MiB)")
    print(f"store: {size / 1e6:.1f} MB ({size / samples:.1f} bytes a sample, steps and events included)")

    wall, peak, out = timed(tg("show", "--store", str(path), run_id))
    print(f"show: {wall:.2f} s, {peak / 2**20:.0f} MiB RSS")
    html = folder / "report.html"
    wall, peak, _ = timed(tg("report", "--store", str(path), run_id, "-o", str(html)))
    print(f"report: {wall:.2f} s, {html.stat().st_size / 1e6:.2f} MB, {peak / 2**20:.0f} MiB RSS")
    bundle = folder / "bundle.json"
    wall, peak, _ = timed(tg("export", "--store", str(path), run_id, "-o", str(bundle)))
    print(f"export: {wall:.2f} s, {bundle.stat().st_size / 1e6:.1f} MB, {peak / 2**20:.0f} MiB RSS")
    other = folder / "imported.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(other) + suffix).unlink(missing_ok=True)
    wall, peak, _ = timed(tg("import", "--store", str(other), str(bundle)))
    print(f"import of that bundle: {wall:.2f} s, {peak / 2**20:.0f} MiB RSS")
    wall, peak, _ = timed(tg("show", "--store", str(other), run_id))
    print(f"first show after the import: {wall:.2f} s, {peak / 2**20:.0f} MiB RSS")
    if options.hours * 3600 >= 3 * 3600 + 12 * 60:
        wall, peak, out = timed(tg("show", "--store", str(path), run_id, "--from", "3h10m", "--to", "3h12m",
                                   "--json"))
        shown = json.loads(out)["samples"]
        print(f"show --from 3h10m --to 3h12m: {len(shown)} samples ({len(shown) / 120:.1f} a second), "
              f"{wall:.2f} s, {peak / 2**20:.0f} MiB RSS")

    # The stored phase figures against a plain loop over the full-resolution samples and steps.
    store = Store.open(path)
    report = RunReport.load(store, run_id)
    full = store.samples(run_id)
    epochs = [p for p in report.phases if p.kind == "epoch"]
    worst = 0.0
    for p in epochs[:: max(1, len(epochs) // 20)]:
        inside = [s for s in full if p.start < s.t <= p.end]
        ends = [b for b in (p.rss_start_bytes, p.rss_end_bytes) if b]  # the hook's readings at its ends
        assert max([s.rss_bytes for s in inside] + ends) == p.rss_peak_bytes
        assert max(s.cores_busy for s in inside) == p.cores_busy_peak or p.cores_busy_peak == p.cores_busy_mean
    # CPU-s of a phase: the job's CPU clock at its end minus at its start, as the hook reported them.
    phase_cpu: dict[int, list[float]] = {}
    for e in store.events(run_id, step_digests=False):
        if e.kind not in ("phase_begin", "phase_end"):
            continue
        phase_cpu.setdefault(e.data["id"], []).append(e.data["cpu"])
    for p, (begin, end) in zip(epochs, (phase_cpu[i] for i in range(2, len(epochs) + 2))):
        assert abs(p.cpu_seconds - (end - begin)) < 1e-6, (p.name, p.cpu_seconds, end - begin)
    if v1_events is not None:
        by_phase: dict = {}
        for e in v1_events:
            if e["kind"] == "steps":
                by_phase.setdefault(e["phase"], []).extend(e["seconds"])
        for p in epochs:
            values = sorted(by_phase.get(int(p.name.split()[1]) + 1, []))
            if not values:
                continue
            for q, got in ((0.5, p.step_seconds_p50), (0.95, p.step_seconds_p95)):
                exact = values[max(0, int(q * len(values) + 0.5) - 1)]
                worst = max(worst, abs(got - exact) / exact)
            assert p.steps == len(values) and p.step_seconds_max == round(values[-1], 6)
        print(f"phase figures: CPU-s, RSS and cores peaks equal the full-resolution ones; step p50/p95 within "
              f"{100 * worst:.2f}% of the exact ones over {len(epochs)} epochs; counts and maxima exact")
        old = folder / "bundle-v1.json"
        with open(old, "w") as f:
            events = []
            for e in v1_events:
                data = {k: v for k, v in e.items() if k not in ("t", "pid", "kind")}
                events.append({"t": e["t"], "pid": e["pid"], "kind": e["kind"], "data": data})
            record = store.run(run_id).to_dict()
            json.dump({"schema": "tensorgauge.bundle/1", "run": record,
                       "samples": [s.to_dict() for s in v1_samples], "events": events}, f)
        del v1_samples[:], v1_events[:]
        other = folder / "imported.db"
        Path(other).unlink(missing_ok=True)
        wall, peak, _ = timed(tg("import", "--store", str(other), str(old)))
        print(f"import of the bundle/1 form ({old.stat().st_size / 1e6:.0f} MB): {wall:.1f} s, "
              f"{peak / 2**20:.0f} MiB RSS")
    print(f"(files in {folder})")


if __name__ == "__main__":
    main()
