"""The monitoring loop on fake sources and a fake clock: exact ticks, the budget acting on
the sample that crossed it, the last forced tick, and failures reported, never swallowed."""

import json

import pytest

from tensorgauge.model import RunRecord
from tensorgauge.monitoring.budget import BudgetWatch
from tensorgauge.monitoring.limits import Budget
from tensorgauge.monitoring.monitor import Monitor
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.sources import TreeReading
from tensorgauge.store import Store
from tensorgauge.testing import FakeClock, FakeGpus, FakeProcessTree, FakeSources, FakeSystem


class Events:
    def __init__(self, batches=()):
        self.batches = list(batches)

    def read_new(self, everything=False):
        return self.batches.pop(0) if self.batches else []


def job_ending_after(clock: FakeClock, seconds: float, calls: list):
    """``wait_for_end`` for a job that ends ``seconds`` after t0: advances the fake clock."""
    end = clock.t + seconds

    def wait(timeout):
        if timeout == 0:  # the loop's check before each tick: has it ended already?
            return clock.t >= end
        calls.append(round(timeout, 9))
        if clock.t + timeout >= end:
            clock.t = end
            return True
        clock.advance(timeout)
        return False

    return wait


def reading(rss):
    return TreeReading(cpu_seconds=0.0, rss_bytes=rss, threads=1, processes=1)


def make(tmp_path, rss, events=(), observers=(), watch=None, kill=None, report=None):
    sources = FakeSources(tree=FakeProcessTree(readings=[reading(r) for r in rss]))
    clock = sources.clock
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["job"], started_at="2026-11-26T08:00:00+00:00")
    store.save_run(record)
    tree, _ = sources.watch_tree(1, "r", None)
    sampler = Sampler(tree, sources.system, sources.open_gpus(), clock, clock.now())
    monitor = Monitor(sampler, Recorder(store, record, clock.now(), clock), Events(events), interval_seconds=0.1,
                      watch=watch, kill=kill, observers=observers, report=report)
    return monitor, clock, store


def test_ticks_every_interval_until_the_job_ends_then_commits_everything(tmp_path):
    monitor, clock, store = make(tmp_path, rss=[100] * 100)
    waits: list = []
    monitor.run(job_ending_after(clock, 1.05, waits))
    assert monitor.samples_taken == 11  # t = 0.0, 0.1, ..., 1.0: none once the job has ended
    assert waits[:10] == [0.1] * 10 and waits[-1] == 0.1
    stored = store.samples("r")
    assert [round(s.t, 6) for s in stored] == [round(0.1 * i, 6) for i in range(11)]


def test_a_slow_tick_does_not_make_the_loop_burst(tmp_path):
    monitor, clock, store = make(tmp_path, rss=[100] * 100)
    slow_tick = monitor.tick

    def tick(force=False):
        slow_tick(force)
        if monitor.samples_taken == 3 and not force:
            clock.advance(0.55)  # the machine stalled for half a second

    monitor.tick = tick
    monitor.run(job_ending_after(clock, 1.0, []))
    times = [round(s.t, 6) for s in store.samples("r")]
    # The tick at 0.2 s stalled until 0.75 s: the next comes a whole interval later, no catch-up burst.
    assert times == [0.0, 0.1, 0.2, 0.85, 0.95]


def test_the_budget_kills_on_the_sample_that_crossed_it(tmp_path):
    watch = BudgetWatch(Budget(max_memory_bytes=1000), str(tmp_path / "stop"), None)
    killed: list = []
    monitor, clock, _ = make(tmp_path, rss=[100, 950, 990, 1200, 1300] + [1300] * 20, watch=watch,
                             kill=lambda: killed.append(clock.now()))
    monitor.run(job_ending_after(clock, 0.85, []))
    assert (tmp_path / "stop").exists() and watch.stop_requested_at == pytest.approx(0.1)  # 950 >= 90%
    assert killed == [pytest.approx(clock.t - 0.85 + 0.3)]  # at the fourth sample, once
    assert watch.killed_at == pytest.approx(0.3) and watch.peak_bytes == 1300


class Broken:
    def __init__(self):
        self.calls = 0

    def observe(self, sample, events):
        self.calls += 1
        raise RuntimeError("display gone")


class Seen:
    def __init__(self):
        self.samples, self.events = [], []

    def observe(self, sample, events):
        self.samples.append(sample)
        self.events += events


