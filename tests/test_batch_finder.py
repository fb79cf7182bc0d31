"""--find-batch-size's search on fakes: a job whose peak memory is fixed + per example x batch."""

import types

import pytest

from tensorgauge.analyse.memory_breakdown import batch_size_search
from tensorgauge.hook import batch_finder
from tensorgauge.hook.batch_finder import largest_within, line, search
from tensorgauge.model import Event

MiB = 1 << 20


class FakeTrials:
    """Peak = fixed + per_example x batch (+ an extra the line cannot see above ``kink``)."""

    def __init__(self, fixed, per_example, cap=1 << 16, kink=None, dataset=False, speed=lambda batch: 10.0 * batch):
        self.fixed, self.per_example, self._cap, self.kink, self.dataset = fixed, per_example, cap, kink, dataset
        self.speed = speed  # examples/s at a batch size (by default still growing at the largest)
        self.tried: list[int] = []

    def cap(self):
        return self._cap

    def run(self, batch):
        self.tried.append(batch)
        peak = self.fixed + self.per_example * batch
        if self.kink and batch > self.kink:
            peak += 4 * self.per_example * (batch - self.kink)
        return {"batch_size": batch, "peak_bytes": int(peak), "steps": 6, "step_seconds": batch / self.speed(batch),
                "examples_per_second": self.speed(batch), "seconds": 1.0, "error": None}


def test_finds_the_largest_batch_within_the_target_without_passing_it():
    budget = 2000 * MiB
    trials = FakeTrials(fixed=700 * MiB, per_example=8 * MiB)
    result = search(trials, 32, budget)
    target = 0.8 * budget
    assert result["recommended_batch_size"] == 112  # (1600 - 700) / 8 = 112.5 -> a multiple of 8
    assert 700 * MiB + 8 * MiB * 112 <= target < 700 * MiB + 8 * MiB * 120
    assert all(700 * MiB + 8 * MiB * b <= target for b in trials.tried)  # never a trial past the target
    assert trials.tried[-1] == 112  # verified by a trial of its own
    assert result["fixed_bytes"] == 700 * MiB and result["per_example_bytes"] == 8 * MiB


def test_a_line_that_is_optimistic_is_caught_by_the_verifying_trial():
    trials = FakeTrials(fixed=700 * MiB, per_example=8 * MiB, kink=100)
    result = search(trials, 32, 2000 * MiB)
    assert result["recommended_batch_size"] is not None
    last = [t for t in trials.tried if t == result["recommended_batch_size"]]
    assert last and 700 * MiB + 8 * MiB * last[0] + 32 * MiB * max(0, last[0] - 100) <= 0.8 * 2000 * MiB


def test_a_job_whose_own_batch_does_not_fit_is_searched_downwards():
    trials = FakeTrials(fixed=700 * MiB, per_example=8 * MiB)
    result = search(trials, 512, 2000 * MiB)
    assert trials.tried[:3] == [512, 256, 128] and result["recommended_batch_size"] == 112


def test_small_batches_grow_four_times_and_the_data_caps_the_batch():
    trials = FakeTrials(fixed=700 * MiB, per_example=1024, cap=5000)
    result = search(trials, 16, 2000 * MiB)
    assert trials.tried[:3] == [16, 32, 128]  # 4x once the line puts 4x under half the target
    assert result["recommended_batch_size"] == 5000 and max(trials.tried) == 5000


def test_the_power_of_two_just_above_is_taken_within_85_percent_of_the_budget():
    budget = 2000 * MiB
    # The line allows (1600 - 700) / 3.6 = 250 -> 248; 256 peaks at 1621.6 MiB: within 85% (1700 MiB).
    trials = FakeTrials(fixed=700 * MiB, per_example=3.6 * MiB)
    result = search(trials, 32, budget)
    assert result["recommended_batch_size"] == 256 and trials.tried[-2:] == [248, 256]
    # Where the power of two above passes 85%, the multiple of 8 stays.
    wide = FakeTrials(fixed=700 * MiB, per_example=8 * MiB)
    assert search(wide, 32, budget)["recommended_batch_size"] == 112 and 128 not in wide.tried


