"""The memory breakdown, the end cause and the post-mortem, on hand-built runs."""

from tensorgauge.analyse.findings import find
from tensorgauge.analyse.memory_breakdown import breakdown_at, end_cause, largest, phase_breakdowns, post_mortem
from tensorgauge.analyse.phases import as_series, build_phases
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.model import Event, RunRecord, Sample

MiB = 1 << 20


def ev(kind, t, **data):
    return Event(t=t, pid=1, kind=kind, data=data)


def record(**kw):
    return RunRecord(run_id="r", command=["x"], started_at="2026", **{"complete": True, **kw})


def fit_events(buffer=None, error=None):
    """A fit from 1 to 5 s (epochs 1-2); facts sent at 1.5 s with 300 MiB RSS; a pipeline built before."""
    events = [ev("dataset", 0.5, op="from_tensor_slices", bytes=100 * MiB, copied_bytes=50 * MiB, elements=1000)]
    if buffer:
        events.append(ev("dataset", 0.6, op="shuffle", buffer_size=1000, elements=1000, holds_bytes=buffer))
    events += [ev("phase_begin", 1.0, id=1, name="fit", phase_kind="fit", parent=None),
               ev("phase_begin", 1.0, id=2, name="epoch 1", phase_kind="epoch", parent=1),
               ev("memory_facts", 1.5, when="steps", weights_bytes=4 * MiB, optimizer_bytes=8 * MiB,
                  input_arrays_bytes=None, rss=300 * MiB),
               ev("steps", 2.9, phase=2, seconds=[0.1] * 10, ends=[1.0 + 0.19 * i for i in range(1, 11)]),
               ev("phase_end", 3.0, id=2),
               ev("phase_begin", 3.0, id=3, name="epoch 2", phase_kind="epoch", parent=1),
               ev("steps", 4.0, phase=3, seconds=[0.1] * 4, ends=[3.1, 3.3, 3.5, 3.7])]
    if error:
        events += [ev("phase_end", 4.0, id=3, error=error), ev("phase_end", 4.0, id=1, error=error),
                   ev("job_error", 4.2, type=error, module="m", message="OOM when allocating tensor")]
    else:
        events += [ev("phase_end", 5.0, id=3), ev("phase_end", 5.0, id=1)]
    return events


def samples(peak_at=2.0, peak=400 * MiB, end=5.0):
    return [Sample(t=0.1 * i, cpu_seconds=0.1 * i, cores_busy=1.0, rss_bytes=peak if abs(0.1 * i - peak_at) < 0.05
                   else 250 * MiB, threads=1, processes=1) for i in range(int(end * 10) + 1)]


def test_breakdown_counts_measures_and_keeps_the_residual():
    events = fit_events(buffer=30 * MiB)
    phases = build_phases(events, samples(), end=5.0)
    b = breakdown_at(2.0, 400 * MiB, events, phases)
    assert b["weights_bytes"] == 4 * MiB and b["optimizer_bytes"] == 8 * MiB
    assert b["input_arrays_bytes"] == 150 * MiB  # the arrays and the RSS from_tensor_slices added
    assert b["data_buffers_bytes"] == 30 * MiB
    assert b["step_working_bytes"] == 100 * MiB  # the peak over the RSS before the third batch
    assert b["residual_bytes"] == 400 * MiB - (4 + 8 + 150 + 30 + 100) * MiB and not b["clipped"]
    parts = sum(b[k] for k in ("weights_bytes", "optimizer_bytes", "input_arrays_bytes", "data_buffers_bytes",
                               "step_working_bytes", "residual_bytes"))
    assert parts == b["rss_bytes"]


def test_components_never_sum_above_rss():
    events = fit_events(buffer=900 * MiB)
    phases = build_phases(events, samples(), end=5.0)
    b = breakdown_at(2.0, 400 * MiB, events, phases)
    assert b["clipped"] and b["residual_bytes"] == 0 and b["step_working_bytes"] == 0
    assert b["data_buffers_bytes"] == 400 * MiB - (4 + 8 + 150) * MiB
    assert largest(b) == "data_buffers_bytes"