def test_a_failing_observer_is_reported_once_and_dropped_while_the_others_go_on(tmp_path):
    broken, seen, reports = Broken(), Seen(), []
    events = [[{"t": 1000.05, "pid": 7, "kind": "phase_begin", "id": 1, "name": "fit", "phase_kind": "fit"}]]
    monitor, clock, _ = make(tmp_path, rss=[100] * 20, events=events, observers=[broken, seen], report=reports.append)
    monitor.run(job_ending_after(clock, 0.45, []))
    assert broken.calls == 1 and reports == ["Broken stopped: RuntimeError: display gone"]
    assert len(seen.samples) == 6 and seen.samples[-1] is None  # five ticks and the forced last one
    assert [e.kind for e in seen.events] == ["phase_begin"]


def test_a_failing_tick_stops_recording_says_so_and_keeps_what_was_committed(tmp_path):
    reports: list = []
    monitor, clock, store = make(tmp_path, rss=[100] * 50, report=reports.append)
    real_add = store.add

    def add(run_id, samples, events):
        if clock.now() - 1000.0 > 0.55:
            raise OSError("No space left on device")
        real_add(run_id, samples, events)

    store.add = add
    monitor.run(job_ending_after(clock, 1.5, []))
    assert monitor.warning is not None and "No space left on device" in monitor.warning
    # Commits come every 0.5 s: the one at 1.0 s fails; what was committed at 0.0 and 0.5 s stays.
    assert reports == [monitor.warning] and "recording stopped at 1.0 s" in monitor.warning
    assert len(store.samples("r")) == 6 and monitor.samples_taken == 11  # no tick after the failure


def test_bad_events_from_the_job_are_counted_and_skipped(tmp_path):
    events = [[{"t": 1000.0, "kind": "phase_begin", "id": [1]},  # a list as a phase id
               {"t": "soon", "kind": "steps"},
               {"t": 1000.01, "pid": 1, "kind": "steps", "phase": 1, "seconds": ["x"]},
               {"t": 1000.02, "pid": 1, "kind": "phase_begin", "id": 1, "name": "fit", "phase_kind": "fit"}]]
    monitor, clock, store = make(tmp_path, rss=[100] * 5, events=events)
    monitor.run(job_ending_after(clock, 0.15, []))
    assert monitor.recorder.events_skipped == 3
    assert [e.kind for e in store.events("r")] == ["phase_begin"]


def test_run_and_monitor_take_fake_sources(tmp_path, monkeypatch):
    """The same Sources object drives `tensorgauge run` on a real child and the in-process monitor."""
    import sys

    import tensorgauge
    from tensorgauge.monitoring.runner import run

    tree = FakeProcessTree(readings=[reading(4096)] * 1000)
    sources = FakeSources(tree=tree, system=FakeSystem(), gpus=FakeGpus(names=["Fake GPU"]),
                          host={"hostname": "fake-host", "cores_allowed": 3.0})
    store = Store.open(tmp_path / "runs.db")
    # A child that lives a few samples: one that exits before the first may leave none (under a full suite).
    result = run([sys.executable, "-c", "import time; time.sleep(0.3)"], store, sources=sources, hook=False)
    record = store.run(result.record.run_id)
    assert record.env["host"] == {"hostname": "fake-host", "cores_allowed": 3.0, "gpus": ["Fake GPU"]}
    assert {s.rss_bytes for s in store.samples(record.run_id)} == {4096}
    with tensorgauge.monitor(store=str(tmp_path / "runs.db"), sources=FakeSources(
            tree=FakeProcessTree(readings=[reading(8192)] * 1000), host={"hostname": "in-process"})) as m:
        pass
    inner = store.run(m.run_id)
    assert inner.env["host"]["hostname"] == "in-process" and inner.complete
    assert json.dumps(inner.to_dict())


def test_near_the_budget_the_rss_is_read_between_samples_and_the_kill_comes_early(tmp_path):
    watch = BudgetWatch(Budget(max_memory_bytes=1000), str(tmp_path / "stop"), None)
    killed: list = []
    monitor, clock, _ = make(tmp_path, rss=[600] + [700] * 20, watch=watch, kill=lambda: killed.append(clock.now()))
    monitor.sampler.tree.between = [700, 800, 1100]  # a burst between the first two samples
    monitor.run(job_ending_after(clock, 0.35, []))
    # Read every 5 ms under 60% of the budget, every 2 ms from it: 700 at 2 ms, 800 at 4, 1100 at 6.
    assert watch.killed_at == pytest.approx(0.006) and len(killed) == 1  # not at the next sample


