"""Input paid as epochs start: the time from each epoch's begin to the end of its first step,
beyond a step, summed over a fit's epochs after its first, as a share of its training time.

A pipeline can cost nothing mid-epoch and most of the training at epoch starts: keras-io's
structured-data program from scratch (lookups in the map, a shuffle buffer of the whole training set,
50 epochs of 8 steps) refills its buffer through the map before each epoch's first batch, 83-87% of
its training time (bare A/B: ``.cache()`` after the map removes 85%); the A/B, which times mid-epoch
steps, saw no input cost. Pure: from the fit's phases and step digests.
"""

from __future__ import annotations

import bisect

from tensorgauge.analyse.phases import seconds_outside
from tensorgauge.model import Phase
from tensorgauge.steps import StepDigest

EPOCH_START_FACTOR, EPOCH_START_MIN_SECONDS = 5.0, 0.005  # an epoch's start this far past a step counts
MIN_EPOCHS = 2  # ... in this many epochs after the first at least, and in most of them


def epoch_start_input(fit: Phase | None, epochs: list[Phase], digests: list[StepDigest],
                      nested: list[Phase] | None = None, own: list[tuple[float, float]] | None = None) -> dict | None:
    """``{"epochs", "seconds", "share", "waits"}``: the epochs after the first whose start took
    :data:`EPOCH_START_FACTOR` x the median step and :data:`EPOCH_START_MIN_SECONDS` or more past a step
    (the tool's ``own`` pauses left out), the seconds they took beyond a step, their share of the fit's
    training time (its epochs less their validation passes), and each wait as ``[start, seconds]``. It
    counts only where most epochs after the first (and two or more) pay it: one slow epoch start is a
    pause, not how the pipeline works. None without a median step or two epochs."""
    if fit is None or not fit.step_seconds_p50 or len(epochs) < 2:
        return None
    p50 = fit.step_seconds_p50
    epochs = sorted(epochs, key=lambda p: p.start)
    starts = [p.start for p in epochs]
    first_end: dict[int, float] = {}
    for digest in digests:
        for end, _ in digest.first[:1]:
            i = bisect.bisect_right(starts, end) - 1 if end is not None else -1
            if i >= 0 and end <= epochs[i].end + 1e-6 and (i not in first_end or end < first_end[i]):
                first_end[i] = end
    waits = []
    for i, epoch in enumerate(epochs[1:], start=1):  # the first epoch's start is the fit's start-up
        if i in first_end:
            beyond = seconds_outside(epoch.start, first_end[i] - epoch.start, own or []) - p50
            if beyond >= max(EPOCH_START_FACTOR * p50, EPOCH_START_MIN_SECONDS):
                waits.append([round(epoch.start, 3), round(beyond, 4)])
    validation = sum(p.end - p.start for p in nested or [] if p.kind == "evaluate" and epochs[1].start <= p.start)
    training = sum(p.end - p.start for p in epochs[1:]) - validation
    if len(waits) < max(MIN_EPOCHS, (len(epochs) - 1) / 2):
        waits = []
    seconds = sum(w[1] for w in waits)
    return {"epochs": len(waits), "seconds": round(seconds, 3),
            "share": round(min(1.0, seconds / training), 4) if training > 0 else 0.0, "waits": waits[:50]}
