"""CPU the monitor itself uses at 0.1 s, as a share of one core.

Runs ``tensorgauge run`` in this process (the monitor) on jobs that sleep, and
reads this process's own CPU (RUSAGE_SELF: the job is not counted). Each job
runs for SECONDS and for 2 x SECONDS: the difference is the steady sampling
cost, without the one-off start (fingerprint, NVML probe, imports). Jobs: a
single-threaded Python and one with 40 threads (TensorFlow starts ~25), since
the tree walk reads one /proc file per thread.

    .venv/bin/python benchmarks/sampler_overhead.py [SECONDS]
"""

import resource
import sys
import tempfile
import time
from pathlib import Path

from tensorgauge.monitoring.runner import run
from tensorgauge.store import Store

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
JOBS = {
    "1 thread": "import sys, time; time.sleep(float(sys.argv[1]))",
    "40 threads": ("import sys, threading, time\n"
                   "[threading.Thread(target=time.sleep, args=(float(sys.argv[1]),)).start() for _ in range(40)]"),
}


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(Path(folder) / "runs.db")
        print(f"interval 0.1 s, {SECONDS:g} s per job")
        for label, code in JOBS.items():
            measured = []
            for seconds in (SECONDS, 2 * SECONDS):
                cpu0, t0 = own_cpu(), time.monotonic()
                result = run([sys.executable, "-c", code, str(seconds)], store, interval_seconds=0.1, hook=False)
                measured.append((own_cpu() - cpu0, time.monotonic() - t0, len(store.samples(result.record.run_id))))
            (cpu1, wall1, n1), (cpu2, wall2, n2) = measured
            cpu, wall, samples = cpu2 - cpu1, wall2 - wall1, n2 - n1
            print(f"{label:>10}: {100 * cpu / wall:.2f}% of one core steady ({1000 * cpu / samples:.2f} ms a sample); "
                  f"start-up {1000 * (cpu1 - n1 * cpu / samples):.0f} ms")


if __name__ == "__main__":
    main()
