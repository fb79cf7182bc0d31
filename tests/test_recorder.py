from tensorgauge.model import RunRecord, Sample
from tensorgauge.monitoring.recorder import Recorder, to_event
from tensorgauge.store import Store
from tensorgauge.testing import FakeClock


def sample(t):
    return Sample(t=t, cpu_seconds=t, cores_busy=None, rss_bytes=1, threads=1, processes=1)


def test_commits_at_most_every_commit_seconds_and_on_force(tmp_path):
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026")
    store.save_run(record)
    clock = FakeClock(100.0)
    recorder = Recorder(store, record, t0=100.0, clock=clock, commit_seconds=0.5)
    committed = []
    for i in range(10):
        recorder.add([sample(i / 8)], [])
        committed.append(len(store.samples("r")))
        clock.advance(0.125)  # exact in binary: commits fall on 0, 0.5 and 1.0 s
    assert committed == [1, 1, 1, 1, 5, 5, 5, 5, 9, 9]
    recorder.add([], [], force=True)
    assert len(store.samples("r")) == 10


def test_events_are_relative_to_t0_and_env_facts_merge_into_the_record(tmp_path):
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026", env={"host": {"a": 1}})
    store.save_run(record)
    recorder = Recorder(store, record, t0=50.0, clock=FakeClock())
    recorder.add([], [{"t": 51.5, "pid": 3, "kind": "steps", "ends": [51.0, 52.0], "seconds": [0.1, 0.2]},
                      {"t": 52.0, "pid": 3, "kind": "env", "facts": {"tensorflow_version": "2.21.0"}},
                      {"t": "bad", "kind": "x"}], force=True)
    events = store.events("r")
    assert [e.kind for e in events] == ["env", "step_digest"] and events[0].t == 2.0
    assert events[1].data["first_ends"] == [1.0, 2.0] and events[1].data["count"] == 2
    assert store.run("r").env == {"host": {"a": 1}, "job": {"tensorflow_version": "2.21.0"}}
    assert to_event({"t": 1, "kind": "k"}, 0.5).pid == 0


def test_steps_are_stored_as_one_digest_per_phase_and_per_minute_of_a_long_phase(tmp_path):
    """The hook's step events become digests: at the phase's end, and every DIGEST_SECONDS of a long phase;
    the first steps of the phase are kept exactly across digests, the count and maximum exactly."""
    from tensorgauge.analyse.phases import build_phases
    from tensorgauge.monitoring.recorder import DIGEST_SECONDS
    from tensorgauge.steps import FIRST_STEPS

    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026")
    store.save_run(record)
    clock = FakeClock(0.0)
    recorder = Recorder(store, record, t0=0.0, clock=clock)
    recorder.add([], [{"t": 0.0, "pid": 1, "kind": "phase_begin", "id": 1, "name": "fit", "phase_kind": "fit"}])
    seconds = [0.01 * (1 + i % 7) for i in range(3 * FIRST_STEPS)]
    ends = [0.5 + i * 0.5 for i in range(len(seconds))]
    for i in range(0, len(seconds), 10):  # 10 steps an event, as the hook sends them, over 150 s
        clock.t = ends[i + 9]
        recorder.add([], [{"t": ends[i + 9], "pid": 1, "kind": "steps", "phase": 1, "seconds": seconds[i:i + 10],
                           "ends": ends[i:i + 10]}])
    clock.t = 151.0
    recorder.add([], [{"t": 151.0, "pid": 1, "kind": "phase_end", "id": 1}], force=True)
    events = store.events("r")
    digests = [e for e in events if e.kind == "step_digest"]
    assert len(digests) == 1 + int(150 // DIGEST_SECONDS)  # every minute, and the rest at the end
    assert [e.kind for e in events][-1] == "phase_end"  # the phase's last digest comes before its end
    assert sum(len(d.data["first_seconds"]) for d in digests) == FIRST_STEPS
    (fit,) = build_phases(events, [], end=152.0)
    assert fit.steps == len(seconds) and fit.step_seconds_max == max(seconds)
    exact = sorted(seconds)[len(seconds) // 2 - 1]
    assert abs(fit.step_seconds_p50 - exact) <= 0.01 * exact
