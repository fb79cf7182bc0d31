"""A short fit's after-fit A/B, held: a later fit's rounds replace it (its compute-only steps never run, the
cost the tool-cost benchmark's warm-up fit paid for a verdict the analysis then set aside), else it runs at
exit; on fakes, and on a real Keras job under ``tensorgauge run``."""

import functools
import itertools
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_tf
from test_input_window import Clock, FakeModel, quiet_machine  # noqa: F401 (autouse)

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook import input_ab, input_window
from tensorgauge.hook.listeners import FitCall
from tensorgauge.hook.protocol import INPUT_MODERATE, round_share, share_interval
from tensorgauge.store import Store

JOBS = Path(__file__).parent / "jobs"


@pytest.fixture
def fits(monkeypatch, events, request):
    """``fit(steps)``: a fit of ``steps`` 30 ms steps (5 ms compute-only) on one fake model, through the hook's
    input diagnosis with the real A/B, on a fake clock; an indirect ``request.param``: the real steps' seconds,
    in turn, in place of 30 ms."""
    real_steps = itertools.cycle(request.param) if getattr(request, "param", None) else None
    clock = Clock()
    for module in (input_window, input_ab):
        monkeypatch.setattr(module.time, "monotonic", clock)
    monkeypatch.setattr("tensorgauge.hook.timing.time.monotonic", clock)
    monkeypatch.setattr(input_window, "_under_strategy", lambda model: False)
    monkeypatch.setattr(input_window, "xla_on_cpu", lambda model: False)
    monkeypatch.setattr(input_ab, "cached_input", lambda x, y, batch_size, spec=None: ("cached", "fake", [[32]]))
    monkeypatch.setattr(input_window, "InputAB", functools.partial(input_ab.InputAB, clock=clock))
    monkeypatch.setenv("TENSORGAUGE_DIAGNOSE", "auto")
    monkeypatch.setattr(input_window._InputDiagnosis, "done", False)
    monkeypatch.setattr(input_window._InputDiagnosis, "longest_tried", 0.0)
    monkeypatch.setattr(input_window._InputDiagnosis, "open_fits", 0)
    monkeypatch.setattr(input_window._InputDiagnosis, "open_input", None)
    monkeypatch.setattr(input_window._InputDiagnosis, "stages_timed", False)
    monkeypatch.setattr(input_window._Deferred, "held", None)
    model = FakeModel(clock, 0.030, 0.005)
    steps = model.train_function
    model.compute_only = 0  # compute-only steps run (the counter variable is restored after them)

    def counted(iterator):
        model.compute_only += iterator == "cached"
        if real_steps is not None and iterator != "cached":
            model.real = next(real_steps)
        return steps(iterator)

    model.train_function = counted

    def fit(steps: int, fit_input=(None, None, 32)) -> None:
        call = FitCall(model=model, keras_callbacks=None, kwargs={"steps_per_epoch": steps, "epochs": 1},
                       fit_input=fit_input)
        listener = input_window._input_listener(call)  # None once a fit's measure settled it
        for step in range(steps):
            if listener is not None:
                listener.on_train_batch_begin(model, 0, step)
            model.train_function("real")
        if listener is not None:
            listener.on_train_end(model)

    return model, fit, events


def test_a_short_fits_compute_only_steps_wait_and_a_later_fits_rounds_replace_them(fits):
    model, fit, events = fits
    original = model.train_function
    fit(60)  # 49 steps after its warm-up: too few for rounds, timed for an A/B after it
    assert model.compute_only == 0  # no compute-only step ran as it ended
    assert model.train_function is original
    assert not [e for e in events() if e["kind"] == "input_ab"]
    # Under twice the first fit's length, but with room for rounds: it measures, and the held A/B is dropped.
    fit(100)
    abs_ = [e for e in events() if e["kind"] == "input_ab"]
    measured = [e for e in abs_ if e.get("real_step_seconds")]
    assert len(measured) == 1 and not measured[0]["after_fit"]
    (dropped,) = [e for e in abs_ if e.get("skipped")]
    assert "later fit measured" in dropped["skipped"]
    compute_steps = sum(len(r) + input_ab._DROPPED for r in measured[0]["compute_step_seconds"])
    assert model.compute_only == compute_steps  # the first fit's excursions never ran
    input_window.flush_deferred()  # at exit: nothing held
    assert not events()


