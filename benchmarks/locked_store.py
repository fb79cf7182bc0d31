"""Sampling cadence and the memory budget while the store is locked by another process.

    .venv/bin/python benchmarks/locked_store.py [LOCK_SECONDS]

Another process holds an exclusive lock on the SQLite store for LOCK_SECONDS (default 30)
while `tensorgauge run --max-memory 600MiB` records a job that sleeps and then grows by 20 MB
every 0.1 s for longer than the lock. Prints the samples taken against the count the wall time
calls for, whether the budget stopped the job while the lock was held, and what was stored.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

HOLD = ("import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "conn.execute('COMMIT')\n")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    from tensorgauge.store import Store

    grow_after = seconds / 2  # the job stays inside its budget for the first half of the lock
    job = (f"import time\nheld = []\ntime.sleep({grow_after})\n"
           "for _ in range(200):\n    held.append(bytearray(20 << 20))\n    time.sleep(0.1)\n")
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "runs.db")
        Store.open(store).close()
        holder = subprocess.Popen([sys.executable, "-c", HOLD, store, str(seconds)], stdout=subprocess.PIPE,
                                  text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()
        code = subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", store, "--max-memory",
                               "600MiB", "--", sys.executable, "-c", job]).returncode
        holder.wait()
        record = Store.open(store).run("last")
        started_after = (record.t0_monotonic or locked_at) - locked_at  # the same system-wide clock
        stored = len(Store.open(store).samples(record.run_id))
    expected = (record.wall_seconds or 0) / record.interval_seconds
    budget = record.budget or {}
    during = record.wall_seconds < seconds - started_after
    print(f"store locked {seconds:g} s; the run started {started_after:.1f} s into the lock; job exit {code}, "
          f"ended {record.wall_seconds:.1f} s after its start, {'while' if during else 'after'} the lock was held")
    print(f"samples taken {record.samples_taken} of {expected:.0f} the wall time calls for "
          f"({record.samples_taken / expected:.1%}); stored {stored}; lost {record.samples_lost or 0}")
    print(f"budget: stopped {budget.get('stopped')}, {budget.get('reason')}; peak {budget.get('peak_bytes', 0) >> 20} "
          f"MiB of {budget.get('max_memory_bytes', 0) >> 20} MiB")


if __name__ == "__main__":
    main()