def test_the_line_and_the_largest_batch_within_it():
    trial = {"error": None, "seconds": 1.0}
    assert line([{**trial, "batch_size": 8, "peak_bytes": 180}, {**trial, "batch_size": 16, "peak_bytes": 260}]) == \
        pytest.approx((100.0, 10.0))
    assert line([{**trial, "batch_size": 8, "peak_bytes": 180}]) is None
    assert largest_within((100.0, 10.0), 1000.0, 1 << 16) == 88  # 90 -> a multiple of 8
    assert largest_within((100.0, 10.0), 200.0, 1 << 16) == 10  # under 16: as it is
    assert largest_within((100.0, 0.0), 200.0, 4096) == 4096  # memory does not grow with the batch: the cap


def test_an_input_the_trials_cannot_batch_is_said_so(monkeypatch, events):
    monkeypatch.setenv(batch_finder.FIND_BATCH_ENV, str(2000 * MiB))
    monkeypatch.setattr(batch_finder, "_searched", False)
    exits = []
    monkeypatch.setattr("tensorgauge.hook.exit.exit_job", exits.append)
    call = types.SimpleNamespace(fit_input=((lambda: None), None, None), model=object(), keras_callbacks=None)
    assert batch_finder._find_batch_size(call) is None
    (sent,) = [e for e in events() if e["kind"] == "batch_search"]
    assert sent["recommended_batch_size"] is None and "cannot resize" in sent["reason"]
    assert exits == [0]


def test_the_report_carries_the_search_and_its_trials():
    events = [Event(t=1.0, pid=1, kind="batch_trial", data={"batch_size": 32, "peak_bytes": 5, "error": None}),
              Event(t=2.0, pid=1, kind="batch_search", data={"recommended_batch_size": 32, "cpu": 1.0})]
    found = batch_size_search(events)
    assert found["recommended_batch_size"] == 32 and found["trials"][0]["batch_size"] == 32 and "cpu" not in found
    unfinished = batch_size_search(events[:1])
    assert unfinished["recommended_batch_size"] is None and "did not finish" in unfinished["reason"]
    assert batch_size_search([]) is None


def test_no_batch_larger_than_where_throughput_stops_growing():
    """A keras-io convnet: memory allowed 4096, but examples/s peaked at 256 and fell beyond it."""
    speeds = {128: 9_800.0, 256: 11_403.0, 512: 11_100.0, 1024: 10_400.0, 2048: 9_900.0, 4096: 9_143.0}
    trials = FakeTrials(fixed=100 * MiB, per_example=MiB // 8, speed=lambda b: speeds.get(b, 9_000.0))
    result = search(trials, 128, 2000 * MiB)
    assert result["largest_within_budget"] >= 4096 and result["throughput_peak_batch_size"] == 256
    assert result["recommended_batch_size"] == 256
    assert "stops growing at batch 256 (11,403" in result["recommendation_reason"]
    # Throughput still growing at the largest batch memory allows: memory decides, with no reason to give.
    growing = search(FakeTrials(fixed=700 * MiB, per_example=8 * MiB, speed=lambda b: 50.0 * b), 32, 2000 * MiB)
    assert growing["recommended_batch_size"] == growing["largest_within_budget"] == 112
    assert growing["recommendation_reason"] is None


def test_a_search_recorded_with_fields_missing_still_renders():
    """A trial without its peak (the job ended during it) and a fit without its fixed part: the table
    shows '-' (found by tests/test_records.py's generated runs: a TypeError and a KeyError)."""
    from io import StringIO

    from rich.console import Console

    from tensorgauge.render.terminal import render_batch_search

    out = StringIO()
    render_batch_search(Console(file=out, width=120), {
        "target_bytes": 1000, "per_example_bytes": 10,
        "trials": [{"batch_size": 64, "peak_bytes": None, "steps": None, "step_seconds": None,
                    "examples_per_second": None, "seconds": None, "error": None}]})
    text = out.getvalue()
    assert "64" in text and "memory ~ - + 10 B per example" in text
