"""What the no-cgroup memory budget costs per reading with shared pages counted once, and how far
fast-allocating jobs still pass it.

    .venv/bin/python benchmarks/budget_shared_pages.py [ROUNDS]

1. The forked-workers job (tests/jobs/forked_workers.py: 200 MiB in the parent, 8 fork workers): the
   time of one reading of the tree's summed RSS (statm), of the budget's figure in its steady state
   (:class:`~tensorgauge.sources.shared_memory.SharedOnce`), of a full PSS reading (smaps_rollup) and of
   psutil's ``memory_full_info``; and the figures each gives.
2. ROUNDS runs each (default 8) of a list of 1 MB bytearrays as fast as Python allocates and of 10 MB
   ones, under ``--max-memory 200MiB`` with TENSORGAUGE_NO_CGROUP=1: the job's own peak (its ru_maxrss)
   over the budget, median and range.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOBS = Path(__file__).parent.parent / "tests" / "jobs"
LIST_JOBS = {"1 MB list": "a = [bytearray(10**6) for _ in range(10**4)]",
             "10 MB bulk": "a = [bytearray(10**7) for _ in range(10**3)]"}


def per_reading(fn, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def shared_pages_cost() -> None:
    import psutil

    from tensorgauge.sources.process_tree import descendants, read_rss
    from tensorgauge.sources.shared_memory import SharedOnce, read_rollup

    job = subprocess.Popen([sys.executable, str(JOBS / "forked_workers.py"), "30"], stdout=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        while len(descendants(job.pid)) < 8:
            time.sleep(0.1)
        time.sleep(1.0)
        pids = [job.pid, *descendants(job.pid)]
        rss = lambda: {pid: read_rss(pid) or 0 for pid in pids}  # noqa: E731
        once = SharedOnce(time.monotonic)
        line = int((1 << 30) * 0.9)
        figure = once.charged(rss(), line)  # its first PSS reading
        rows = [("RSS sum (statm)", per_reading(rss, 200), sum(rss().values())),
                ("budget figure, steady (statm + SharedOnce)", per_reading(lambda: once.charged(rss(), line), 200),
                 once.charged(rss(), line)),
                ("PSS reading (smaps_rollup)", per_reading(lambda: [read_rollup(p) for p in pids], 10),
                 sum(read_rollup(p)[1] for p in pids)),
                ("psutil memory_full_info", per_reading(lambda: [psutil.Process(p).memory_full_info() for p in pids], 3),
                 sum(psutil.Process(p).memory_full_info().pss for p in pids))]
        print(f"forked workers, {len(pids)} processes (first budget figure {figure / 2**20:.1f} MiB):")
        for name, seconds, value in rows:
            print(f"  {name:45s} {seconds * 1e3:8.3f} ms a reading   {value / 2**20:8.1f} MiB")
        print(f"  PSS readings the budget took: {once.readings}")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def overshoots(rounds: int) -> None:
    from tensorgauge.store import Store

    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "runs.db")
        for name, code in LIST_JOBS.items():
            over = []
            for _ in range(rounds):
                subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", store, "--max-memory",
                                "200MiB", "--", sys.executable, "-c", code],
                               env={**os.environ, "TENSORGAUGE_NO_CGROUP": "1"}, check=False)
                record = Store.open(store).run("last")
                over.append(record.rss_max_bytes / record.budget["max_memory_bytes"] - 1)
            print(f"{name} under 200 MiB, no cgroup: the job's own peak over the budget {statistics.median(over):+.2%} "
                  f"median of {rounds} ({min(over):+.2%} to {max(over):+.2%})")


if __name__ == "__main__":
    shared_pages_cost()
    overshoots(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
