"""A fleet of workers against one PostgreSQL store that refuses them: real monitor processes, a real server
(started here with few connection slots, password authentication), every job runs to its end."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tensorgauge.store import Store

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 30
PASSWORD = "fleetpw731"


def _have_server_binaries() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or shutil.which("initdb") is not None


pytestmark = [
    pytest.mark.skipif(not _have_server_binaries(), reason="no PostgreSQL server binaries (initdb) on this machine"),
    pytest.mark.skipif(sys.platform != "linux", reason="the monitor runs on Linux"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A throwaway server through scripts/postgres-for-tests: 10 connection slots, password auth."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.env = {**os.environ, "TENSORGAUGE_PG_DATA": str(folder / "pg"), "TENSORGAUGE_PG_PORT": str(_free_port()),
                    "TENSORGAUGE_PG_MAX_CONNECTIONS": "10", "TENSORGAUGE_PG_PASSWORD": PASSWORD}
        self.url = ""

    def start(self, keep: bool = False) -> str:
        env = {**self.env, **({"TENSORGAUGE_PG_KEEP": "1"} if keep else {})}
        done = subprocess.run([str(ROOT / "scripts/postgres-for-tests"), "start"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        self.url = done.stdout.strip()
        return self.url

    def stop(self) -> None:
        subprocess.run([str(ROOT / "scripts/postgres-for-tests"), "stop"], env=self.env, timeout=60)


@pytest.fixture
def server():
    pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    folder = Path(tempfile.mkdtemp(prefix="tg-fleet-pg-"))  # not under pytest's 0700 folders: the server
    folder.chmod(0o755)  # runs as 'postgres' when the tests run as root
    server = Server(folder)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def _worker(url: str, index: int, seconds: float, folder: Path) -> subprocess.Popen:
    """One worker: a tiny Python job under its own monitor, writing a mark when it reaches its end."""
    job = f"import time, pathlib; time.sleep({seconds}); pathlib.Path(r'{folder}/end-{index}').touch()"
    env = {**os.environ, "XDG_DATA_HOME": str(folder / f"data-{index}"), "TENSORGAUGE_SHIP_SECONDS": "1",
           "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", url, "--job", "fleet",
                             "--name", f"w{index}", "--", sys.executable, "-c", job],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check_fleet(url: str, workers: list[subprocess.Popen], folder: Path) -> None:
    outcomes = [(w.wait(timeout=120), w.stderr.read() if w.stderr else "") for w in workers]
    assert [code for code, _ in outcomes] == [0] * WORKERS, outcomes
    assert sorted(p.name for p in folder.glob("end-*")) == sorted(f"end-{i}" for i in range(WORKERS))
    with Store.open(url, create=False) as store:
        runs = [r for r in store.runs() if r.job_id == "fleet"]
        assert sorted(r.name or "" for r in runs) == sorted(f"w{i}" for i in range(WORKERS))
        counts = store.peaks()
        for r in runs:
            assert r.complete and r.samples_taken, (r.name, outcomes[int((r.name or "w-1")[1:])][1])
            assert counts.get(r.run_id, (None, 0))[1] >= 0.9 * r.samples_taken, (r.name, counts.get(r.run_id))


def test_thirty_workers_run_to_their_end_against_ten_connection_slots(server, tmp_path):
    """Each monitor held a connection for its whole run: with 10 slots, most jobs never ran."""
    workers = [_worker(server.url, i, 5.0, tmp_path) for i in range(WORKERS)]
    _check_fleet(server.url, workers, tmp_path)


def test_a_store_down_at_the_workers_start_gets_their_data_when_it_comes_up(server, tmp_path):
    """The server is stopped when the workers start and started 5 s later: no job waits, no data is lost."""
    server.stop()
    workers = [_worker(server.url, i, 7.0, tmp_path) for i in range(WORKERS)]
    time.sleep(5.0)
    server.start(keep=True)
    _check_fleet(server.url, workers, tmp_path)


def test_the_server_set_up_gets_a_slot_while_clients_hold_all_theirs(server):
    """Restarted under a fleet, the workers may take every slot before the set-up checks its database: the URL's
    role is an ordinary one, so the set-up's superuser keeps slots of its own."""
    import psycopg

    held = []
    try:
        with pytest.raises(psycopg.OperationalError, match="too many clients|remaining connection slots"):
            for _ in range(20):
                held.append(psycopg.connect(server.url, connect_timeout=10))
        assert 0 < len(held) < 10
        assert server.start(keep=True) == server.url
    finally:
        for conn in held:
            conn.close()


def _authenticating(port: int) -> socket.socket:
    """A client that sent its start-up message and stops at the password exchange: it holds a slot."""
    import struct

    body = struct.pack("!i", 196608) + b"user\0tensorgauge\0database\0tensorgauge_test\0\0"
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(struct.pack("!i", len(body) + 4) + body)
    assert conn.recv(1) == b"R"  # the server asks for the password: the slot is taken
    return conn


