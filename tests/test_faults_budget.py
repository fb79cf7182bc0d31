"""A budget on real processes: a healthy job with forked workers runs on (shared pages counted once,
with and without a cgroup), a job that leaves its cgroup or leaves a daemon behind is still held, and a
monitor killed with SIGKILL leaves none of its files or cgroup folders behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import alive

from tensorgauge.cli import main
from tensorgauge.sources import cgroup
from tensorgauge.store import Store

PY = sys.executable
JOBS = Path(__file__).parent / "jobs"
MIB = 1 << 20


@pytest.mark.parametrize("cgroup", [True, False])
def test_a_healthy_job_with_forked_workers_is_not_killed_by_its_budget(store_path, monkeypatch, cgroup):
    """200 MiB in the parent, 8 forked read-only workers, 1 GiB budget: killed at "peak 1.9 GiB" before."""
    if not cgroup:
        monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    code = main(["run", "-q", "--max-memory", "1GiB", "--", PY, str(JOBS / "forked_workers.py"), "1.5"])
    record = Store.open(store_path).run("last")
    if cgroup and record.tree_source != "cgroup":
        pytest.skip("no cgroup could be made for the job here (not root, or no memory controller)")
    budget = record.budget
    assert code == 0 and not budget["stopped"], budget
    rss_peak = max(s.rss_bytes for s in Store.open(store_path).samples(record.run_id))
    assert 200 * MIB < rss_peak < 400 * MIB, "the samples count the parent's pages once, not once per worker"
    assert 200 * MIB < budget["peak_bytes"] < 400 * MIB, budget["peak_bytes"]  # the kernel charged 216 MiB
    assert ("cgroup's charge" if cgroup else "counted once") in budget["memory_counted"]


BUDGET_HIERARCHIES = {"unified", "memory", "cpu", "cpuacct"}


def left_hierarchies(record, out: str, what: str) -> set[str]:
    """What the job says it left of the hierarchies a budget relies on; skips where it left none of them."""
    said = out.partition("left ")[2].split("\n", 1)[0]
    left = set(said.split(",")) & BUDGET_HIERARCHIES
    if record.tree_source != "cgroup" or not left:
        pytest.skip(f"no cgroup here, or no {what} hierarchy the job could leave (the kernel kept it, or cgroup v2)")
    return left


@pytest.mark.parametrize("leaves", [None, "memory"], ids=["every-hierarchy", "memory-only"])
def test_a_job_that_leaves_its_cgroup_is_watched_as_a_tree_and_stopped(store_path, capfd, leaves):
    """It wrote its pid into the parent cgroup's cgroup.procs, then held 600 MiB under a 300 MiB budget:
    exit 0 and "enforced by cgroup … peak 13.6 MiB" before. Leaving the memory hierarchy alone on v1 (its
    members were read from the cpuacct one): exit 0, "memory peak 9.6 MiB", nothing said, before."""
    code = main(["run", "--max-memory", "300MiB", "--", PY, str(JOBS / "leaves_cgroup.py"), "600", "30",
                 *([leaves] if leaves else [])])
    record = Store.open(store_path).run("last")
    left = left_hierarchies(record, capfd.readouterr().out, leaves or "cgroup")
    budget = record.budget
    # Stopped, not 30 s of holding (0.4 s here; the margin is for a machine busy with other work).
    assert code == 128 + 9 and budget["stopped"] and record.wall_seconds < 15, (budget, record.wall_seconds)
    assert budget["left_cgroup"]["pid"] and budget["peak_bytes"] > 270 * MIB
    assert left - {"unified"} <= set(budget["left_cgroup"]["hierarchies"]), budget["left_cgroup"]  # v2's: one folder
    assert any("left the cgroup" in e for e in budget["enforced_by"]), budget["enforced_by"]


def test_a_job_that_leaves_only_its_cpu_cgroup_is_seen_leaving_its_quota(store_path, capfd):
    """On v1 the members were read from the cpuacct hierarchy: a job that wrote its pid into the cpu
    hierarchy's parent ran outside its CPU quota, and the run still said "enforced by cgroup CPU quota"."""
    code = main(["run", "--max-cpus", "0.5", "--", PY, str(JOBS / "leaves_cgroup.py"), "10", "1", "cpu"])
    record = Store.open(store_path).run("last")
    left_hierarchies(record, capfd.readouterr().out, "cpu")
    budget = record.budget
    assert code == 0 and budget["left_cgroup"] is not None, budget
    assert "cpu" in budget["left_cgroup"]["hierarchies"], budget["left_cgroup"]
    quota = next(e for e in budget["enforced_by"] if e.startswith("cgroup CPU quota"))
    assert "left the cgroup" in quota, budget["enforced_by"]


def test_a_double_forked_daemon_stays_in_the_watched_tree_and_is_stopped(store_path, monkeypatch, tmp_path):
    """No cgroup: fork, setsid, fork; the orphan allocated 500 MiB under 300 MiB and outlived the run
    (exit 0, "peak 13.7 MiB") before."""
    monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    pidfile = tmp_path / "daemon"
    code = main(["run", "-q", "--max-memory", "300MiB", "--", PY, str(JOBS / "daemon_allocates.py"), str(pidfile),
                 "500", "5"])
    daemon = int(pidfile.read_text())
    budget = Store.open(store_path).run("last").budget
    assert code == 128 + 9 and budget["stopped"] and budget["peak_bytes"] > 270 * MIB, budget
    assert not alive(daemon), "the daemon outlived its run"


def test_a_daemon_the_job_leaves_behind_does_not_outlive_its_budgeted_run(store_path, monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    pidfile = tmp_path / "daemon"
    code = main(["run", "-q", "--max-memory", "300MiB", "--", PY, str(JOBS / "daemon_allocates.py"), str(pidfile),
                 "10", "0.6"])
    daemon = int(pidfile.read_text())
    assert code == 0
    assert not alive(daemon), "the daemon outlived its run"
    with pytest.raises(ChildProcessError):  # reaped: no zombie left with the monitor
        os.waitpid(daemon, os.WNOHANG)


def leftovers(run_id: str) -> list[str]:
    """The run's private folder in /dev/shm (or the temporary folder) and its cgroup folders, if any."""
    import glob
    import tempfile

    found = []
    for parent in ("/dev/shm", tempfile.gettempdir()):
        found += glob.glob(os.path.join(parent, f"tensorgauge-{run_id}-*"))
    paths = cgroup.cgroup_paths()  # the monitor's (this process's) cgroups: the job's are made under them
    for parent in filter(None, (paths.unified, paths.cpu, paths.cpuacct, paths.memory)):
        found += [str(f) for f in [parent / f"tensorgauge-{run_id}"] if f.exists()]
    return found


@pytest.mark.parametrize("attempt", range(3))
def test_a_monitor_killed_with_sigkill_leaves_no_files_nor_cgroup_behind(store_path, tg_cmd, attempt):
    """2 of 3 kills left /dev/shm/tensorgauge-* or cgroup folders: the guardian left before cleaning up."""
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--max-memory", "300MiB", "--", PY, "-c",
                                "import time; time.sleep(30)"])
    deadline = time.monotonic() + 20
    run_id = None
    while run_id is None and time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            run_id = Store.open(store_path).run("last").run_id
        except Exception:  # not recorded yet
            continue
    time.sleep(0.3)
    monitor.send_signal(signal.SIGKILL)
    monitor.wait()
    assert run_id is not None
    deadline = time.monotonic() + 5
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(run_id) == []
