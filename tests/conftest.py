import json
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


DURATIONS = Path(__file__).parent / "durations.json"  # {test: [wall seconds, CPU seconds]}: TensorFlow's, and a second or more
UNTIMED_TF_SECONDS = 10.0  # what a real TensorFlow job's test not in it is expected to take
WAITING_CPU_SHARE = 0.5  # a test whose CPU is under this share of its wall time mostly waits (a process, a server)
CPU_BEGAN = pytest.StashKey[float]()


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"update {DURATIONS.name} with the tests run: the wall and CPU seconds of each of a second "
                          "or more (setup to teardown; the CPU its processes used), by which later runs order the tests")


def _interleaved(first: list, second: list, seconds) -> list:
    """``first`` and ``second`` merged, each in its order, so that at every point each has gone about the same
    share of its own total ``seconds``."""
    totals = [sum(map(seconds, first)) or 1.0, sum(map(seconds, second)) or 1.0]
    merged, done, taken = [], [0.0, 0.0], [0, 0]
    lists = (first, second)
    while taken[0] < len(first) or taken[1] < len(second):
        side = 0 if taken[1] >= len(second) or (taken[0] < len(first) and done[0] / totals[0] <= done[1] / totals[1]) \
            else 1
        item = lists[side][taken[side]]
        merged.append(item)
        done[side] += seconds(item)
        taken[side] += 1
    return merged


def pytest_collection_modifyitems(config, items):
    """The tests of a second or more first, the longest first, those that mostly wait (for a process, a server:
    under :data:`WAITING_CPU_SHARE`) spread among those that compute; then the rest in the order collected. Run
    in parallel (``make test``) each process takes the next test as it is free, so a test that waits leaves the
    cores to a TensorFlow job beside it, and the short tests fill the end. The seconds are :data:`DURATIONS`'s;
    a test it does not name counts :data:`UNTIMED_TF_SECONDS` if it runs TensorFlow, else none."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}

    def wall(item) -> float:
        return known[item.nodeid][0] if item.nodeid in known else UNTIMED_TF_SECONDS if item.get_closest_marker("tf") \
            else 0.0

    def waits(item) -> bool:
        return item.nodeid in known and known[item.nodeid][1] < WAITING_CPU_SHARE * known[item.nodeid][0]

    long = sorted((item for item in items if wall(item) >= 1), key=lambda item: -wall(item))
    short = [item for item in items if wall(item) < 1]
    items[:] = _interleaved([i for i in long if not waits(i)], [i for i in long if waits(i)], wall) + short


def _cpu_seconds() -> float:
    """This process's CPU and that of its children it waited for."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_setup(item):
    if item.config.getoption("--store-durations"):
        item.stash[CPU_BEGAN] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if call.when == "teardown" and CPU_BEGAN in item.stash:
        report.user_properties.append(("cpu_seconds", _cpu_seconds() - item.stash[CPU_BEGAN]))


_measured: dict[str, list[float]] = {}
_runs_tensorflow: set[str] = set()


def pytest_runtest_logreport(report):
    measured = _measured.setdefault(report.nodeid, [0.0, 0.0])
    measured[0] += report.duration
    measured[1] += dict(report.user_properties).get("cpu_seconds", 0.0)
    if "tf" in report.keywords:
        _runs_tensorflow.add(report.nodeid)


def pytest_sessionfinish(session):
    config = session.config
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):  # the controller (xdist) or alone
        known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        for test, (wall, cpu) in _measured.items():  # those run now
            known[test] = [round(wall), round(cpu)]
            if known[test][0] < 1 and test not in _runs_tensorflow:
                del known[test]
        DURATIONS.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n")
