"""Stopping `tensorgauge run` by signal, and its own stderr, on real processes: a job that ignores
SIGINT is stopped like one that ignores SIGTERM, a second SIGINT stops it at once, and a closed
stderr never changes the exit status the job gave."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import alive, text_once_written

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

PY = sys.executable
IGNORES_SIGINT = ("import os, pathlib, signal, subprocess, sys, time\n"
                  "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                  # a child that ignores it too (inherited): the whole tree must go
                  "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                  "pathlib.Path(READY).write_text(f'{os.getpid()} {child.pid}')\n"
                  "time.sleep(600)\n")
BOUND_SECONDS = 60  # generous: the fault ran for 10 minutes and more


def _start(tg_cmd, tmp_path, job: str, *options: str, **popen):
    ready = tmp_path / "ready"
    monitor = subprocess.Popen([*tg_cmd, "run", *options, "--", PY, "-c", job.replace("READY", repr(str(ready)))],
                               **popen)
    return monitor, [int(pid) for pid in text_once_written(ready, monitor).split()]


def assert_ended_by(sig: int, monitor, pids, store_path, after: str) -> None:
    """The monitor ended within the bound with 128+``sig``, the run stored complete as ended by ``sig``,
    and the job's tree gone (a monitor still running is killed, with the job)."""
    try:
        code = monitor.wait(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        for pid in (monitor.pid, *pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        monitor.wait()
        raise AssertionError(f"still running {BOUND_SECONDS} s {after}") from None
    store = Store.open(store_path)
    run = RunReport.load(store, store.run("last").run_id).to_dict()
    assert run["complete"] and run["end_cause"] == "signal"
    assert run["signal"] == sig and code == 128 + sig
    assert not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("cgroup", [True, False])
def test_a_job_that_ignores_sigint_is_killed_after_the_grace_period(store_path, tg_cmd, tmp_path, monkeypatch, cgroup):
    """SIGINT to tensorgauge, the job ignores it: after --stop-grace its whole tree is ended (SIGTERM,
    then SIGKILL), the run stored complete with the signal that ended it (it ran on for 10 minutes and
    more)."""
    if not cgroup:
        monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    monitor, pids = _start(tg_cmd, tmp_path, IGNORES_SIGINT, "--stop-grace", "1", stderr=subprocess.PIPE)
    monitor.send_signal(signal.SIGINT)
    # The tree gets SIGTERM then SIGKILL: this job, which takes SIGTERM's default, dies of the SIGTERM.
    assert_ended_by(signal.SIGTERM, monitor, pids, store_path, "after SIGINT")
    assert "SIGINT not obeyed within 1 s" in monitor.stderr.read().decode()


def test_a_second_sigint_stops_the_job_at_once(store_path, tg_cmd, tmp_path):
    """Ctrl-C twice: the second SIGINT ends the job's tree without waiting out the grace period
    (SIGTERM, then SIGKILL); the job that only ignores SIGINT dies of the SIGTERM."""
    got = tmp_path / "got"
    job = IGNORES_SIGINT.replace("signal.signal(signal.SIGINT, signal.SIG_IGN)",
                                 f"signal.signal(signal.SIGINT, lambda n, f: pathlib.Path({str(got)!r}).write_text('1'))")
    monitor, pids = _start(tg_cmd, tmp_path, job, "-q", "--stop-grace", "600", stderr=subprocess.PIPE)
    monitor.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 20
    while not got.exists():  # passed on: the job took it, and went on
        assert time.monotonic() < deadline, "the first SIGINT never reached the job"
        time.sleep(0.02)
    monitor.send_signal(signal.SIGINT)
    assert_ended_by(signal.SIGTERM, monitor, pids, store_path, "after the second SIGINT (grace 600 s)")
    assert "a second SIGINT: killing the job's process tree" in monitor.stderr.read().decode()


def test_a_broken_stderr_leaves_the_jobs_exit_status(store_path, tg_cmd, tmp_path):
    """The reader of tensorgauge's stderr goes away before the first line: the job runs to its end and
    `run` exits with its code (it exited 1 and stopped the job)."""
    done = tmp_path / "done"
    job = f"import pathlib, time; time.sleep(1); pathlib.Path({str(done)!r}).write_text('1'); raise SystemExit(3)"
    monitor = subprocess.Popen([*tg_cmd, "run", "--", PY, "-c", job], stderr=subprocess.PIPE)
    monitor.stderr.close()  # the read end: every write the tool makes to stderr fails (EPIPE)
    assert monitor.wait(timeout=BOUND_SECONDS) == 3
    assert done.exists(), "the job was stopped"
    record = Store.open(store_path).run("last")
    assert record.complete and record.exit_code == 3
