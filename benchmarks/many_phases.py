"""A job with many phases, end to end: how long `run` takes after the job, and `show`.

    .venv/bin/python benchmarks/many_phases.py [PHASES] [ROUNDS]

The job opens PHASES (default 100,000) `tensorgauge.phase()` blocks, then idles to 5 s; each round
records it with `tensorgauge run` and times `tensorgauge show` of it. A reference loop is timed
beside each round: this VM's CPU speed varies by half from one minute to the next.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

JOB = """
import sys, time, tensorgauge
start = time.monotonic()
for i in range(int(sys.argv[1])):
    with tensorgauge.phase(f"p{i}"):
        pass
print(f"{time.monotonic() - start:.3f}", file=sys.stderr)
while time.monotonic() - start < 5:
    time.sleep(0.05)
"""


def reference_seconds() -> float:
    start = time.perf_counter()
    sum(range(3 * 10**7))
    return time.perf_counter() - start


def main() -> None:
    phases = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    from tensorgauge.store import Store

    after, shows = [], []
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "runs.db")
        for i in range(rounds):
            subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", store, "--", sys.executable,
                            "-c", JOB, str(phases)], check=True)
            ended = time.monotonic()
            record = Store.open(store).run("last")
            # The job's end on the monitor's clock: its start plus its wall time.
            after.append(ended - (record.t0_monotonic + record.wall_seconds))
            began = time.monotonic()
            subprocess.run([sys.executable, "-m", "tensorgauge", "show", record.run_id, "--store", store],
                           check=True, stdout=subprocess.DEVNULL)
            shows.append(time.monotonic() - began)
            print(f"round {i + 1}: run ended {after[-1]:.2f} s after the job; show {shows[-1]:.2f} s "
                  f"(reference loop {reference_seconds():.2f} s)")
    print(f"{phases} phases: run ends {statistics.median(after):.2f} s after the job, show "
          f"{statistics.median(shows):.2f} s (medians of {rounds})")


if __name__ == "__main__":
    main()
