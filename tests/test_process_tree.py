"""The real process tree source against psutil and the kernel, on live processes."""

import os
import shutil
import subprocess
import sys

import psutil
import pytest
from conftest import text_once_written

from tensorgauge.sources.process_tree import ProcfsProcessTree, descendants, read_stat


def test_read_stat_agrees_with_psutil():
    cpu, threads, rss = read_stat(os.getpid())
    proc = psutil.Process()
    t = proc.cpu_times()
    assert cpu == pytest.approx(t.user + t.system + t.children_user + t.children_system, abs=0.05)
    assert threads == proc.num_threads()
    assert rss == pytest.approx(proc.memory_info().rss, rel=0.05)
    assert read_stat(2 ** 22 + 12345) is None  # no such process


def test_command_names_with_spaces_and_parentheses(tmp_path):
    odd = tmp_path / "odd ) name ("
    shutil.copy(sys.executable, odd)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([str(odd), "-c", f"import pathlib, time; pathlib.Path({str(ready)!r}).write_text('up'); "
                             "time.sleep(60)"])
    try:
        text_once_written(ready, proc)
        stat = read_stat(proc.pid)
        assert stat is not None and stat[1] == 1 and stat[2] > 1 << 20
    finally:
        proc.kill()
        proc.wait()


def test_tree_finds_grandchildren_and_sums_them(tmp_path):
    ready = tmp_path / "ready"
    grandchild = f"import pathlib, time\npathlib.Path({str(ready)!r}).write_text('up')\ntime.sleep(60)"
    code = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {grandchild!r}])\ntime.sleep(60)"
    root = subprocess.Popen([sys.executable, "-c", code])
    try:
        text_once_written(ready, root)  # the grandchild runs (a slow machine takes its time to start Pythons)
        assert len(descendants(root.pid)) == 1
        reading = ProcfsProcessTree(root.pid).read()
        assert reading.processes == 2 and reading.threads >= 2 and reading.rss_bytes > 2 << 20
        assert set(reading.pids) == {root.pid, *descendants(root.pid)}
        assert reading.read_bytes is not None
        fds = sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in reading.pids)
        assert reading.open_fds == fds and fds >= 6  # stdin, stdout, stderr of each
        quick = ProcfsProcessTree(root.pid).read(io=False)
        assert quick.read_bytes is None and quick.open_fds is None  # read once a second, with the I/O
        uss, pss = ProcfsProcessTree(root.pid).read_private()
        assert 0 < uss <= pss
    finally:
        for child in psutil.Process(root.pid).children(recursive=True):
            child.kill()
        root.kill()
        root.wait()


def test_tree_of_an_ended_process_is_none():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert ProcfsProcessTree(proc.pid).read() is None


def test_cgroup_tree_reads_counters_not_threads(tmp_path):
    from tensorgauge.sources.cgroup import JobCgroup
    from tensorgauge.sources.process_tree import CgroupProcessTree

    (tmp_path / "cpuacct.usage").write_text("2500000000\n")  # ns
    (tmp_path / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (tmp_path / "tasks").write_text(f"{os.getpid()}\n1\n2\n")
    tree = CgroupProcessTree(JobCgroup(tmp_path, None, unified=False), cpu_before_seconds=0.25)
    reading = tree.read(io=False)
    assert reading.cpu_seconds == 2.75 and reading.processes == 1 and reading.threads == 3
    assert reading.pids == (os.getpid(),)
    assert reading.rss_bytes == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)
    (tmp_path / "cpuacct.usage").write_text("1000000000\n")  # never goes backwards
    assert tree.read().cpu_seconds == 2.75
    (tmp_path / "cgroup.procs").write_text("")
    assert tree.read() is None


def test_a_member_that_leaves_the_memory_hierarchy_between_samples_is_seen_at_the_next_memory_check(tmp_path):
    """Near its budget the memory is read every few ms between samples: a process no longer in the memory
    cgroup (its new pages charged elsewhere) is seen there, not only at the next sample."""
    from tensorgauge.sources.cgroup import JobCgroup
    from tensorgauge.sources.process_tree import CgroupProcessTree

    job = subprocess.Popen([sys.executable, "-c", "import time; a = bytearray(8 << 20); print(1, flush=True); "
                            "time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        job.stdout.readline()  # it holds its 8 MiB
        folders = {name: tmp_path / name for name in ("cpuacct", "memory", "cpu")}
        for folder in folders.values():
            folder.mkdir()
            (folder / "cgroup.procs").write_text(f"{job.pid}\n")
        (folders["cpuacct"] / "cpuacct.usage").write_text("1000\n")
        (folders["cpuacct"] / "tasks").write_text(f"{job.pid}\n")
        (folders["memory"] / "memory.usage_in_bytes").write_text("4096\n")
        group = JobCgroup(folders["cpuacct"], folders["memory"], unified=False, quota_dir=folders["cpu"])
        tree = CgroupProcessTree(group, root_pid=job.pid)
        assert tree.read(io=False).processes == 1 and tree.charged_bytes(None) == 4096
        (folders["memory"] / "cgroup.procs").write_text("")  # it wrote its pid into the parent's
        charged = tree.charged_bytes(None)
        assert tree.left_cgroup["pid"] == job.pid and tree.left_cgroup["hierarchies"] == ["memory"]
        assert charged > 8 << 20, "its own memory (RSS), not the cgroup's stale charge"
    finally:
        job.kill()
        job.wait()


def test_cgroup_v2_counters(tmp_path):
    from tensorgauge.sources.cgroup import JobCgroup

    (tmp_path / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    (tmp_path / "cgroup.threads").write_text("10\n11\n")
    (tmp_path / "memory.events").write_text("oom 0\noom_kill 2\n")
    group = JobCgroup(tmp_path, tmp_path, unified=True)
    assert group.cpu_seconds() == 1.5 and group.threads() == 2 and group.oom_kills() == 2


def test_runner_samples_through_a_real_cgroup_where_permitted(store_path):
    from tensorgauge.cli import main
    from tensorgauge.sources.cgroup import JobCgroup, cgroup_paths
    from tensorgauge.store import Store

    probe = JobCgroup.create("tensorgauge-probe")
    if probe is None:
        pytest.skip("cgroups are not writable here: the /proc path is used (tested above)")
    probe.remove()
    # Each busy for one CPU-second (by its own CPU clock, so a loaded machine does not change the
    # total); the parent waits for the child's flag file, never for the child process itself.
    flag = str(store_path.parent / "child-done")
    child = f"import time\nwhile time.process_time() < 1: pass\nopen({flag!r}, 'w').close()\n"
    code = (f"import os, subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}])\n"
            f"while time.process_time() < 1: pass\nwhile not os.path.exists({flag!r}): time.sleep(0.01)\n")
    assert main(["run", "-q", "--", sys.executable, "-c", code]) == 0
    store = Store.open(store_path)
    record = store.run("last")
    samples = store.samples(record.run_id)
    assert record.tree_source == "cgroup"
    assert max(s.processes for s in samples) == 2  # the child escaped no one: it is in the cgroup
    # The job did not wait for its child: the kernel's rusage misses the child's CPU,
    # the cgroup does not. The run's total counts both busy seconds.
    assert record.cpu_seconds_total == pytest.approx(2.0, abs=0.25)
    assert samples[-1].cpu_seconds <= record.cpu_seconds_total
    paths = cgroup_paths()
    assert not ((paths.unified or paths.cpuacct) / f"tensorgauge-{record.run_id}").exists()  # removed
