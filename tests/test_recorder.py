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
    assert [(e.t, e.kind) for e in events] == [(1.5, "steps"), (2.0, "env")]
    assert events[0].data["ends"] == [1.0, 2.0]
    assert store.run("r").env == {"host": {"a": 1}, "job": {"tensorflow_version": "2.21.0"}}
    assert to_event({"t": 1, "kind": "k"}, 0.5).pid == 0
