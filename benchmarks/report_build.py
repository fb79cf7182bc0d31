"""Time and size of the HTML report for a one-hour run at 10 samples a second.

Builds a synthetic run in a temporary store: 36,000 samples (2 CPUs, a GPU),
an import, a fit with 60 epochs and 360,000 steps, a save; then times the
command ``tensorgauge report RUN -o FILE`` (a fresh process each round: load
from the store, analyse, chart, write) over several rounds, after one
untimed round that fills the JavaScript cache (vl-convert bundles Vega once
per machine, ~3 s). Goal: <= 2 s and <= 5 MB.

    .venv/bin/python benchmarks/report_build.py [ROUNDS]
"""

import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorgauge.model import Event, GpuReading, RunRecord, Sample
from tensorgauge.store import Store

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
HOUR, RATE = 3600.0, 10


def synthetic_run(store: Store) -> str:
    record = RunRecord(run_id="hour", command=["python", "train.py"], started_at="2026-11-26T00:00:00+00:00",
                       name="one hour", wall_seconds=HOUR, complete=True, exit_code=0, t0_monotonic=1000.0,
                       env={"host": {"cores_allowed": 2.0}, "job": {}})
    samples = [Sample(t=i / RATE, cpu_seconds=i / RATE * 1.5, cores_busy=1.5 + 0.4 * math.sin(i / 50),
                      rss_bytes=int(2e9 + 1e6 * math.sin(i / 500)), threads=40, processes=1,
                      mem_used_bytes=int(6e9), mem_available_bytes=int(18e9),
                      cpu_percent=[70 + 30 * math.sin(i / 40), 80.0],
                      gpus=[GpuReading(index=0, name="H100", util_percent=90.0, memory_used_bytes=int(3e10),
                                       memory_total_bytes=int(8e10), power_watts=300.0)])
               for i in range(int(HOUR * RATE))]
    events = [Event(t=0.1, pid=1, kind="phase_begin", data={"id": 1, "name": "import tensorflow", "phase_kind": "import"}),
              Event(t=4.0, pid=1, kind="phase_end", data={"id": 1}),
              Event(t=5.0, pid=1, kind="phase_begin", data={"id": 2, "name": "fit", "phase_kind": "fit"})]
    step = (HOUR - 20) / 360_000
    for epoch in range(60):
        start = 5.0 + epoch * 6000 * step
        events.append(Event(t=start, pid=1, kind="phase_begin", data={"id": 3 + epoch, "name": f"epoch {epoch + 1}",
                                                                      "phase_kind": "epoch"}))
        for chunk in range(60):
            first = start + chunk * 100 * step
            events.append(Event(t=first + 100 * step, pid=1, kind="steps",
                                data={"phase": 3 + epoch, "seconds": [step] * 100,
                                      "ends": [round(first + (k + 1) * step, 6) for k in range(100)]}))
        events.append(Event(t=start + 6000 * step, pid=1, kind="phase_end", data={"id": 3 + epoch}))
    events += [Event(t=HOUR - 15, pid=1, kind="phase_end", data={"id": 2}),
               Event(t=HOUR - 10, pid=1, kind="phase_begin", data={"id": 99, "name": "save m.keras",
                                                                    "phase_kind": "save"}),
               Event(t=HOUR - 9, pid=1, kind="phase_end", data={"id": 99})]
    store.import_run(record, samples, events)
    return record.run_id


def main_() -> None:
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "runs.db"
        run_id = synthetic_run(Store.open(db))
        out = Path(folder) / "hour.html"
        command = [sys.executable, "-m", "tensorgauge", "report", "--store", str(db), run_id, "-o", str(out)]
        subprocess.run(command, check=True, capture_output=True)  # the JavaScript cache, once per machine
        times = []
        for round_ in range(ROUNDS):
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
            print(f"round {round_ + 1}/{ROUNDS}: {times[-1]:.2f} s, {out.stat().st_size / 1e6:.2f} MB", flush=True)
        print(f"one-hour run (36,000 samples, 360,000 steps): median {statistics.median(times):.2f} s "
              f"(min {min(times):.2f}, max {max(times):.2f}), {out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main_()
