"""--prometheus under idle connections: they neither take a thread each for ever nor keep a scrape out."""

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from tensorgauge.live.prometheus import PrometheusExporter  # noqa: E402

IDLE_CONNECTIONS = 65  # the number that made the endpoint refuse every scrape


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        return response.read().decode()


def idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that never send a request."""
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def test_idle_connections_take_a_bounded_number_of_threads_and_a_scrape_gets_in():
    """Each idle connection held a thread for ever (65 threads for 65); now at most 16 are served at once."""
    port = free_port()
    exporter = PrometheusExporter(str(port))
    before = threading.active_count()
    sockets = idle(port, IDLE_CONNECTIONS)
    try:
        time.sleep(0.5)  # all accepted
        assert threading.active_count() - before <= 16 + 1
        assert "tensorgauge_" in scrape(port)
    finally:
        for s in sockets:
            s.close()
        exporter.close()


def test_an_idle_connection_is_closed_after_its_time():
    port = free_port()
    exporter = PrometheusExporter(str(port), idle_seconds=0.3)
    try:
        (s,) = idle(port, 1)
        with s:
            assert s.recv(1) == b""  # closed by the server, not by the 10 s timeout here
        assert "tensorgauge_" in scrape(port)
    finally:
        exporter.close()


def _pids_cgroup() -> Path | None:
    root = Path("/sys/fs/cgroup/pids")  # cgroup v1's pids controller
    return root if (root / "cgroup.procs").exists() and os.access(root, os.W_OK) else None


@pytest.mark.skipif(_pids_cgroup() is None, reason="needs a writable cgroup v1 pids controller (root)")
def test_a_scrape_gets_in_past_65_idle_connections_under_a_task_limit(store_path, tg_cmd, tmp_path):
    """`tensorgauge run --prometheus` in a cgroup limited to 40 tasks (as a container's pids limit):
    65 idle connections used to take every thread the process could start, and each scrape was
    closed unanswered."""
    root = _pids_cgroup()
    assert root is not None
    group = root / f"tensorgauge-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "pids.max").write_text("40")
        port = free_port()
        monitor = subprocess.Popen(["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh",
                                    *tg_cmd, "run", "-q", "--prometheus", str(port), "--",
                                    sys.executable, "-c", "import time; time.sleep(600)"])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    scrape(port, timeout=1)
                    break
                except OSError:
                    assert time.monotonic() < deadline and monitor.poll() is None, "the endpoint never came up"
                    time.sleep(0.1)
            sockets = idle(port, IDLE_CONNECTIONS)
            try:
                time.sleep(0.5)
                assert "tensorgauge_" in scrape(port)
            finally:
                for s in sockets:
                    s.close()
        finally:
            monitor.terminate()
            monitor.wait(timeout=30)
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                group.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
