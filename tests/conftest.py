import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    """A fresh store for each test, also for child `tensorgauge` processes."""
    path = tmp_path / "store" / "runs.db"
    monkeypatch.setenv("TENSORGAUGE_STORE", str(path))
    return path


@pytest.fixture
def tg_cmd():
    """The command line that runs the tensorgauge CLI in a subprocess."""
    return [sys.executable, "-m", "tensorgauge"]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def text_once_written(path: Path, started: subprocess.Popen, timeout: float = 30.0) -> str:
    """The file's text once the job has written some: `write_text` creates the file before it writes, so a
    reader that waits only for the file to exist can read it empty."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and (text := path.read_text())):
        assert time.monotonic() < deadline and started.poll() is None, f"the job never wrote {path.name}"
        time.sleep(0.05)
    return text


def have_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


needs_tf = pytest.mark.skipif(not have_tensorflow(), reason="TensorFlow is not installed (extra [tensorflow])")
needs_report = pytest.mark.skipif(__import__("importlib").util.find_spec("vl_convert") is None,
                                  reason="the [report] extra (vl-convert-python) is not installed")


@pytest.fixture
def events(tmp_path):
    """The hook's channel pointed at a file; returns a function that reads the new events."""
    from tensorgauge.hook.channel import Channel, EventReader, set_channel

    path = str(tmp_path / "events.jsonl")
    open(path, "w").close()  # as the monitor does: the hook never creates it
    old = set_channel(Channel(path))
    reader = EventReader(path)
    yield reader.read_new
    reader.close()
    set_channel(old)


POSTGRES_ENV = "TENSORGAUGE_TEST_POSTGRES"


@pytest.fixture
def postgres_url():
    """A PostgreSQL store URL ('make test' starts a server: scripts/postgres-for-tests)."""
    import os

    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"no PostgreSQL server: set {POSTGRES_ENV} (make test starts one)")
    return _worker_database(url, os.environ.get("PYTEST_XDIST_WORKER"))


def _worker_database(url: str, worker: str | None) -> str:
    """``url`` with a database of the pytest-xdist worker's own (made on first use), so that tests run in
    parallel do not read each other's runs."""
    if not worker:
        return url
    import psycopg
    from psycopg import sql

    base, _, name = url.rpartition("/")
    own = f"{name}_{worker}"
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (own,)).fetchone() is None:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(own)))
            except psycopg.errors.DuplicateDatabase:
                pass
    return f"{base}/{own}"


def pytest_collection_modifyitems(config, items):
    """The files with the most TensorFlow jobs first (a stable sort: each file's tests stay together and in
    order), and every test marked ``tf`` in one xdist group: run in parallel (``make test``, ``--dist
    loadgroup``), one process runs the TensorFlow jobs one at a time, starting early, and the other the rest."""
    from collections import Counter

    jobs = Counter(item.nodeid.split("::")[0] for item in items if item.get_closest_marker("tf"))
    items.sort(key=lambda item: -jobs[item.nodeid.split("::")[0]])
    for item in items:  # with --dist loadgroup, one process runs the TensorFlow jobs one at a time
        if item.get_closest_marker("tf"):
            item.add_marker(pytest.mark.xdist_group("tensorflow"))
