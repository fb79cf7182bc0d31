import subprocess
import sys
import time
from pathlib import Path

import pytest
from suite_order import (  # noqa: F401 (the suite's order: pytest finds the hooks here)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_sessionfinish,
)


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


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The folder ``make(folder)`` fills, made once per test session: run in parallel (``make test``), by the
    first process to ask while the others wait for it. A module-scoped fixture is made by every process that
    runs one of its module's tests: a recorded TensorFlow job, 5-7 s, twice. What it holds is shared: a test
    that reads it changes nothing in it."""
    import fcntl
    import os
    import shutil

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, above each process's
    folder = root / f"made-once-{name}"
    with open(root / f"made-once-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


JAX_PATH_ENV = "TENSORGAUGE_TEST_JAX_PATH"


def jax_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's by default) with JAX importable: ``make test`` installs it apart from the venv's
    site-packages (scripts/install-apart), on the PYTHONPATH of the JAX tests' jobs alone."""
    import os

    env = dict(os.environ if env is None else env)
    if apart := os.environ.get(JAX_PATH_ENV):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (apart, env.get("PYTHONPATH")) if p)
    return env


def have_jax() -> bool:
    import importlib.util
    import os

    apart = os.environ.get(JAX_PATH_ENV)
    return importlib.util.find_spec("jax") is not None or bool(apart and (Path(apart) / "jax").is_dir())


needs_jax = pytest.mark.skipif(not have_jax(), reason="JAX is not installed (extra [jax]; make test installs it)")


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
def postgres_url(request):
    """A PostgreSQL store URL ('make test' starts a server: scripts/postgres-for-tests)."""
    import os

    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"no PostgreSQL server: set {POSTGRES_ENV} (make test starts one)")
    return _worker_database(url, os.environ.get("PYTEST_XDIST_WORKER") or request.config.getoption("--suite-part"))


def _worker_database(url: str, worker: str | None) -> str:
    """``url`` with a database of the pytest-xdist worker's own, or the suite part's (made on first use), so
    that tests run in parallel do not read each other's runs."""
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
