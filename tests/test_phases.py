import pytest

from tensorgauge.analyse.phases import build_phases, cpu_at
from tensorgauge.model import Event, GpuReading, Sample
from tensorgauge.series import SampleSeries


def sample(t, cpu, busy=None, rss=100, gpu_util=None):
    gpus = [GpuReading(index=0, util_percent=gpu_util, memory_used_bytes=int(gpu_util * 10))] if gpu_util else []
    return Sample(t=t, cpu_seconds=cpu, cores_busy=busy, rss_bytes=rss, threads=1, processes=1, gpus=gpus)


def begin(t, pid, pid_, name, kind, parent=None, cpu=0.0, rss=50):
    return Event(t=t, pid=pid, kind="phase_begin",
                 data={"id": pid_, "name": name, "phase_kind": kind, "parent": parent, "cpu": cpu, "rss": rss})


def end(t, pid, pid_, cpu, rss=60, **extra):
    return Event(t=t, pid=pid, kind="phase_end", data={"id": pid_, "cpu": cpu, "rss": rss, **extra})


def steps(pid, phase, seconds):
    return Event(t=0, pid=pid, kind="steps", data={"phase": phase, "seconds": seconds, "ends": []})


def test_tree_exact_cpu_and_step_rollup_from_epochs_only():
    events = [
        begin(1.0, 7, 1, "fit", "fit", cpu=2.0),
        begin(1.1, 7, 2, "epoch 1", "epoch", parent=1, cpu=2.1),
        steps(7, 2, [0.3, 0.1, 0.2]),
        begin(1.8, 7, 3, "validation", "evaluate", parent=2, cpu=2.9),
        steps(7, 3, [0.05] * 4),
        end(2.0, 7, 3, cpu=3.1),
        end(2.1, 7, 2, cpu=3.3),
        end(2.2, 7, 1, cpu=3.5),
    ]
    samples = [sample(t / 10, t / 10, busy=1.0 + (t == 15)) for t in range(0, 31)]
    fit, epoch, validation = build_phases(events, samples, end=3.0)
    assert (fit.parent, epoch.parent, validation.parent) == (None, 0, 1)
    assert fit.cpu_seconds == pytest.approx(1.5) and epoch.cpu_seconds == pytest.approx(1.2)
    assert fit.wall_seconds == pytest.approx(1.2) and fit.cores_busy_mean == pytest.approx(1.25)
    assert fit.cores_busy_peak == 2.0  # the sample at t=1.5
    assert epoch.steps == 3 and fit.steps == 3  # validation steps stay in validation
    assert validation.steps == 4 and validation.step_seconds_p50 == 0.05
    assert epoch.step_seconds_p50 == pytest.approx(0.2, rel=0.01) and epoch.step_seconds_max == 0.3  # a sketch
    assert all(p.complete for p in (fit, epoch, validation))
    assert fit.rss_start_bytes == 50 and fit.rss_end_bytes == 60 and fit.rss_peak_bytes == 100


def test_phase_cut_by_the_job_ending_uses_samples_and_is_incomplete():
    events = [begin(1.0, 7, 1, "fit", "fit", cpu=0.5), begin(1.0, 7, 2, "epoch 1", "epoch", parent=1, cpu=0.5)]
    samples = [sample(t, 2.0 * t) for t in (0.0, 1.0, 2.0, 3.0)]
    fit, epoch = build_phases(events, samples, end=2.5)
    assert not fit.complete and fit.end == 2.5
    assert fit.cpu_seconds == pytest.approx(3.0)  # 5.0 - 2.0, interpolated
    assert epoch.parent == 0


def test_error_ends_a_phase_and_is_kept():
    events = [begin(0.0, 7, 1, "load x", "load"), end(0.5, 7, 1, cpu=0.1, error="OSError")]
    (phase,) = build_phases(events, [], end=1.0)
    assert phase.complete and phase.error == "OSError"


def test_processes_have_separate_ids_and_are_ordered_by_start():
    events = [
        begin(2.0, 8, 1, "child fit", "fit"),
        begin(1.0, 7, 1, "parent", "custom"),
        begin(2.5, 8, 2, "child epoch", "epoch", parent=1),
        end(3.0, 8, 2, cpu=0.2), end(3.1, 8, 1, cpu=0.3), end(4.0, 7, 1, cpu=1.0),
        end(9.0, 9, 1, cpu=1.0),  # an end without a begin is ignored
    ]
    phases = build_phases(events, [], end=5.0)
    assert [p.name for p in phases] == ["parent", "child fit", "child epoch"]
    assert phases[2].parent == 1 and phases[1].parent is None and phases[1].pid == 8


def test_unknown_kind_becomes_custom_and_gpu_figures():
    events = [begin(0.0, 7, 1, "x", "weird"), end(1.0, 7, 1, cpu=0.0)]
    samples = [sample(0.5, 0, gpu_util=40.0), sample(1.0, 0, gpu_util=80.0)]
    (phase,) = build_phases(events, samples, end=1.0)
    assert phase.kind == "custom"
    assert (phase.gpu_util_mean, phase.gpu_util_peak, phase.gpu_memory_peak_bytes) == (60.0, 80.0, 800)


def test_helpers():
    series = SampleSeries.from_samples([sample(0.0, 0.0), sample(1.0, 2.0)])
    assert cpu_at(series, 0.25) == 0.5 and cpu_at(series, 5) == 2.0 and cpu_at(SampleSeries.empty(), 1) == 0.0


def test_phase_table_shows_gpu_columns_only_where_a_gpu_was_read():
    from rich.console import Console

    from tensorgauge.render.terminal import phase_table

    events = [begin(0.0, 7, 1, "idle", "custom"), end(1.0, 7, 1, cpu=0.1),
              begin(1.0, 7, 2, "matmul", "custom"), end(2.0, 7, 2, cpu=0.2)]
    with_gpu = [sample(t / 10, t / 100, gpu_util=(90 if t > 10 else 3)) for t in range(0, 21)]
    console = Console(record=True, width=200)
    console.print(phase_table(build_phases(events, with_gpu, end=2.0), 2.0))
    text = console.export_text()
    assert "GPU %" in text and "GPU mem" in text
    matmul_row = next(line for line in text.splitlines() if line.strip().startswith("matmul"))
    assert matmul_row.split()[-4:] == ["90", "90", "900", "B"]  # mean, peak, memory peak of the busy phase
    console = Console(record=True, width=200)
    console.print(phase_table(build_phases(events, [sample(t / 10, t / 100) for t in range(0, 21)], end=2.0), 2.0))
    assert "GPU" not in console.export_text()


def test_model_calls_leave_out_a_fits_own_validation_however_deep():
    from tensorgauge.analyse.phases import model_calls
    from tensorgauge.model import Phase

    phases = [Phase(name="fit", kind="fit", start=0.0, end=10.0),
              Phase(name="epoch 1", kind="epoch", start=0.0, end=5.0, parent=0),
              Phase(name="validation", kind="evaluate", start=4.0, end=5.0, parent=1),  # in the epoch, in the fit
              Phase(name="epoch 2", kind="epoch", start=5.0, end=10.0, parent=0),
              Phase(name="validation", kind="evaluate", start=9.0, end=10.0, parent=3),
              Phase(name="evaluate", kind="evaluate", start=11.0, end=12.0),
              Phase(name="predict", kind="predict", start=12.0, end=13.0)]
    assert [p.name for p in model_calls(phases, ("fit", "evaluate", "predict"))] == ["fit", "evaluate", "predict"]
