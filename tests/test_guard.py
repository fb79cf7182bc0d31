"""The guardian on real processes, its cgroup stood in for by a plain procs file: a monitor killed
between the job's fork and its word (no process group known) still takes the job with it."""

import os
import subprocess
import time

from tensorgauge.monitoring import guard as guard_module
from tensorgauge.monitoring.guard import Guard


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of ours is dead
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def test_a_job_that_joins_its_cgroup_after_the_monitor_died_is_stopped(tmp_path, monkeypatch):
    """The guardian reads the cgroup again over its grace; 3 s here (0.5 s in use), so that this test's own
    slow moment on a loaded machine is not mistaken for a job that joined late."""
    monkeypatch.setattr(guard_module, "GRACE_SECONDS", 3.0)
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    guard = Guard.start([str(procs)])
    os.close(guard._write_fd)  # the monitor dies: the pipe closes without the job's process group
    guard._write_fd = None
    time.sleep(0.1)  # the job, forked just before, places itself in its cgroup only now
    job = subprocess.Popen(["sleep", "30"])
    procs.write_text(f"{job.pid}\n")
    deadline = time.monotonic() + 10.0
    while alive(job.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(job.pid), "the job outlived its monitor"
    guard.process.wait(timeout=5)


def test_a_monitor_that_ends_well_leaves_the_job_alone(tmp_path):
    procs = tmp_path / "cgroup.procs"
    job = subprocess.Popen(["sleep", "30"])
    procs.write_text(f"{job.pid}\n")
    guard = Guard.start([str(procs)])
    guard.watch(job.pid)
    guard.release()
    time.sleep(0.3)
    assert alive(job.pid)
    job.kill()
    job.wait()
