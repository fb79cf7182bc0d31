import pytest

from tensorgauge.analyse.account import account
from tensorgauge.analyse.phases import build_phases
from tensorgauge.analyse.summary import summarise
from tensorgauge.model import Event, GpuReading, RunRecord, Sample


def run_record(**kw):
    return RunRecord(run_id="r", command=["x"], started_at="2026", **kw)


def test_exact_kernel_totals_win_over_samples():
    samples = [Sample(t=0.1 * i, cpu_seconds=0.1 * i, cores_busy=1.0 if i else None, rss_bytes=100 * i,
                      threads=i, processes=1, uss_bytes=50 if i == 1 else None) for i in range(5)]
    summary = summarise(run_record(wall_seconds=0.5, cpu_seconds_total=0.6, rss_max_bytes=1000), samples)
    assert summary.cpu_seconds == 0.6 and summary.cores_busy_mean == 1.2
    assert summary.cores_busy_peak == 1.2  # never below the mean
    # ru_maxrss is not the job's peak (the fork carries the monitor's memory until exec): samples are.
    assert summary.rss_peak_bytes == 400 and summary.uss_peak_bytes == 50 and summary.threads_peak == 4


def test_incomplete_run_uses_samples():
    samples = [Sample(t=1.0, cpu_seconds=0.5, cores_busy=None, rss_bytes=10, threads=1, processes=1)]
    summary = summarise(run_record(), samples)
    assert summary.cpu_seconds == 0.5 and summary.cores_busy_mean == 0.5


def test_gpu_summary():
    samples = [Sample(t=i, cpu_seconds=0, cores_busy=None, rss_bytes=0, threads=0, processes=0,
                      gpus=[GpuReading(index=0, name="A", util_percent=u, memory_used_bytes=m, memory_total_bytes=9,
                                       power_watts=None, job_memory_bytes=j)])
               for i, (u, m, j) in enumerate([(10.0, 1, None), (30.0, 5, 3), (20.0, 4, 2)])]
    (gpu,) = summarise(run_record(wall_seconds=2), samples).gpu
    assert gpu == {"index": 0, "name": "A", "util_percent_mean": 20.0, "util_percent_peak": 30.0,
                   "memory_used_peak_bytes": 5, "memory_total_bytes": 9, "power_watts_mean": None,
                   "job_memory_peak_bytes": 3}


def test_account_names_import_dominance_and_phase_cpu_contrast():
    def ev(kind, t, pid_, **data):
        return Event(t=t, pid=1, kind=kind, data={"id": pid_, **data})

    events = [ev("phase_begin", 0.0, 1, name="import tensorflow", phase_kind="import", cpu=0.0),
              ev("phase_end", 2.0, 1, cpu=2.0),
              ev("phase_begin", 2.0, 2, name="fit", phase_kind="fit", cpu=2.0),
              ev("phase_end", 2.5, 2, cpu=2.9),
              ev("phase_begin", 2.5, 3, name="predict", phase_kind="predict", cpu=2.9),
              ev("phase_end", 3.5, 3, cpu=3.1)]
    phases = build_phases(events, [], end=3.8)
    summary = summarise(run_record(wall_seconds=3.8, cpu_seconds_total=3.3), [])
    text = "\n".join(account(phases, summary, 3.8, 2.0))
    assert "Importing TensorFlow (2.00 s) took longer than training (500.0 ms)" in text
    assert "fit kept 1.80 cores busy, predict only 0.20" in text
    assert "outside any phase" not in text  # 0.3 s of 3.8 s is under the 10% line
    assert "drop after saving" not in text  # nothing was saved: no word about saving
    events += [ev("phase_begin", 3.5, 4, name="save m.keras", phase_kind="save", cpu=3.1),
               ev("phase_end", 3.6, 4, cpu=3.15)]
    saved = "\n".join(account(build_phases(events, [], end=3.8), summary, 3.8, 2.0))
    assert "A drop after saving is the job moving to lighter work, not the save." in saved


def test_account_without_phases():
    summary = summarise(run_record(wall_seconds=1.0, cpu_seconds_total=0.5), [])
    assert "No TensorFlow phases" in account([], summary, 1.0, None)[-1]


def test_account_names_the_users_own_phases_in_words():
    from tensorgauge.model import Phase

    summary = summarise(run_record(wall_seconds=2.0, cpu_seconds_total=1.0), [])
    phases = [Phase(name="augment", kind="custom", start=0.1, end=1.9, cpu_seconds=0.9)]
    assert "Most of the time went to your own phases (tensorgauge.phase)" in account(phases, summary, 2.0, None)[1]


