"""The run's memory peak: one measure, pages the job's processes share counted once (a forked child is not
its parent's memory again), named wherever a peak is shown; on real forks, and on hand-built runs."""

import json
import re
import subprocess
import sys
from pathlib import Path

from tensorgauge.analyse.check import check
from tensorgauge.analyse.compare import Side
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.model import RunRecord, Sample
from tensorgauge.render.check import text
from tensorgauge.sources.shared_memory import READ_CREDIT_SECONDS, ResidentOnce
from tensorgauge.testing import FakeClock

MIB = 1 << 20
JOBS = Path(__file__).parent / "jobs"


def test_a_fork_counts_only_what_it_holds_of_its_own():
    """A 210 MiB parent and a fork that shares all but 2 MiB of it: 212 MiB, read once; once the fork has
    allocated past its parent, it is the largest and the parent counts its own 1 MiB; a process that ended
    (its memory gone) counts nothing."""
    clock = FakeClock()
    uss = {1: MIB, 2: 2 * MIB, 3: 0}
    reads = []
    once = ResidentOnce(clock.now, read=lambda pid: reads.append(pid) or uss.get(pid))
    assert once.total({1: 210 * MIB}) == 210 * MIB and reads == []  # one process: its RSS, no reading
    assert once.total({1: 210 * MIB, 2: 210 * MIB}) == 212 * MIB and reads == [2]
    assert once.total({1: 210 * MIB, 2: 260 * MIB}) == 261 * MIB and reads == [2, 1]  # it allocated 50 MiB
    assert once.total({1: 210 * MIB, 2: 260 * MIB, 3: 210 * MIB}) == 261 * MIB and reads == [2, 1, 3]
    once.note({2: (5 * MIB, 210 * MIB)})  # the sampler's own USS reading: the fork copied 3 MiB on writing
    assert once.total({1: 210 * MIB, 2: 210 * MIB}) == 215 * MIB and reads == [2, 1, 3]


def test_readings_of_new_processes_keep_within_their_share_of_a_core():
    """Each reading costs what it took; past the credit a new process counts its RSS (an upper bound)
    until the credit has come back."""
    clock = FakeClock()
    cost = READ_CREDIT_SECONDS * 0.6

    def read(pid):
        clock.advance(cost)
        return MIB

    once = ResidentOnce(clock.now, read=read, timer=clock.now)
    rss = {1: 500 * MIB, 2: 500 * MIB}
    assert once.total(rss) == 501 * MIB
    rss[3] = 500 * MIB
    assert once.total(rss) == 502 * MIB and once.readings == 2  # the credit was not spent yet
    rss[4] = 500 * MIB
    assert once.total(rss) == 1002 * MIB and once.readings == 2  # spent: counted whole for now
    clock.advance(60.0)
    assert once.total(rss) == 503 * MIB and once.readings == 3


def _side(label, rss, processes, measure):
    samples = [Sample(t=0.1 * i, cpu_seconds=0.1 * i, cores_busy=1.0, rss_bytes=rss, threads=2, processes=processes)
               for i in range(20)]
    record = RunRecord(run_id=label, command=["python", "train.py"], started_at="2026", wall_seconds=2.0,
                       exit_code=0, complete=True, cpu_seconds_total=2.0, memory_measure=measure)
    return Side(label, RunReport.build(record, samples, []))


def test_a_peak_measured_another_way_is_not_compared_but_said():
    """A baseline whose peak summed a forked child's shared pages (867 MiB) against a run that counts them
    once (713 MiB): no 'RSS -17%' pass; the check says why memory was not checked."""
    summed, once = _side("old", 867 * MIB, 2, None), _side("new", 713 * MIB, 2, "rss_shared_once")
    assert summed.report.summary.rss_peak_measure == "rss_summed"
    result = check(summed, once)
    assert [c.measure for c in result.checks] == ["cpu"]
    assert "not compared RSS peak: the baseline's counts each process's RSS summed" in text(result)
    alike = check(_side("a", 700 * MIB, 1, None), once)  # one process: the same figure either way
    assert [c.describe() for c in alike.checks if c.measure == "memory"] == [
        "RSS peak (shared pages counted once): 700.0 MiB -> 713.0 MiB (+2%)"]


def _tg(tg_cmd, *args):
    return subprocess.run([*tg_cmd, *args], capture_output=True, text=True, timeout=180)


def test_a_real_fork_of_a_200_mib_job_is_one_peak_named_alike_everywhere(store_path, tg_cmd, tmp_path):
    """The job forks while it holds 200 MiB, the child sleeps and exits: summed RSS reached ~400 MiB; the
    stored peak counts the pages once, and `run`, `show`, `runs` and `check` print that one figure, named."""
    done = _tg(tg_cmd, "run", "--name", "fork", "--", sys.executable, str(JOBS / "brief_fork.py"), "1.5")
    assert done.returncode == 0, done.stderr
    _tg(tg_cmd, "show", "fork", "--json", str(tmp_path / "fork.json"))
    summary = json.loads((tmp_path / "fork.json").read_text())["summary"]
    assert summary["processes_peak"] == 2, "the child was never sampled: nothing was tested"
    assert 200 * MIB <= summary["rss_peak_bytes"] < 300 * MIB and summary["rss_peak_measure"] == "rss_shared_once"
    peak = re.search(r"RSS peak ([\d.]+ MiB) \(shared pages counted once\)", done.stderr)
    assert peak is not None, done.stderr
    figure = peak.group(1)
    assert f"RSS peak {figure} (shared pages counted once)" in _tg(tg_cmd, "show", "fork").stdout
    assert figure in _tg(tg_cmd, "runs").stdout
    assert _tg(tg_cmd, "baseline", "save", "fork", "fork").returncode == 0
    checked = _tg(tg_cmd, "check", "fork", "--against", "fork")
    assert checked.returncode == 0 and f"RSS peak (shared pages counted once): {figure} -> {figure}" in checked.stdout
