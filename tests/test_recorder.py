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


def begin(phase_id, name, kind, parent=None, t=1.0, **more):
    return {"t": t, "pid": 1, "kind": "phase_begin", "id": phase_id, "name": name, "phase_kind": kind,
            "parent": parent, **more}


def end(phase_id, t=1.0):
    return {"t": t, "pid": 1, "kind": "phase_end", "id": phase_id}


def one_step(phase_id, t=1.0):
    return {"t": t, "pid": 1, "kind": "steps", "phase": phase_id, "seconds": [0.001], "ends": [t]}


def recorded(tmp_path, raw, lost=0):
    """The events stored, and the recorder, of a run whose job sent ``raw`` (``lost`` more lost unread after it)."""
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026")
    store.save_run(record)
    recorder = Recorder(store, record, t0=0.0, clock=FakeClock(2.0))
    recorder.add([], raw)
    recorder.lost_unread(lost)
    recorder.add([], [], force=True)
    return store.events("r"), recorder


def test_past_max_events_a_kept_phase_keeps_its_end_and_the_steps_of_phases_not_kept_count_in_their_parent(
        tmp_path, monkeypatch):
    """A fit of 10 one-step epochs in a run that keeps 8 of the job's events: the fit and 3 epochs are kept,
    each with its end (the fit's, its last event, used to be dropped: "fit (cut)"); the 7 epochs not kept
    count their steps in the fit, in the fit's own digest (they made one digest each, of no phase kept)."""
    from tensorgauge.analyse.phases import build_phases
    from tensorgauge.monitoring import recorder

    monkeypatch.setattr(recorder, "MAX_EVENTS", 8)
    raw = [begin(1, "fit", "fit")]
    for epoch in range(10):
        raw += [begin(2 + epoch, f"epoch {epoch}", "epoch", parent=1), one_step(2 + epoch), end(2 + epoch)]
    events, rec = recorded(tmp_path, raw + [end(1)])
    phases = build_phases(events, [], end=2.0)
    assert [p.name for p in phases] == ["fit", "epoch 0", "epoch 1", "epoch 2"]
    assert all(p.complete for p in phases) and phases[0].steps == 10
    assert sum(e.kind == "step_digest" for e in events) == 4 and rec.events_dropped == 14


def test_a_phase_open_while_events_were_lost_unread_reads_as_its_end_dropped_one_begun_after_as_cut(tmp_path):
    """The fit was open when 3 of the job's events were lost (told with the next one): its end may be
    among them. 'p' began after and was never ended (the job killed in it): cut. A job cannot write the
    monitor's own mark."""
    from tensorgauge.analyse.phases import build_phases

    raw = [begin(1, "fit", "fit"), begin(2, "p", "custom", lost_before=3),
           {"t": 1.0, "pid": 1, "kind": "phase_end_unrecorded", "id": 2}]
    events, rec = recorded(tmp_path, raw)
    fit, p = build_phases(events, [], end=2.0)
    assert fit.end_dropped and not fit.complete and fit.end == 2.0
    assert not p.end_dropped and not p.complete
    assert rec.events_dropped == 3 and rec.events_skipped == 1


def test_phases_open_when_the_rest_of_the_events_was_left_unread_read_as_their_ends_dropped(tmp_path):
    from tensorgauge.analyse.phases import build_phases

    events, _ = recorded(tmp_path, [begin(1, "fit", "fit"), begin(2, "epoch 1", "epoch", parent=1)], lost=1000)
    assert [(p.name, p.end_dropped) for p in build_phases(events, [], end=2.0)] == [("fit", True), ("epoch 1", True)]
    assert [e.kind for e in events].count("phase_end_unrecorded") == 2
