"""The stage timing's pulls stop where the allowance ends: none begun that would end past the deadline."""

import time

from tensorgauge.hook.stage_costs import MIN_PULLS, _time_calls


def slow_pull(calls: list[float], seconds: float):
    def pull():
        calls.append(time.perf_counter())
        time.sleep(seconds)
    return pull


def test_no_pull_begins_that_would_end_past_the_deadline_even_below_the_least_pulls():
    calls: list[float] = []
    deadline = time.perf_counter() + 0.15
    timing = _time_calls(slow_pull(calls, 0.1), 0.0, deadline)
    assert timing is not None and 1 <= timing[2] < MIN_PULLS  # a second pull of 0.1 s would end past 0.15 s
    assert len(calls) == timing[2]


def test_without_a_deadline_the_least_pulls_are_always_taken():
    calls: list[float] = []
    timing = _time_calls(slow_pull(calls, 0.02), 0.0)
    assert timing is not None and timing[2] == MIN_PULLS
