"""Input paid as epochs start, on hand-built fits: keras-io's structured-data program refills its shuffle
buffer through the map before each epoch's first step (bare: .cache() after the map halved its fit)."""

import numpy as np

from tensorgauge.analyse.epoch_starts import epoch_start_input
from tensorgauge.analyse.input_rules import epoch_start_input_bound
from tensorgauge.model import Phase
from tensorgauge.steps import StepDigest


def epochs_of(count: int, steps: int, step: float, start_wait: float, validation: float = 0.0):
    """``count`` epochs of ``steps`` steps, each epoch waiting ``start_wait`` before its first step and
    ending with a validation pass of ``validation`` seconds."""
    epochs, digests, validations, t = [], [], [], 0.0
    for i in range(count):
        begin = t
        seconds = [start_wait + step] + [step] * (steps - 1)
        d = StepDigest(i + 1)
        d.add(seconds, list(np.cumsum(seconds) + begin))
        digests.append(d)
        t = begin + sum(seconds)
        if validation:
            validations.append(Phase(name="validation", kind="evaluate", start=t, end=t + validation, parent=i + 1))
            t += validation
        epochs.append(Phase(name=f"epoch {i + 1}", kind="epoch", start=begin, end=t, parent=0))
    fit = Phase(name="fit", kind="fit", start=0.0, end=t, step_seconds_p50=step, steps=count * steps)
    return fit, epochs, digests, validations


def test_an_epoch_start_that_refills_the_pipeline_is_counted_against_training_time():
    fit, epochs, digests, validations = epochs_of(50, 8, 0.004, 0.2, validation=0.05)
    paid = epoch_start_input(fit, epochs, digests, validations)
    assert paid["epochs"] == 49  # the first epoch's start is the fit's start-up
    assert abs(paid["seconds"] - 49 * 0.2) < 0.01
    assert 0.85 < paid["share"] < 0.88  # 0.2 s of each 0.232 s of training (validation left out)
    found = epoch_start_input_bound({"established": False, "input_share": 0.0, "epoch_start_input": paid}, fit,
                                    2.0, cores_busy=0.45)
    assert found.id == "input_bound" and found.severity == "high" and "as epochs start" in found.title
    assert ".cache()" in found.fix and found.evidence["epochs"] == 49


def test_a_healthy_fit_or_an_idle_wait_is_not_input_at_epoch_starts():
    # An iterator starting in 10 ms before 4 ms steps: under five steps, nothing.
    fit, epochs, digests, validations = epochs_of(50, 8, 0.004, 0.01)
    assert epoch_start_input(fit, epochs, digests, validations)["epochs"] == 0
    fit, epochs, digests, validations = epochs_of(20, 100, 0.01, 0.3)
    paid = epoch_start_input(fit, epochs, digests, validations)
    split = {"established": False, "epoch_start_input": paid}
    # Waits with the cores idle are tf.data's iterator teardown (stalls tells those), not input work.
    assert epoch_start_input_bound(split, fit, 2.0, cores_busy=0.05) is None
    assert epoch_start_input_bound(split, fit, 2.0, cores_busy=None) is None
    # A per-step cost the A/B established is told beside it (the structured-data program: 81% as epochs
    # start, 15% a step besides, was titled by its 15%).
    both = epoch_start_input_bound({**split, "established": True, "input_share": 0.15}, fit, 2.0, cores_busy=0.9)
    assert both.title.endswith("mid-epoch, input costs 15% of each step as well")
    # 0.3 s of each 1.3 s epoch: 23%, found.
    assert epoch_start_input_bound(split, fit, 2.0, cores_busy=0.9).severity == "high"
    assert epoch_start_input(fit, epochs[:1], digests, validations) is None  # one epoch: no epoch after the first


def test_fit_on_arrays_that_starts_its_pipeline_every_short_epoch_pays_it_at_epoch_starts():
    """TensorFlow's regression tutorial: 100 epochs of 8 steps of 1.1 ms on arrays, each epoch's pipeline over
    them built in 12-14 ms before its first step (bare: input 42-54% of training). Counted, with the fix for
    arrays, not for a tf.data pipeline's map."""
    fit, epochs, digests, validations = epochs_of(100, 8, 0.0011, 0.013)
    paid = epoch_start_input(fit, epochs, digests, validations)
    assert paid["epochs"] == 99 and 0.55 < paid["share"] < 0.62  # 13 ms of each 21.8 ms of training
    split = {"established": False, "epoch_start_input": paid}
    found = epoch_start_input_bound(split, fit, 2.0, cores_busy=0.9, config={"dataset": False})
    assert found.severity == "high" and "fit on arrays builds a new input pipeline" in found.fix
    assert ".cache() after the expensive" in epoch_start_input_bound(split, fit, 2.0, cores_busy=0.9).fix


def test_one_slow_epoch_start_is_a_pause_not_how_the_pipeline_works():
    """The healthy demo once had one epoch start 196 ms late (6% of its training): not input at epoch starts."""
    fit, epochs, digests, validations = epochs_of(3, 100, 0.024, 0.0)
    slow = StepDigest(2)
    seconds = [0.196 + 0.024] + [0.024] * 99
    slow.add(seconds, list(np.cumsum(seconds) + epochs[1].start))
    digests[1] = slow
    assert epoch_start_input(fit, epochs, digests, validations)["epochs"] == 0
    # The tool's own pause at an epoch start is not the job's.
    fit, epochs, digests, validations = epochs_of(10, 8, 0.004, 0.2)
    own = [(e.start, e.start + 0.2) for e in epochs]
    assert epoch_start_input(fit, epochs, digests, validations, own)["epochs"] == 0