def test_nothing_counted_is_no_breakdown_and_keras_own_datasets_are_left_out():
    events = [ev("phase_begin", 1.0, id=1, name="fit", phase_kind="fit", parent=None),
              ev("dataset", 1.2, op="from_tensor_slices", bytes=10 * MiB, elements=10),  # Keras' adapter
              ev("phase_end", 2.0, id=1)]
    phases = build_phases(events, [], end=2.0)
    assert breakdown_at(1.5, 100 * MiB, events, phases) is None


def test_largest_is_counted_before_residual_and_a_buffer_wins_a_tie():
    assert largest({"input_arrays_bytes": 5, "data_buffers_bytes": 5, "residual_bytes": 50}) == "data_buffers_bytes"
    assert largest({"weights_bytes": 0, "residual_bytes": 50}) == "residual_bytes"


def test_each_phase_gets_its_breakdown():
    events = fit_events(buffer=30 * MiB)
    phases = build_phases(events, samples(), end=5.0)
    phase_breakdowns(phases, events)
    fit = next(p for p in phases if p.kind == "fit")
    assert fit.memory_breakdown["rss_bytes"] == fit.rss_peak_bytes == 400 * MiB
    assert fit.to_dict()["memory_breakdown"]["weights_bytes"] == 4 * MiB


def test_end_cause_names_each_way_a_job_ends():
    assert end_cause(record(exit_code=0), []) == "exit"
    assert end_cause(record(signal=15), []) == "signal"
    assert end_cause(record(signal=9, oom_killed=True), []) == "oom_killer"
    assert end_cause(record(exit_code=75, budget={"stopped": True}), []) == "budget"
    error = [ev("job_error", 1.0, type="ResourceExhaustedError", message="OOM when allocating")]
    assert end_cause(record(exit_code=1), error) == "framework_oom"
    jax = [ev("job_error", 1.0, type="XlaRuntimeError", message="RESOURCE_EXHAUSTED: Out of memory")]
    assert end_cause(record(exit_code=1), jax) == "framework_oom"
    other = [ev("job_error", 1.0, type="ValueError", message="bad shape")]
    assert end_cause(record(exit_code=1), other) == "exit"
    assert end_cause(record(complete=False), []) is None


def test_post_mortem_of_a_framework_oom_says_where_and_what_held_the_memory():
    events = fit_events(buffer=300 * MiB, error="ResourceExhaustedError")
    run = record(exit_code=1, wall_seconds=4.5)
    series = as_series(samples(peak_at=3.9, peak=600 * MiB, end=4.5))
    phases = build_phases(events, series, end=4.5)
    pm = post_mortem(run, series, events, phases)
    assert pm["cause"] == "framework_oom" and pm["epoch"] == "epoch 2" and pm["steps_done"] == 4
    assert pm["t"] <= 4.0  # raised inside the epoch, not when it reached the top of the job
    assert pm["rss_bytes"] == 600 * MiB and pm["largest"] == "data_buffers_bytes"
    assert "shuffle" in pm["fix"]
    (finding,) = [f for f in find(run, series, events, phases) if f.id == "out_of_memory"]
    assert finding.severity == "high" and "in fit > epoch 2, after 4 steps" in finding.title
    assert "ResourceExhaustedError" in finding.title and "tf.data buffers" in finding.title


def test_no_post_mortem_for_a_job_that_did_not_die_of_memory():
    events = fit_events()
    series = as_series(samples())
    assert post_mortem(record(exit_code=0), series, events, build_phases(events, series, end=5.0)) is None


def test_report_json_carries_end_cause_breakdown_and_post_mortem():
    events = fit_events(buffer=30 * MiB)
    doc = RunReport.build(record(exit_code=0, wall_seconds=5.0), samples(), events).to_dict()
    assert doc["end_cause"] == "exit" and doc["post_mortem"] is None
    assert doc["memory_breakdown"]["rss_bytes"] == 400 * MiB
    assert next(p for p in doc["phases"] if p["kind"] == "fit")["memory_breakdown"]["optimizer_bytes"] == 8 * MiB
