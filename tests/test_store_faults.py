"""A locked store never holds the monitor up: samples keep their cadence, the memory budget
still stops the job, and everything is stored once the lock is gone."""

import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from tensorgauge.cli import main
from tensorgauge.store import Store
from tensorgauge.store.sqlite import SqliteBackend

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


FAST = ("import time\n"
        "held, start = [], time.monotonic()\n"
        "for i in range(150):  # 1 GB/s in 10 MB steps, up to 1.5 GB\n"
        "    held.append(bytearray(10 << 20))\n"
        "    time.sleep(max(0.0, start + (i + 1) * 0.01 - time.monotonic()))\n")


LIST = "held = [bytearray(10**6) for _ in range(10**4)]  # 1 MB at a time, as fast as Python goes\n"


@pytest.mark.parametrize("job", [FAST, LIST], ids=["bulk", "list"])
def test_without_a_cgroup_a_fast_allocating_job_stays_within_ten_percent(store_path, monkeypatch, job):
    """No root, no cgroup: the watchdog reads the tree's RSS between samples once it is near the budget."""
    monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    assert main(["run", "-q", "--max-memory", "400MiB", "--", sys.executable, "-c", job]) == 128 + 9
    record = Store.open(store_path).run("last")
    budget = record.budget
    assert record.tree_source == "procfs" and budget["stopped"] and "killed" in budget["reason"]
    assert budget["enforced_by"] == ["watchdog (graceful stop at 90%, kill past 100%)",
                                     "RLIMIT_DATA backstop at 1424 MiB"]
    assert budget["max_memory_bytes"] < budget["peak_bytes"] <= 1.10 * budget["max_memory_bytes"]


def test_the_data_limit_backstop_holds_a_job_whose_monitor_cannot_act(tmp_path):
    """The monitor stopped (SIGSTOP): without a cgroup, RLIMIT_DATA still ends the runaway."""
    from tensorgauge.monitoring.budget import BudgetWatch, data_backstop_bytes
    from tensorgauge.monitoring.limits import Budget

    watch = BudgetWatch(Budget(max_memory_bytes=256 << 20), str(tmp_path / "stop"), None)
    job = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); "
                            "a = [bytearray(10 << 20) for _ in range(400)]"], stdin=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    watch.apply(job.pid, None)  # no cgroup
    _, err = job.communicate("go\n", timeout=60)
    assert job.returncode == 1 and "MemoryError" in err  # stopped at 1.25 GiB, not 4 GiB
    assert data_backstop_bytes(256 << 20) == 1280 << 20


def test_a_postgres_outage_of_two_and_a_half_seconds_loses_no_sample(postgres_url, tmp_path):
    """Every connection to the store's database is cut for 2.5 s, and new ones refused (as a server restart
    does): the monitor connects again and stores every sample it took."""
    psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    name = f"outage-{time.monotonic_ns()}"
    monitor = subprocess.Popen([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", postgres_url,
                                "--name", name, "--", sys.executable, "-c", "import time; time.sleep(6)"])
    time.sleep(1.5)
    database = postgres_url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(postgres_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')  # refused meanwhile
        try:
            cut_until = time.monotonic() + 2.5
            while time.monotonic() < cut_until:
                # The monitor's sessions, not the server's own (an autovacuum worker runs as a superuser).
                admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s "
                              "AND backend_type = 'client backend' AND usename = current_user", (database,))
                time.sleep(0.02)
        finally:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    assert monitor.wait(timeout=60) == 0
    store = Store.open(postgres_url)
    record = store.run(name)
    assert record.complete and not record.samples_lost and record.recording_error is None
    assert len(store.samples(record.run_id)) == record.samples_taken >= 50


def test_a_write_transaction_that_reads_first_is_not_failed_by_a_writer_in_between(tmp_path):
    """Another monitor writing to the store between a transaction's read and its write: the transaction
    takes the write lock as it begins, so the other waits its turn and both rows land (a transaction that
    read first failed at once, "database is locked": 1 of 8 concurrent runs into a new store, in CI)."""
    path = tmp_path / "runs.db"
    backend = SqliteBackend(path, create=True)
    other = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    errors: list[Exception] = []

    def write_beside() -> None:
        try:
            other.execute("INSERT INTO runs VALUES ('beside', '2026-01-01', '{}')")
        except sqlite3.Error as exc:
            errors.append(exc)

    with backend.transaction():
        assert backend.query("SELECT count(*) FROM runs") == [(0,)]
        beside = threading.Thread(target=write_beside)
        beside.start()
        time.sleep(0.3)  # the other writer has had its chance: it waits for this transaction
        backend.execute("INSERT INTO runs VALUES ('own', '2026-01-01', '{}')")
    beside.join(timeout=10)
    assert not errors and not beside.is_alive()
    assert sorted(r[0] for r in backend.query("SELECT run_id FROM runs")) == ["beside", "own"]
    backend.close()
    other.close()


def test_a_new_store_opened_by_eight_processes_at_once_opens_in_each(tmp_path):
    """Eight monitors opening one new store at the same moment each switch it to WAL mode: SQLite refuses
    one of two at once, "database is locked", rather than wait on their locks (3 of 8 concurrent runs into
    a new store failed so, beside other tests' jobs). Each open waits its turn. Processes forked to begin
    together, a new store each round: before, 3 to 19 of the 240 opens failed in each of 7 runs of this test."""
    failed = []
    for round_ in range(30):
        path = tmp_path / f"round-{round_}" / "runs.db"
        begin = time.monotonic() + 0.05
        children = []
        for _ in range(8):
            pid = os.fork()
            if pid == 0:  # the child: opens the store as the others do, and says how that went by its exit code
                code = 1
                try:
                    time.sleep(max(0.0, begin - time.monotonic()))
                    SqliteBackend(path, create=True).close()
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
        failed += [os.waitpid(pid, 0)[1] != 0 for pid in children]
    assert not any(failed), f"{sum(failed)} of {len(failed)} opens failed"