def test_the_account_says_events_were_dropped_and_never_that_the_job_ended_inside_a_phase_whose_end_was():
    from tensorgauge.model import Phase

    summary = summarise(run_record(wall_seconds=2.0, cpu_seconds_total=1.0), [])
    fit = Phase(name="fit", kind="fit", start=0.1, end=2.0, cpu_seconds=0.9, complete=False, end_dropped=True)
    epoch = Phase(name="epoch 9", kind="epoch", start=1.9, end=2.0, parent=0, complete=False, end_dropped=True)
    text = "\n".join(account([fit, epoch], summary, 2.0, None, events_dropped=75_000))
    assert "The job ended inside" not in text
    assert ("75,000 events from the job were dropped (more than a run keeps, or lost unread); the end of 'fit' "
            "and 1 more phase was not recorded: their figures run to the job's end.") in text
    epoch.end_dropped = False  # the job was killed in it
    assert "The job ended inside 'epoch 9'" in "\n".join(account([fit, epoch], summary, 2.0, None, events_dropped=9))


def test_memory_findings_name_the_data_set_the_growth_and_the_budget_stop():
    from tensorgauge.analyse.findings import find

    def memory_findings(record, samples, events, phases):
        return find(record, samples, events, phases, category="memory")

    mib = 1 << 20

    def ev(kind, t, **data):
        return Event(t=t, pid=1, kind=kind, data=data)

    events = [ev("dataset", 0.5, op="from_tensor_slices", bytes=800 * mib, elements=100_000),
              ev("dataset", 0.6, op="shuffle", buffer_size=100_000, elements=100_000)]
    for i in range(4):
        events += [ev("phase_begin", 1.0 + i, id=i + 1, name=f"epoch {i + 1}", phase_kind="epoch",
                      rss=(1000 + 300 * i) * mib, cpu=0.0),
                   ev("phase_end", 2.0 + i, id=i + 1, rss=(1300 + 300 * i) * mib, cpu=0.5)]
    samples = rss_samples(lambda t: (1000 + 300 * (t - 1)) * mib, 1.0, 4.9)
    phases = build_phases(events, samples, end=5.0)
    record = run_record(wall_seconds=5.0, budget={"stopped": True, "max_memory_bytes": 2200 * mib,
                                                  "peak_bytes": 2170 * mib, "checkpoint": "/c", "graceful": True})
    by_id = {f.id: f for f in memory_findings(record, samples, events, phases)}
    assert by_id["dataset_in_memory"].evidence["from_tensor_slices_bytes"] == 800 * mib
    assert by_id["dataset_in_memory"].expected_gain == "about 1.6 GiB less memory"  # arrays + full shuffle buffer
    assert by_id["memory_growth"].evidence["growth_per_epoch_bytes"] == pytest.approx(300 * mib, rel=0.01)
    stop = by_id["memory_budget"]
    assert stop.severity == "high" and stop.evidence["peak_phase"] == "epoch 4"
    assert "800.0 MiB from from_tensor_slices" in stop.title and "TFRecord" in stop.fix
    assert memory_findings(run_record(wall_seconds=1.0), [], [], []) == []


def rss_samples(rss_at, start, end, step=0.1):
    n = round((end - start) / step) + 1
    return [Sample(t=start + i * step, cpu_seconds=1, cores_busy=1, rss_bytes=int(rss_at(start + i * step)),
                   threads=1, processes=1) for i in range(n)]


def epoch_events(count, seconds=1.0):
    events = []
    for i in range(count):
        events += [Event(t=1.0 + i * seconds, pid=1, kind="phase_begin",
                         data={"id": i + 1, "name": f"epoch {i + 1}", "phase_kind": "epoch", "cpu": 0.0}),
                   Event(t=1.0 + (i + 1) * seconds, pid=1, kind="phase_end", data={"id": i + 1, "cpu": 0.5})]
    return events