def measured(events) -> list[dict]:
    return [e for e in events() if e["kind"] == "input_ab" and e.get("real_step_seconds")]


# Real steps of 3 to 7.5 ms against 5 ms compute-only, drawn at random: rounds whose interval straddles 5% (a
# pipeline whose speed swings within a fit).
_DRAW = random.Random(7)
SWINGING = [_DRAW.uniform(0.003, 0.0075) for _ in range(997)]


@pytest.mark.parametrize("fits", [SWINGING], indirect=True)
def test_a_fit_whose_rounds_leave_the_verdict_open_has_later_fits_measure_again(fits):
    model, fit, events = fits
    fit(200)
    (first,) = measured(events)
    low, high = share_interval([round_share(r, c) for r, c in
                               zip(first["real_step_seconds"], first["compute_step_seconds"])])
    assert low < INPUT_MODERATE <= high  # open
    fit(200)  # not longer than the first: measures all the same
    fit(30)  # no room for rounds: the verdict so far stands, no after-fit A/B is held
    fit(200)
    fit(200)  # MAX_AB_FITS have measured: no more
    assert 1 + len(measured(events)) == input_window.MAX_AB_FITS  # (events() gives those not read before)
    input_window.flush_deferred()
    assert not events()
    assert input_window._InputDiagnosis.done


@pytest.mark.parametrize("fits", [SWINGING], indirect=True)
def test_a_later_fit_on_other_input_does_not_measure_again(fits):
    """A job's fit on one cached batch of its data after its real fit (its own A/B) measured no input cost, and
    the two fits' rounds pooled withheld the real fit's verdict: only a fit on the same input measures again."""
    import numpy as np

    model, fit, events = fits
    real = (np.zeros((6400, 256), np.float32), np.zeros(6400, np.int64), 64)
    fit(200, real)
    (first,) = measured(events)
    low, high = share_interval([round_share(r, c) for r, c in
                               zip(first["real_step_seconds"], first["compute_step_seconds"])])
    assert low < INPUT_MODERATE <= high  # open
    fit(200, (np.zeros((64, 256), np.float32), np.zeros(64, np.int64), 64))  # other input: the verdict stands
    fit(200, (np.zeros((6400, 128), np.float32), np.zeros(6400, np.int64), 64))
    assert not measured(events)
    fit(200, (np.ones((6400, 256), np.float32), np.ones(6400, np.int64), 64))  # the same input's shapes again
    assert len(measured(events)) == 1


def test_input_signatures_tell_inputs_apart_by_spec_length_shapes_and_batch():
    import numpy as np

    signature = input_window.input_signature
    a = np.zeros((100, 8), np.float32)
    assert signature((a, None, 32)) == signature((np.ones((100, 8), np.float32), None, 32))
    assert signature((a, None, 32)) != signature((a, None, 64))
    assert signature((a, None, 32)) != signature((a.astype(np.float64), None, 32))
    assert signature(({"x": a, "y": a[:, :2]}, a[:, 0], 8)) == signature(({"y": a[:, :2], "x": a}, a[:, 0], 8))

    class Dataset:  # a tf.data.Dataset's two facts, faked
        def __init__(self, spec, length):
            self.element_spec, self.length = spec, length

        def cardinality(self):
            return self.length

    assert signature((Dataset("(8,)", 100), None, None)) == signature((Dataset("(8,)", 100), None, None))
    assert signature((Dataset("(8,)", 100), None, None)) != signature((Dataset("(8,)", -1), None, None))


