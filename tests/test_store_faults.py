"""A locked store never holds the monitor up: samples keep their cadence, the memory budget
still stops the job, and everything is stored once the lock is gone."""

import subprocess
import sys
import time

from tensorgauge.cli import main
from tensorgauge.store import Store

LOCK_SECONDS = 6.0
HOLD = ("import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        f"time.sleep({LOCK_SECONDS})\n"
        "conn.execute('COMMIT')\n")
GROW = ("import time\n"
        "held = []\n"
        "time.sleep(1.0)\n"
        "for _ in range(60):\n"
        "    held.append(bytearray(20 << 20))\n"
        "    time.sleep(0.1)\n")


def test_a_store_locked_for_seconds_holds_up_neither_sampling_nor_the_budget(store_path, capsys):
    Store.open(store_path).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    began = time.monotonic()
    code = main(["run", "--max-memory", "300MiB", "--", sys.executable, "-c", GROW])
    holder.wait(timeout=30)
    assert time.monotonic() - began >= LOCK_SECONDS - 0.5  # the end of the run waited for the store ...
    assert code == 128 + 9  # ... but the budget killed the job while it was locked
    record = Store.open(store_path).run("last")
    assert record.wall_seconds < LOCK_SECONDS - 1
    assert record.budget["stopped"] and record.budget["peak_bytes"] <= 1.15 * (300 << 20)
    expected = record.wall_seconds / record.interval_seconds
    assert record.samples_taken >= 0.95 * expected - 2, (record.samples_taken, expected)
    assert len(Store.open(store_path).samples(record.run_id)) == record.samples_taken  # nothing lost
    assert not record.samples_lost and record.recording_error is None
    assert "Traceback" not in capsys.readouterr().err