def test_memory_growth_is_read_before_the_tools_profiler_window():
    """--diagnose's profiler window holds its trace (+550 MiB over 10 steps of a windowed LSTM, kept after): the
    job's growth is read up to where it began; a real leak is still found before it."""
    from tensorgauge.analyse.findings import find

    def found(rss_mib, window_from=None):
        events = epoch_events(3)
        if window_from is not None:  # 10 steps of 0.05 s, started in 0.1 s, stopped in 0.2 s
            events.append(Event(t=window_from + 0.8, pid=1, kind="input_probe",
                                data={"step_seconds": [0.05] * 10, "start_seconds": 0.1, "stop_seconds": 0.2}))
        events.sort(key=lambda e: e.t)
        samples = rss_samples(lambda t: rss_mib(t) * (1 << 20), 0.5, 4.0)
        phases = build_phases(events, samples, end=4.0)
        return {f.id for f in find(run_record(wall_seconds=4.0), samples, events, phases, category="memory")}

    def profiled(t):  # flat, then the window's trace from 3.05 s to 3.85 s, kept
        return 500 + 550 * min(max(t - 3.05, 0), 0.8) / 0.8

    assert "memory_growth" in found(profiled)  # read as the job's, without the window's event
    assert "memory_growth" not in found(profiled, window_from=3.05)
    assert "memory_growth" in found(lambda t: 500 + 400 * (t - 1), window_from=3.4)  # a leak before the window


@pytest.mark.parametrize(("rss_mib", "epochs", "grows", "stopped"), [
    (lambda t: 500 + 400 * (t - 1), 3, True, False),  # two later epochs of steady rise
    (lambda t: 500 + 400 * (t - 1), 2, False, False),  # one: a buffer refilled each epoch rises as steadily
    (lambda t: 500 + 400 * (t - 1), 2, True, True),  # stopped by the budget at the end of the second epoch
    # stopped so, its steps 13x slower after the first fifth of the second epoch (a linear correlation of 0.82)
    (lambda t: 500 + 2000 * min(max(t - 2, 0), 0.2) + 150 * max(t - 2.2, 0), 2, True, True),
    (lambda t: 500 + 400 * (t - 1), 1, False, True),  # the first epoch alone is warm-up
    (lambda t: 500 + 400 * min(t - 1, 1), 4, False, False),  # rose in the first epoch, flat after
    (lambda t: 500 + (400 if t > 2.5 else 0), 4, False, False),  # one jump (a cache filled), not a leak
    (lambda t: 500 + 20 * (t - 1), 4, False, False),  # 20 MiB an epoch: too little to report
])
def test_memory_growth_needs_a_steady_rise_after_the_first_epoch(rss_mib, epochs, grows, stopped):
    from tensorgauge.analyse.findings import find

    def memory_findings(record, samples, events, phases):
        return find(record, samples, events, phases, category="memory")

    events = epoch_events(epochs)
    samples = rss_samples(lambda t: rss_mib(t) * (1 << 20), 0.5, 1.0 + epochs)
    phases = build_phases(events, samples, end=1.0 + epochs)
    record = run_record(wall_seconds=1.0 + epochs, budget={"stopped": stopped})
    found = {f.id for f in memory_findings(record, samples, events, phases)}
    assert ("memory_growth" in found) == grows


def test_swap_pressure_names_the_growth_and_the_phase_and_ignores_a_steady_swap():
    from tensorgauge.analyse.findings import find

    def samples(swap_mib):
        return [Sample(t=float(i), cpu_seconds=0.0, cores_busy=None, rss_bytes=500 << 20, threads=1, processes=1,
                       mem_available_bytes=(100 if i > 2 else 900) << 20, swap_used_bytes=s << 20)
                for i, s in enumerate(swap_mib)]

    events = [Event(t=1.5, pid=1, kind="phase_begin", data={"id": 1, "name": "fit", "phase_kind": "fit"}),
              Event(t=5.5, pid=1, kind="phase_end", data={"id": 1})]
    record = run_record(wall_seconds=6.0)
    phases = build_phases(events, samples([0] * 6), end=6.0)
    swapping = samples([100, 100, 300, 700, 1400, 900])
    (finding,) = [f for f in find(record, swapping, events, phases) if f.id == "swap_pressure"]
    assert finding.severity == "high" and finding.evidence["swap_growth_bytes"] == 1300 << 20
    assert finding.evidence["peak_phase"] == "fit" and finding.evidence["mem_available_min_bytes"] == 100 << 20
    moderate = samples([100, 200, 500, 420, 400, 400])
    assert [f.severity for f in find(record, moderate, events, phases) if f.id == "swap_pressure"] == ["moderate"]
    steady = samples([2000, 2000, 2100, 2050, 2000, 2000])  # swap in use from before, barely moving
    assert [f for f in find(record, steady, events, phases) if f.id == "swap_pressure"] == []
    assert [f for f in find(record, samples([0]), events, phases) if f.id == "swap_pressure"] == []
