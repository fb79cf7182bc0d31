"""How far a memory budget's peak passes the budget without a cgroup (as for a user without root).

    .venv/bin/python benchmarks/memory_budget.py [ROUNDS] [BUDGET_MIB] [GB_PER_SECOND]

A job allocates GB_PER_SECOND (default 1) in 10 MB steps under `tensorgauge run --max-memory
BUDGET_MIB` (default 2048) with TENSORGAUGE_NO_CGROUP=1; prints each round's peak (the highest RSS
the watchdog read) and its overshoot over the budget.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

JOB = """
import sys, time
rate = float(sys.argv[1])
held, start = [], time.monotonic()
for i in range(100_000):
    held.append(bytearray(10 << 20))
    time.sleep(max(0.0, start + (i + 1) * 0.01 / rate - time.monotonic()))
"""


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    budget_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    from tensorgauge.store import Store

    overshoots = []
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "runs.db")
        for i in range(rounds):
            subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", store, "--max-memory",
                            f"{budget_mib}MiB", "--", sys.executable, "-c", JOB, str(rate)],
                           env={**os.environ, "TENSORGAUGE_NO_CGROUP": "1"}, check=False)
            budget = Store.open(store).run("last").budget or {}
            over = (budget["peak_bytes"] - budget["max_memory_bytes"]) / budget["max_memory_bytes"]
            overshoots.append(over)
            print(f"round {i + 1}: peak {budget['peak_bytes'] / 2**20:.1f} MiB, {over:+.1%} of the budget, "
                  f"{budget.get('reason')}")
    print(f"median overshoot {statistics.median(overshoots):+.1%} (max {max(overshoots):+.1%}) at {rate:g} GB/s "
          f"under {budget_mib} MiB, no cgroup")


if __name__ == "__main__":
    main()
