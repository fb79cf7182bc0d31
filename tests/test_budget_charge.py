"""What a memory budget counts: what the kernel charges (a cgroup's charge on v1, v2 and hybrid
hierarchies, fake trees of files here), or without a cgroup RSS with shared pages counted once; and the
one account a stop gives (where it happened, the peak it acted on, no checkpoint promised that is not)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensorgauge.cli import main
from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.monitoring.budget import BudgetWatch
from tensorgauge.monitoring.limits import Budget
from tensorgauge.sources import cgroup
from tensorgauge.sources.process_tree import CgroupProcessTree, descendants, read_rss
from tensorgauge.sources.shared_memory import PSS_EVERY_SECONDS, SharedOnce
from tensorgauge.testing import FakeClock

MIB = 1 << 20
JOBS = Path(__file__).parent / "jobs"


def test_forked_pages_are_counted_once_and_new_private_pages_at_once():
    """Nine processes of 210 MiB RSS that share 200 MiB: 216 MiB, not 1.9 GiB; a worker's new private
    memory counts at once, a new worker from the next PSS reading."""
    clock = FakeClock()
    pss = {pid: (0, 24 * MIB) for pid in range(1, 10)}
    reads = []
    once = SharedOnce(clock.now, read=lambda pid: reads.append(pid) or pss.get(pid))
    rss = {pid: 210 * MIB for pid in range(1, 10)}
    line = 800 * MIB  # where the watch acts next
    assert once.charged(rss, line) == 216 * MIB and once.readings == 1
    rss[3] += 100 * MIB  # worker 3 allocates
    assert once.charged(rss, line) == 316 * MIB and once.readings == 1  # an upper bound, no new reading
    rss[10] = 210 * MIB  # a new worker: counted from the next reading, not with its shared pages now
    pss[10] = (0, 24 * MIB)
    assert once.charged(rss, line) == 316 * MIB
    clock.advance(PSS_EVERY_SECONDS)  # near the line (526 MiB with the newcomer's RSS): read again
    pss[3] = (0, 124 * MIB)
    assert once.charged(rss, line) == 340 * MIB and once.readings == 2
    assert once.charged({1: 700 * MIB}, line) == 700 * MIB  # one process: its RSS, no reading
    assert SharedOnce(clock.now).charged({1: 300 * MIB, 2: 10 * MIB}, line) == 310 * MIB  # far below: no reading


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# proc/self/cgroup of the monitor, and the folder each hierarchy is mounted at (relative to the fake root)
LAYOUTS = {
    "v1": ("5:memory:/user\n3:cpuacct:/user\n2:cpu:/user\n", ["memory", "cpuacct", "cpu"], None),
    "v2": ("0::/user\n", [], "sys/fs/cgroup/user"),
    # systemd's hybrid: v1 controllers (cpu and cpuacct mounted together) beside an empty cgroup2
    "hybrid": ("5:memory:/user\n3:cpu,cpuacct:/user\n1:name=systemd:/user\n0::/user\n",
               ["memory", "cpu,cpuacct"], "sys/fs/cgroup/unified/user"),
}


def fake_hierarchy(root: Path, layout: str) -> cgroup.CgroupPaths:
    text, v1_mounts, unified = LAYOUTS[layout]
    write(root / "proc/self/cgroup", text)
    for mount in v1_mounts:
        (root / "sys/fs/cgroup" / mount / "user").mkdir(parents=True)
    if unified:
        write(root / unified / "cgroup.controllers", "" if layout == "hybrid" else "cpu memory\n")
    return cgroup.cgroup_paths(root=str(root))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_forked_workers_job_passes_its_budget_on_each_cgroup_layout(tmp_path, layout):
    """The real forked-workers job (1.9 GiB of summed RSS) in a fake cgroup that the kernel charged 300 MiB,
    84 MiB of it inactive file cache: the budget counts 216 MiB and lets it run under 1 GiB."""
    paths = fake_hierarchy(tmp_path, layout)
    group = cgroup.JobCgroup.create("tensorgauge-x", paths)
    assert group is not None and group.unified == (layout == "v2") and group.memory_dir is not None
    usage, stat = ("memory.current", "anon 200\ninactive_file 88080384\n") if group.unified else \
        ("memory.usage_in_bytes", "cache 1\ninactive_file 5\ntotal_inactive_file 88080384\n")
    write(group.memory_dir / usage, f"{300 * MIB}\n")
    write(group.memory_dir / "memory.stat", stat)
    write(group.cpu_dir / ("cpu.stat" if group.unified else "cpuacct.usage"),
          "usage_usec 1000\n" if group.unified else "1000000\n")
    job = subprocess.Popen([sys.executable, str(JOBS / "forked_workers.py"), "3"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(descendants(job.pid)) < 8 and time.monotonic() < deadline:  # the pool and its workers
            time.sleep(0.1)
        time.sleep(0.3)
        pids = [job.pid, *descendants(job.pid)]
        for folder in group.dirs():  # a member in each hierarchy, as the kernel lists one
            write(folder / "cgroup.procs", "".join(f"{p}\n" for p in pids))
        tree = CgroupProcessTree(group, root_pid=job.pid)
        reading = tree.read(io=False)
        summed = sum(read_rss(p) or 0 for p in pids)
        watch = BudgetWatch(Budget(max_memory_bytes=1 << 30), str(tmp_path / "stop"), None)
        kills = []
        watch.check(Sample(t=1.0, cpu_seconds=0, cores_busy=None, rss_bytes=reading.rss_bytes, threads=1,
                           processes=reading.processes), lambda: kills.append(1), tree.charged_bytes(watch.line_bytes()))
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert summed > 1 << 30, "the workers share the parent's 200 MiB: summed RSS counts it 9 times"
    assert 200 * MIB < reading.rss_bytes < 320 * MIB, "the sampled memory counts it once"
    assert watch.peak_bytes == 216 * MIB and not kills and watch.stop_requested_at is None
    assert "cgroup's charge" in tree.memory_counted


def test_a_v1_charge_without_the_hierarchical_figure_uses_the_groups_own(tmp_path):
    write(tmp_path / "memory.usage_in_bytes", "1000\n")
    write(tmp_path / "memory.stat", "cache 600\ninactive_file 400\n")
    assert cgroup.MemoryCharge(tmp_path, unified=False).read() == 600
    assert cgroup.MemoryCharge(tmp_path / "missing", unified=False).read() is None


def run_with_phases(budget: dict, phases: list[tuple[str, str, float, float]]) -> list:
    from tensorgauge.analyse.findings import find
    from tensorgauge.analyse.phases import build_phases

    events = []
    for i, (name, kind, start, end) in enumerate(phases):
        events += [Event(t=start, pid=1, kind="phase_begin", data={"id": i + 1, "name": name, "phase_kind": kind}),
                   Event(t=end, pid=1, kind="phase_end", data={"id": i + 1})]
    samples = [Sample(t=0.1 * i, cpu_seconds=0.1 * i, cores_busy=1, rss_bytes=10 * MIB, threads=1, processes=1)
               for i in range(40)]
    record = RunRecord(run_id="r", command=["python", "t.py"], started_at="2026-01-01T00:00:00", wall_seconds=4.0,
                       signal=9, budget=budget)
    return find(record, samples, events, build_phases(events, samples, end=4.0), category="memory")


def test_a_budget_below_the_frameworks_import_says_so_and_promises_no_checkpoint():
    """Killed inside `import tensorflow` under 400 MiB: the fix said "the checkpoint is restored"."""
    budget = {"stopped": True, "max_memory_bytes": 400 * MIB, "peak_bytes": 401 * MIB, "peak_t": 3.7,
              "killed_at": 3.7, "stop_requested_at": 3.5, "checkpoint": None, "graceful": False}
    stop = next(f for f in run_with_phases(budget, [("import tensorflow", "import", 0.1, 4.0)])
                if f.id == "memory_budget")
    assert "below what importing tensorflow alone takes (~520.0 MiB measured for TensorFlow 2.21)" in stop.title
    assert stop.evidence["stopped_in_kind"] == "import" and stop.evidence["stopped_in_phase"] == "import tensorflow"
    assert "restored" not in stop.fix and "no checkpoint" in stop.fix


def test_a_kill_without_a_checkpoint_promises_none_and_the_peak_is_where_the_budget_saw_it():
    budget = {"stopped": True, "max_memory_bytes": 400 * MIB, "peak_bytes": 401 * MIB, "peak_t": 2.5,
              "killed_at": 2.5, "checkpoint": None, "graceful": False}
    stop = next(f for f in run_with_phases(budget, [("fit", "fit", 1.0, 4.0), ("epoch 1", "epoch", 2.0, 4.0)])
                if f.id == "memory_budget")
    assert "peak 401.0 MiB during 'epoch 1'" in stop.title and "restored" not in stop.fix


def test_the_outcome_of_a_budget_kill_names_the_budget():
    from tensorgauge.render.terminal import outcome

    record = RunRecord(run_id="r", command=["x"], started_at="s", complete=True, signal=9,
                       budget={"stopped": True, "killed_at": 0.2})
    assert outcome(record) == "signal 9 (memory budget)"


@pytest.mark.parametrize("value", ["inf", "Infinity", "nan", "1e999"])
def test_a_cpu_budget_that_is_not_finite_is_one_clear_line(capsys, value):
    assert main(["run", "--max-cpus", value, "--", "true"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a finite number of CPUs" in err, err

