"""A JAX or PyTorch fit's input share by rounds of batches, with its interval: a share whose interval
straddles the threshold is noise, not a finding that flips from run to run."""

import random

from tensorgauge.analyse.input_rules import backend_input_bound, loop_input_bound
from tensorgauge.analyse.input_split import _backend_split, _loop_split, describe, rounds_verdict
from tensorgauge.hook import fit_input
from tensorgauge.model import Phase


def test_rounds_are_consecutive_batches_of_one_epoch_and_an_epochs_first_batch_is_its_start():
    clock = fit_input.InputClock()
    t = 0.0
    for _ in range(2):  # two epochs
        clock.new_epoch()
        for batch in range(30):
            wait = 0.5 if batch == 0 else 0.002  # the epoch's iterator starting
            clock.add(wait, t)
            t += wait + 0.018  # then the step
    # Each epoch: its first batch apart, then rounds of at least 8 batches and 0.25 s (13 of 20 ms): 2 whole
    # rounds of the 29 batches left; the partial round at an epoch's end is dropped.
    assert clock.epoch_start_seconds == 1.0 and clock.batches == 60
    assert len(clock.rounds) == 4 and all(r[2] == 13 for r in clock.rounds)
    wait, span, batches = clock.rounds[0]
    assert abs(wait - 13 * 0.002) < 1e-9 and abs(span - 13 * 0.020) < 1e-9


def test_a_long_fit_keeps_a_bounded_number_of_rounds():
    clock = fit_input.InputClock()
    clock.new_epoch()
    for i in range(40_000):
        clock.add(0.001, i * 0.01)
    assert fit_input.MAX_ROUNDS // 2 <= len(clock.rounds) <= fit_input.MAX_ROUNDS
    assert sum(r[2] for r in clock.rounds) >= 39_000 * 0.9


def rounds(shares, span=0.5):
    return [[share * span, span, 25] for share in shares]


def test_the_rounds_interval_decides_the_verdict():
    random.seed(0)
    clear = rounds([0.30 + random.uniform(-0.03, 0.03) for _ in range(12)])
    assert rounds_verdict(clear)["established"] and rounds_verdict(clear)["input_share_low"] > 0.2
    # A healthy JAX fit on arrays: 5.3% pooled, rounds of 1-10%: within noise, no finding.
    noisy = rounds([0.01, 0.10, 0.04, 0.08, 0.02, 0.07, 0.05, 0.065])
    verdict = rounds_verdict(noisy)
    assert 0.05 <= verdict["input_share"] < 0.06 and verdict["input_share_low"] < 0.05 < verdict["input_share_high"]
    assert not verdict["established"] and verdict["verdict"].startswith("within noise")
    quiet = rounds_verdict(rounds([0.01, 0.012, 0.009, 0.011]))
    assert quiet["verdict"].startswith("no input cost") and quiet["input_share_high"] < 0.05
    assert rounds_verdict(rounds([0.3, 0.3])) is None  # two rounds give no spread


def test_a_backend_fit_is_input_bound_only_when_its_interval_clears_the_threshold():
    fit = Phase(name="fit", kind="fit", start=0.0, end=10.0, steps=400, step_seconds_p50=0.02, cores_busy_mean=1.0)
    timed = {"backend": "jax", "batches": 401, "seconds": 8 * 0.00106 + 0.5, "first_seconds": 0.5,
             "rounds": rounds([0.01, 0.10, 0.04, 0.08, 0.02, 0.07, 0.05, 0.065])}
    assert backend_input_bound(timed, fit, 2.0) is None  # one figure of 5.3% was a finding before the rounds
    timed["rounds"] = rounds([0.30, 0.28, 0.33, 0.31, 0.29])
    found = backend_input_bound(timed, fit, 2.0)
    assert found.severity == "high" and found.evidence["input_share_low"] > 0.2