def test_a_recording_that_failed_leaves_the_budget_watch_running(tmp_path):
    """The store fails at 0.5 s; the memory crosses the budget at 0.8 s: the job is still killed."""
    watch = BudgetWatch(Budget(max_memory_bytes=1000), str(tmp_path / "stop"), None)
    killed: list = []
    monitor, clock, store = make(tmp_path, rss=[100] * 8 + [1200] * 10, watch=watch,
                                 kill=lambda: killed.append(clock.now() - 1000.0))

    def add(run_id, samples, events):
        if clock.now() - 1000.0 > 0.45:
            raise OverflowError("cannot fit 'int' into an index-sized integer")

    store.add = add
    monitor.run(job_ending_after(clock, 1.05, []))
    assert monitor.warning is not None and "recording stopped at 0.5 s" in monitor.warning
    assert killed == [pytest.approx(0.8)] and watch.peak_bytes == 1200


@pytest.mark.parametrize("ends, seconds", [
    ([1e299, -1e299], [0.1, 0.1]),  # overflowed the digest's per-second rate (OverflowError)
    ([1000.0, 1000.0 + 3e7], [0.1, 0.1]),  # a year of per-second rate: hundreds of MB
    ([1000.01, 1000.02], [0.1, 1e9]),  # a step longer than the run
])
def test_step_times_outside_the_run_are_skipped_not_stored(tmp_path, ends, seconds):
    events = [[{"t": 1000.01, "pid": 1, "kind": "steps", "phase": 1, "seconds": seconds, "ends": ends},
               {"t": 1000.02, "pid": 1, "kind": "steps", "phase": 1, "seconds": [0.01], "ends": [1000.02]}]]
    monitor, clock, store = make(tmp_path, rss=[100] * 5, events=events)
    monitor.run(job_ending_after(clock, 0.15, []))
    assert monitor.warning is None and monitor.recorder.events_skipped == 1
    digests = [e for e in store.events("r") if e.kind == "step_digest"]
    assert [d.data["count"] for d in digests] == [1] and len(digests[0].data["rate"]) == 1


def test_a_run_keeps_at_most_max_events_of_the_jobs_own_but_every_step(tmp_path, monkeypatch):
    from tensorgauge.monitoring import recorder

    monkeypatch.setattr(recorder, "MAX_EVENTS", 6)  # three phases: each is kept with room for its end
    phases = [{"t": 1000.0 + i / 100, "pid": 1, "kind": "phase_begin", "id": i, "name": f"p{i}", "phase_kind": "fit"}
              for i in range(5)]
    steps = [{"t": 1000.05 + i / 100, "pid": 1, "kind": "steps", "phase": 1, "seconds": [0.01],
              "ends": [1000.05 + i / 100]} for i in range(6)]
    monitor, clock, store = make(tmp_path, rss=[100] * 5, events=[phases + steps])
    monitor.run(job_ending_after(clock, 0.15, []))
    assert monitor.recorder.events_dropped == 2
    assert [e.data["name"] for e in store.events("r") if e.kind == "phase_begin"] == ["p0", "p1", "p2"]
    assert sum(e.data["count"] for e in store.events("r") if e.kind == "step_digest") == 6


def test_under_a_memory_budget_the_rss_is_read_between_samples_from_the_start(tmp_path):
    """From nothing past the budget between two samples (a list of 1 MB bytearrays, ~2 GB/s): caught at
    the next 5 ms read, not at the next sample 100 ms on (an overshoot of up to 38% before)."""
    watch = BudgetWatch(Budget(max_memory_bytes=1000), str(tmp_path / "stop"), None)
    killed: list = []
    monitor, clock, _ = make(tmp_path, rss=[100] * 20, watch=watch, kill=lambda: killed.append(clock.now()))
    monitor.sampler.tree.between = [150, 1200]
    monitor.run(job_ending_after(clock, 0.35, []))
    assert watch.killed_at == pytest.approx(0.010) and len(killed) == 1