def test_a_fit_whose_rounds_settle_the_verdict_is_the_only_one_measured(fits):
    model, fit, events = fits
    fit(200)  # 30 ms steps against 5 ms compute-only: established at once
    fit(400)
    assert len(measured(events)) == 1 and input_window._InputDiagnosis.done


def test_a_held_ab_is_measured_at_exit_when_no_later_fit_measures(fits):
    model, fit, events = fits
    fit(60)
    fit(20)  # too short to try: the held A/B stays
    assert not [e for e in events() if e["kind"] == "input_ab"]
    input_window.flush_deferred()
    (event,) = [e for e in events() if e["kind"] == "input_ab"]
    assert event["after_fit"] and len(event["compute_step_seconds"]) == input_ab.MIN_ROUNDS
    assert model.compute_only == sum(len(r) + input_ab._DROPPED for r in event["compute_step_seconds"])


@needs_tf
@pytest.mark.tf
def test_real_job_only_short_fit_gets_its_verdict_at_exit(store_path, tg_cmd):
    result = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, str(JOBS / "short_fits.py")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    split = RunReport.load(Store.open(store_path), "last").input_split or {}
    assert split.get("measured"), split
    assert "blocks against as many compute-only steps" in split["measured_by"]


@needs_tf
@pytest.mark.tf
def test_real_job_warm_up_fits_held_ab_is_replaced_by_the_next_fits_rounds(store_path, tg_cmd):
    result = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, str(JOBS / "short_fits.py"), "--then-long"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    report = RunReport.load(Store.open(store_path), "last")
    split = report.input_split or {}
    assert split.get("measured") and "rounds of real and compute-only steps" in split["measured_by"], split


def test_tensorgauge_monitor_measures_a_held_ab_before_its_run_ends(fits, store_path):
    """In a notebook the process does not exit: the held A/B is run as ``tensorgauge.monitor()`` ends,
    into its run."""
    from tensorgauge.monitoring.inprocess import monitor

    model, fit, _ = fits
    with monitor(store=str(store_path)) as run:
        fit(60)
    (event,) = [e for e in Store.open(str(store_path)).events(run.run_id) if e.kind == "input_ab"]
    assert event.data["after_fit"] and len(event.data["compute_step_seconds"]) == input_ab.MIN_ROUNDS
    assert input_window._Deferred.held is None


@pytest.mark.parametrize("steps", [76, 80, 85, 100])  # 76-85 left the window 0-9 of its 10 steps
def test_with_diagnose_rounds_in_place_of_disturbed_ones_leave_the_profiler_window_its_steps(fits, monkeypatch, steps):
    """An input-bound fit beside a neighbour that comes and goes (every round disturbed): rounds run in place of
    the disturbed ones took it to its end, and --diagnose's profiler window got no step. Now such a round
    begins only where the window's steps are left after it; the planned rounds run all the same."""
    model, fit, events = fits
    monkeypatch.setenv("TENSORGAUGE_DIAGNOSE", "always")
    loads = itertools.cycle([1.5, 0.0])
    monkeypatch.setattr(input_ab.machine_load, "other_cores", lambda begin, end: next(loads))
    monkeypatch.setattr(input_window, "small_steps", lambda *args: False)
    windows = []

    class Window:  # the profiler (TensorFlow's) faked: the steps it was given
        def __init__(self, steps, allowance_seconds):
            self.steps, self.seen, self.active = steps, 0, False
            windows.append(self)

        def start(self):
            self.active = True
            return True

        def on_step_begin(self, now):
            self.seen += 1
            if self.seen > self.steps:
                self.finish()
            return not self.active

        def finish(self):
            self.active = False

    monkeypatch.setattr(input_window, "ProfilerWindow", Window)
    fit(steps)
    (event,) = measured(events)
    assert len(event["compute_step_seconds"]) >= input_ab.MIN_ROUNDS
    (window,) = windows
    assert window.seen > window.steps, f"the window profiled {window.seen - 1} of its {window.steps} steps"