def test_a_backend_fit_too_short_for_three_rounds_gets_no_verdict():
    """A JAX fit of 64 steps of 0.25 ms (16 ms of training) beside another process: 0.37 ms a batch in next()
    on average, a few batches slow, against a median step of 0.25 ms: one figure said "100% of each step"."""
    fit = Phase(name="fit", kind="fit", start=1.69, end=2.59, steps=64, step_seconds_p50=0.000247,
                cores_busy_mean=1.0)
    timed = {"backend": "jax", "batches": 65, "seconds": 0.023696, "first_seconds": 0.000127, "rounds": []}
    assert backend_input_bound(timed, fit, 2.0) is None
    split = _backend_split(timed, fit)
    assert split["verdict"].startswith("no verdict: the fit was too short for 3 rounds")
    assert "no verdict" in describe(split)
    # A run recorded before the rounds (no such field) keeps its one figure.
    old = {key: value for key, value in timed.items() if key != "rounds"}
    assert backend_input_bound(old, fit, 2.0).evidence["input_share"] == 1.0


def test_a_dataloader_loop_gets_a_verdict_from_its_waits_by_round():
    """A custom loop over a PyTorch DataLoader: no tf.data iterator to pair with a cached batch, so its
    next() waits, timed every step, are judged by round with their interval."""
    from tensorgauge.hook.train_loop import TrainLoop

    loop = TrainLoop(clock=lambda: 0.0, cpu=lambda: 0.0, phases=object())
    for _ in range(400):
        loop._keep(0.010, 0.004)  # a slow collate: 4 ms of each 10 ms step
    assert len(loop.rounds) == 400 // 25 and loop.rounds[0] == [0.1, 0.25, 25]
    payload = {"steps": 400, "step_seconds_p50": 0.010, "step_seconds_total": 4.0, "next_pairs": [],
               "next_rounds": loop.rounds}
    split = _loop_split(payload)
    assert split["measured"] and split["established"] and abs(split["input_share"] - 0.4) < 1e-6
    fit = Phase(name="train loop", kind="fit", start=0.0, end=4.0, steps=400, step_seconds_p50=0.01)
    found = loop_input_bound(payload, fit, 2.0, {"backend": "torch", "loop": True})
    assert found.severity == "high" and "num_workers" in found.fix and found.evidence["rounds"] == 16
    quiet = {**payload, "next_rounds": rounds([0.01, 0.03, 0.08, 0.02, 0.06])}
    assert not _loop_split(quiet)["established"] and loop_input_bound(quiet, fit, 2.0, {"backend": "torch"}) is None


def test_a_custom_loops_pairs_carry_an_interval_and_straddling_it_is_within_noise():
    from tensorgauge.analyse.input_split import loop_verdict
    # next() 0.3 ms slower than on the cached batch, with 1 ms of noise, on a 10 ms step: 3% pooled, the
    # interval over the pairs reaching past 5%: within noise, not "no cost".
    noisy = [[0.0013 + (0.001 if i % 2 else -0.001), 0.001, i % 2] for i in range(8)]
    verdict = loop_verdict({"steps": 101, "step_seconds_total": 1.0, "next_pairs": noisy})
    assert verdict["input_share"] < 0.05 <= verdict["input_share_interval"][1]
    assert verdict["verdict"].startswith("within noise")
    tight = [[0.00103, 0.001, i % 2] for i in range(40)]
    quiet = loop_verdict({"steps": 101, "step_seconds_total": 1.0, "next_pairs": tight})
    assert quiet["input_share_interval"][1] < 0.05 and quiet["verdict"].startswith("no input cost")


def test_a_custom_loops_pairs_establish_a_cost_only_where_their_interval_clears_the_threshold():
    from tensorgauge.analyse.input_split import loop_verdict
    # next() a median 0.6 ms slower than on the cached batch on a 10 ms step (6%), in either order, but the
    # pairs scattered by a neighbour's bursts (0 to 1.5 ms extra): the interval straddles 5%, so no finding.
    scatter = [0.0, 0.0006, 0.0006, 0.0006, 0.0007, 0.0005, 0.0, 0.0015] * 2
    bursty = [[0.001 + extra, 0.001, order] for order in (0, 1) for extra in scatter]
    verdict = loop_verdict({"steps": 101, "step_seconds_total": 1.0, "next_pairs": bursty})
    assert verdict["input_share"] >= 0.05 > verdict["input_share_interval"][0]
    assert not verdict["established"] and verdict["verdict"].startswith("within noise")
    # A map that makes every next() 3 ms slower: established, its interval well clear of 5%.
    slow = [[0.004 + (0.0002 if i % 3 else -0.0002), 0.001, i % 2] for i in range(32)]
    found = loop_verdict({"steps": 101, "step_seconds_total": 1.0, "next_pairs": slow})
    assert found["established"] and found["input_share_interval"][0] >= 0.05
