"""The local spool of a PostgreSQL recording against a disk that refuses it, and the spools runs left
behind: real monitor processes, a real server, a real full filesystem (a tmpfs mounted here, root only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensorgauge.store import Store

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the monitor runs on Linux")


def mount_tmpfs(folder: Path, options: str) -> Path:
    """A tmpfs at ``folder`` (made), mode 0700; skipped where this process may not mount."""
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"{options},mode=0700", "tmpfs", str(folder)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {made.stderr.decode().strip()}")
    return folder


def fill(folder: Path) -> None:
    """Every free block of ``folder``'s filesystem taken, by one file."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while f.write(b"\0" * 4096):
                pass
        except OSError:
            pass


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB filesystem for the data folder (the spool's), unmounted after the test."""
    folder = mount_tmpfs(tmp_path / "disk", "size=1m")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


def recording(url: str, data: Path, name: str, job: str, **env: str) -> subprocess.Popen:
    """``tensorgauge run`` of a Python ``job`` into ``url``, with ``data`` as its data folder."""
    return subprocess.Popen([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", url, "--name", name, "--",
                             sys.executable, "-c", job],
                            env={**os.environ, "XDG_DATA_HOME": str(data), "PYTHONPATH": str(ROOT), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stored_whole(url: str, name: str) -> tuple[int, int]:
    """(samples the run took, samples the store has) of the run named ``name``, checked complete and
    with nothing lost."""
    with Store.open(url, create=False) as store:
        record = store.run(name)
        assert record.complete and record.samples_lost is None and record.recording_error is None, record
        return record.samples_taken or 0, len(store.samples(record.run_id))


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("disk", ["no free block", "no free inode"])
def test_a_full_disk_under_the_spool_loses_no_sample_while_the_store_answers(postgres_url, tmp_path, disk):
    """The spool's file (or its folder) cannot be made: the run was lost whole ("33 of 33 samples were
    lost"); its data are now held in memory and shipped, and stderr says so."""
    options = "size=256k" if disk == "no free block" else "size=1m,nr_inodes=1"
    data = mount_tmpfs(tmp_path / "full", options)
    try:
        if disk == "no free block":
            (data / "tensorgauge" / "spool").mkdir(parents=True, mode=0o700)
            fill(data)
        name = f"full-{disk[3:7]}-{time.monotonic_ns()}"
        monitor = recording(postgres_url, data, name, "import time; time.sleep(2)")
        _, err = monitor.communicate(timeout=120)
        assert monitor.returncode == 0, err
        assert "held in memory until the store takes them" in err and "lost" not in err, err
        taken, stored = stored_whole(postgres_url, name)
        assert stored == taken >= 10
        assert not list(data.glob("tensorgauge/spool/*.db"))  # nothing left behind for a later run
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True)


def test_a_disk_that_fills_during_the_run_loses_no_sample_and_keeps_their_order(postgres_url, tmp_path,
                                                                                small_disk):
    """The first batches reach the spool's file, the later ones are refused by the full disk: all are
    shipped at the run's end, once each, in the order taken."""
    mark = tmp_path / "filled"
    job = f"import os, time\nwhile not os.path.exists({str(mark)!r}): time.sleep(0.05)\ntime.sleep(2)"
    name = f"fills-{time.monotonic_ns()}"
    monitor = recording(postgres_url, small_disk, name, job, TENSORGAUGE_SHIP_SECONDS="600")  # all at the end
    spool = small_disk / "tensorgauge" / "spool"
    wait_for(lambda: _samples_waiting(spool), "the spool's first batch")
    fill(small_disk)
    mark.touch()
    _, err = monitor.communicate(timeout=120)
    assert monitor.returncode == 0, err
    assert "database or disk is full: the run's data are held in memory" in err, err
    taken, stored = stored_whole(postgres_url, name)
    assert stored == taken >= 20
    with Store.open(postgres_url, create=False) as store:
        times = [s.t for s in store.samples(store.run(name).run_id)]
    assert times == sorted(set(times))


def _kill_recording(monitor: subprocess.Popen) -> None:
    """SIGKILL the monitor and its job (as a machine's crash ends both)."""
    import psutil

    job = psutil.Process(monitor.pid).children(recursive=True)
    monitor.send_signal(signal.SIGKILL)
    monitor.wait(timeout=30)
    for process in job:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def _left_by_an_outage(url: str, data: Path, name: str) -> Path:
    """A run recorded while its database refused connections, its monitor killed: its spool is left."""
    import psycopg

    database = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            monitor = recording(url, data, name, "import time; time.sleep(60)")
            spool = data / "tensorgauge" / "spool"
            wait_for(lambda: _samples_waiting(spool), "the outage run's first batch")
            time.sleep(1.0)  # a few more
            _kill_recording(monitor)
        finally:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    (left,) = spool.glob("*.db")
    return left


def _samples_waiting(folder: Path) -> int:
    """The samples the spools in ``folder`` hold (read only: the monitor may be writing them)."""
    import sqlite3

    total = 0
    for spool in folder.glob("*.db"):
        try:
            conn = sqlite3.connect(f"file:{spool}?mode=ro", uri=True, timeout=5.0)
            try:
                total += conn.execute("SELECT COALESCE(SUM(samples), 0) FROM batches").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error:  # made, not yet its tables
            pass
    return total


def test_a_spool_left_by_an_outage_is_shipped_by_a_next_run_of_a_split_second(postgres_url, tmp_path):
    """Spools left by an outage were shipped only by a run of over ~5 s (after its first shipment): a
    0.03 s run and four 3 s runs left them. The next run ships them as it ends, whatever its length."""
    data = tmp_path / "data"
    left = _left_by_an_outage(postgres_url, data, f"outage-{time.monotonic_ns()}")
    waiting = _samples_waiting(left.parent)
    assert waiting >= 5
    name = f"after-{time.monotonic_ns()}"
    began = time.monotonic()
    short = recording(postgres_url, data, name, "pass")
    _, err = short.communicate(timeout=120)
    assert short.returncode == 0, err
    assert time.monotonic() - began < 60
    assert not left.exists()
    with Store.open(postgres_url, create=False) as store:
        assert len(store.samples(left.stem)) == waiting
        assert store.run(left.stem).command[-1] == "import time; time.sleep(60)"
    stored_whole(postgres_url, name)


def test_tensorgauge_ship_ships_a_left_spool_now_and_runs_names_it_until_then(postgres_url, tmp_path, capsys):
    data = tmp_path / "data"
    left = _left_by_an_outage(postgres_url, data, f"outage-{time.monotonic_ns()}")
    waiting = _samples_waiting(left.parent)
    env = {**os.environ, "XDG_DATA_HOME": str(data), "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([sys.executable, "-m", "tensorgauge", "runs", "--store", postgres_url], env=env,
                            capture_output=True, text=True, timeout=60)
    assert f"run {left.stem}: {waiting} samples wait" in listed.stdout + listed.stderr
    assert "'tensorgauge ship'" in listed.stdout + listed.stderr
    shipped = subprocess.run([sys.executable, "-m", "tensorgauge", "ship", "--store", postgres_url], env=env,
                             capture_output=True, text=True, timeout=60)
    assert shipped.returncode == 0, shipped.stderr
    assert f"run {left.stem}: shipped ({waiting} samples)" in shipped.stdout
    assert not left.exists()
    with Store.open(postgres_url, create=False) as store:
        assert len(store.samples(left.stem)) == waiting
    again = subprocess.run([sys.executable, "-m", "tensorgauge", "ship", "--store", postgres_url], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing waits on this machine" in again.stdout


def test_tensorgauge_ship_into_a_store_file_says_there_is_nothing_to_ship(tmp_path, capsys):
    from tensorgauge.cli import main

    assert main(["ship", "--store", str(tmp_path / "runs.db")]) == 0
    assert "only for a PostgreSQL store" in capsys.readouterr().out


def test_spool_files_a_killed_monitor_left_empty_are_removed_once_a_minute_old(postgres_url, tmp_path):
    """A monitor killed as it made its spool leaves a file that holds nothing (no tables, or no batch and no
    record): no run ever ships it, so it stayed for good. Once nothing has touched it for a minute, the next
    shipping removes it; a younger one may be a monitor's starting now, and stays."""
    from tensorgauge.store.postgres import redact
    from tensorgauge.store.spool import EMPTY_SPOOL_SECONDS, Spool, spool_folder

    folder = spool_folder(tmp_path / "data" / "tensorgauge")
    (folder / "20260101-000000-0000.db").touch()
    Spool(folder / "20260101-000000-0001.db", redact(postgres_url), "20260101-000000-0001").close()
    old = time.time() - EMPTY_SPOOL_SECONDS - 5
    for path in folder.iterdir():
        os.utime(path, (old, old))
    (folder / "20260101-000000-0002.db").touch()  # just made
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    shipped = subprocess.run([sys.executable, "-m", "tensorgauge", "ship", "--store", postgres_url], env=env,
                             capture_output=True, text=True, timeout=60)
    assert shipped.returncode == 0, shipped.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["20260101-000000-0002.db"]
