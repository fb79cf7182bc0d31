"""The whole tree of a job is inside its budget and its guard from its first instruction, on real
processes: a job started through a shell wrapper (which forks at once) cannot escape either."""

import shlex
import signal
import subprocess
import sys
import time

import pytest
from conftest import alive

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.cli import main
from tensorgauge.store import Store

PY = sys.executable
ALLOCATES = "import time; a = bytearray(500 << 20); time.sleep(30)"  # 500 MiB, touched, then kept


@pytest.mark.parametrize("cgroup", [True, False])
def test_a_wrapped_job_allocating_past_its_memory_budget_is_stopped_and_named(store_path, monkeypatch, cgroup):
    """`sh -c "python ...; true"`: the shell forks Python before a monitor could move the shell into a
    cgroup; the 500 MiB Python must still be stopped under a 300 MiB budget (by the cgroup where the
    kernel lets us make one, by the watchdog in any case)."""
    if not cgroup:
        monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    command = ["sh", "-c", f"{PY} -c {shlex.quote(ALLOCATES)}; true"]
    main(["run", "-q", "--max-memory", "300MiB", "--", *command])
    record = Store.open(store_path).run("last")
    budget = record.budget
    # Stopped, not 30 s of sleep (about a second here; the margin is for a machine busy with other work).
    assert budget["stopped"] and record.wall_seconds < 15, (budget, record.wall_seconds)
    # The allocating Python is named first, the wrapper after it. Its peak is what the samples caught before the
    # stop: 98.7 MiB in one run beside the suite's other process, so no size is asserted beyond the wrapper's.
    largest, *others = budget["processes"]
    assert largest["name"].startswith("python"), budget["processes"]
    wrapper = next(p for p in others if p["name"] in ("sh", "dash", "bash"))  # the wrapper, named too
    assert largest["rss_peak_bytes"] > wrapper["rss_peak_bytes"], budget["processes"]


@pytest.mark.parametrize("after", ["true", "sleep 30"])
@pytest.mark.parametrize("cgroup", [True, False])
def test_a_wrapped_job_whose_process_its_budget_killed_never_exits_as_a_success(store_path, monkeypatch, cgroup,
                                                                                after):
    """`sh -c "python ...; true"`: the kernel killed the Python at the cgroup's limit, the shell ran on, and
    `run` exited 0 while it printed "Stopped by the memory budget" (5 of 5 tries); with `sleep 30` after it
    the shell slept its 30 s. The whole job is stopped, and `run` exits 137 whatever the wrapper does next."""
    if not cgroup:
        monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    code = main(["run", "-q", "--max-memory", "300MiB", "--", "sh", "-c", f"{PY} -c {shlex.quote(ALLOCATES)}; {after}"])
    record = Store.open(store_path).run("last")
    if cgroup and record.tree_source != "cgroup":
        pytest.skip("no cgroup could be made for the job here (not root, or no memory controller)")
    assert record.budget["stopped"] and code == 128 + 9, (code, record.exit_code, record.signal, record.budget)
    assert record.wall_seconds < 15, record.wall_seconds  # about a second here: the wrapper did not run on


@pytest.mark.parametrize("delay", [0.15, 0.25, 0.35, 0.5, 0.75, 1.0, pytest.param(None, id="as-it-started")])
def test_a_monitor_killed_as_the_job_starts_takes_the_jobs_first_fork_with_it(tg_cmd, tmp_path, delay, store_path):
    """SIGKILL of the monitor around the moment the job starts (the guard used to start after the job):
    the child the job forks first is gone within a second, whenever the job had started. The moment moves
    with the machine's load (at a slow hour the delays up to 0.75 s came before it), so the last case
    (`as-it-started`) kills the monitor the moment the job's child is known: it checks something on any machine."""
    pids = tmp_path / "pids"
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--", "sh", "-c", f"sleep 30 & echo $! > {pids}; wait"])
    if delay is None:
        started_by = time.monotonic() + 60
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < started_by:
            time.sleep(0.01)
    else:
        time.sleep(delay)
    monitor.send_signal(signal.SIGKILL)
    monitor.wait()
    killed_at = time.monotonic()
    time.sleep(0.3)  # a job still being started writes its file now
    if not pids.exists() or not pids.read_text().strip():
        assert delay is not None, "the job did not start within 60 s"
        pytest.skip(f"the monitor was killed {delay} s in, before it started the job")
    child = int(pids.read_text())
    while alive(child) and time.monotonic() - killed_at < 1.5:
        time.sleep(0.02)
    assert not alive(child), "the job's first child outlived its monitor"


def test_every_child_a_job_forks_at_once_is_counted_in_its_tree(store_path):
    """200 children forked the moment the job starts (24 were left outside its cgroup before)."""
    main(["run", "-q", "--", "sh", "-c", "for i in $(seq 200); do sleep 2 & done; wait"])
    record = Store.open(store_path).run("last")
    assert record.exit_code == 0
    assert RunReport.load(Store.open(store_path), "last").summary.processes_peak >= 200


def test_an_event_with_step_times_outside_the_run_leaves_the_budget_working(store_path, monkeypatch):
    """One line with `"ends": [1e299, -1e299]` stopped the recording and the watchdog with it."""
    monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")  # the watchdog alone
    job = ("import json, os, time\n"
           "fd = os.open(os.environ['TENSORGAUGE_EVENTS'], os.O_WRONLY | os.O_APPEND)\n"
           "line = {'t': time.monotonic(), 'kind': 'steps', 'phase': 1, 'seconds': [0.1, 0.1]}\n"
           "for ends in ([1e299, -1e299], [time.monotonic(), time.monotonic() + 3e7]):\n"
           "    os.write(fd, (json.dumps({**line, 'ends': ends}) + '\\n').encode())\n"
           "time.sleep(0.5)\n"
           "held = [bytearray(50 << 20) for _ in range(12)]\n"
           "time.sleep(5)\n")
    assert main(["run", "-q", "--max-memory", "300MiB", "--", PY, "-c", job]) == 128 + 9
    record = Store.open(store_path).run("last")
    assert record.budget["stopped"] and record.events_skipped == 2 and record.recording_error is None