def test_the_server_set_up_waits_out_clients_that_hold_every_slot_while_they_authenticate(server):
    """Clients in the middle of authenticating hold slots of any kind (the superuser's too): the set-up is
    refused "too many clients" until they are through, and tries again rather than failing."""
    port = int(server.env["TENSORGAUGE_PG_PORT"])
    held = [_authenticating(port) for _ in range(10)]
    try:
        setup = subprocess.Popen([str(ROOT / "scripts/postgres-for-tests"), "start"],
                                 env={**server.env, "TENSORGAUGE_PG_KEEP": "1"}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)
        assert setup.poll() is None, setup.communicate()  # still trying
    finally:
        for conn in held:
            conn.close()
    out, err = setup.communicate(timeout=60)
    assert setup.returncode == 0, err
    assert out.strip() == server.url


def test_a_wrong_password_fails_before_the_job_in_one_masked_line(server, tmp_path):
    url = server.url.replace(PASSWORD, "wrongpw5512")
    worker = _worker(url, 0, 0.0, tmp_path)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 2
    assert err.count("\n") == 1 and "password authentication failed" in err
    assert "wrongpw5512" not in err and "***" in err
    assert not (tmp_path / "end-0").exists()  # the job never started


def test_a_spool_left_by_a_dead_monitor_is_shipped_once_by_the_next_run(postgres_url, tmp_path):
    """A monitor killed after the store committed a batch but before the spool dropped it: the next run into
    the store from this machine ships the rest, and the committed batch is not stored twice."""
    import psycopg

    from tensorgauge.model import RunRecord, Sample
    from tensorgauge.store.postgres import redact
    from tensorgauge.store.runs import SAMPLE_COLUMNS, _row
    from tensorgauge.store.spool import Spool, spool_folder

    run_id = f"leftover-{time.monotonic_ns()}"
    data = tmp_path / "data" / "tensorgauge"
    spool = Spool(spool_folder(data) / f"{run_id}.db", redact(postgres_url), run_id)
    for first in (0, 10):  # two batches of 10 samples
        spool.append([_row(SAMPLE_COLUMNS, Sample(t=(first + i) / 10, cpu_seconds=0.0, cores_busy=0.0,
                                                  rss_bytes=1, threads=1, processes=1)) for i in range(10)], [])
    spool.set_record(RunRecord(run_id=run_id, command=["x"], started_at="2026-01-01T00:00:00+00:00").to_dict())
    spool.close()
    with Store.open(postgres_url) as store:
        store.add(run_id, [Sample(t=i / 10, cpu_seconds=0.0, cores_busy=0.0, rss_bytes=1, threads=1, processes=1)
                           for i in range(10)], [])
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # what the dead monitor's shipper committed
        admin.execute("INSERT INTO tensorgauge_shipped VALUES (%s, 1)", (run_id,))
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "TENSORGAUGE_SHIP_SECONDS": "0.2",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", postgres_url, "--",
                           sys.executable, "-c", "import time; time.sleep(2)"], env=env, timeout=60)
    assert done.returncode == 0
    with Store.open(postgres_url, create=False) as store:
        assert [round(s.t, 1) for s in store.samples(run_id)] == [i / 10 for i in range(20)]
        assert store.run(run_id).command == ["x"]
    assert not (spool_folder(data) / f"{run_id}.db").exists()


def test_a_runs_analysis_at_its_end_waits_for_a_free_connection_slot(server, tmp_path, monkeypatch):
    """A thousand workers ending at once on 100 slots: a run's analysis found every slot taken and was left
    for its first reader (a fleet's `compare --job` then analysed hundreds). It now waits for a slot."""
    import threading

    import psycopg

    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.model import RunRecord
    from tensorgauge.store.shipping import open_for_recording

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    store = open_for_recording(server.url)
    run_id = f"slots-{time.monotonic_ns()}"
    store.save_run(RunRecord(run_id=run_id, command=["x"], started_at="2026-01-01T00:00:00+00:00", complete=True,
                             exit_code=0, wall_seconds=1.0))
    assert store.drain(60.0)
    held: list = []
    loaded: list = []
    try:
        with pytest.raises(psycopg.OperationalError, match="too many clients|remaining connection slots"):
            for _ in range(20):
                held.append(psycopg.connect(server.url, connect_timeout=10))
        reader = threading.Thread(target=lambda: loaded.append(RunReport.load(store, run_id)))
        reader.start()
        time.sleep(1.5)
        assert reader.is_alive() and not loaded  # refused, and trying again
    finally:
        for conn in held:
            conn.close()
    reader.join(60)
    store.close()
    assert loaded and loaded[0].record.run_id == run_id
    with Store.open(server.url, create=False) as reading:
        assert reading.analysis(run_id) is not None  # stored at the run's end, not left for its first reader
