"""``tensorgauge run --find-batch-size``: which batch fits the memory budget, found on the job's own
model and data, in its own process, without running into an out-of-memory crash.

When the first ``fit`` starts (``$TENSORGAUGE_FIND_BATCH`` holding the budget in bytes), short
trials of it run at growing batch sizes (the job's own first, then doubling). Each trial trains
:data:`TRIAL_STEPS` steps and measures the process's RSS peak (the kernel's high-water mark, reset
before the trial) and its step time.
A line fitted to peak against batch size (fixed + per example) predicts the next trial's peak:
no trial is started that the line puts past :data:`TARGET_SHARE` of the budget. The
recommendation is the largest batch the line keeps under it (a multiple of 8), verified by a
trial of its own (where that trial passes the target, the line is fitted again with it and the
next recommendation is at least 10% lower); the power of two just above it is taken instead where
the line and a trial keep it within 85% of the budget. Arrays are batched by fit's ``batch_size``; a ``tf.data`` pipeline is re-batched
(``unbatch().batch(n)``); other inputs cannot be reached, and the search says so. Then the job
ends (exit 0): the trials trained its model. Standard library only.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from tensorgauge.hook.agent import agent
from tensorgauge.hook.channel import channel
from tensorgauge.hook.facts import PeakRss
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import BATCH_TRIAL_PHASE, FIND_BATCH_ENV, Kind
from tensorgauge.hook.wrapping import innermost, original_of

TRIAL_STEPS = 6  # a trial's steps: the first traces the step for the new shape; the peak over all
# Of the budget: under its soft line (90%: a graceful stop), with room for what a short trial misses (an LSTM's
# full fit peaked 85-93% of the budget at the batch a 0.85 target gave: the last partial batch, a whole epoch).
TARGET_SHARE = 0.8
MAX_TRIALS = 8
VERIFY_TRIES = 3
POWER_OF_TWO_SHARE = 0.85  # the power of two just above the recommendation is taken within this share
THROUGHPUT_SHARE = 0.95  # a batch within this share of the best examples/s among the trials is as fast
JUMP_SHARE = 0.5  # the search grows 4x (not 2x) while the line puts that under this share of the target
MAX_BATCH = 1 << 16
CAVEAT = ("A larger batch takes fewer, larger steps: scale the learning rate with it (linearly, with a warm-up) "
          "and check the validation metrics; the figures are from short trials of the first fit.")

_searched = False


def original_fit(model):
    """Keras' own ``fit`` under tensorgauge's wrapper (trials add no phases, listeners or callbacks)."""
    wrapped = (cls.__dict__["fit"] for cls in type(model).__mro__ if original_of(cls.__dict__.get("fit")) is not None)
    return innermost(next(wrapped, type(model).fit))


def rows_of(x) -> int | None:
    """Rows of fit's array input (the first leaf of a dict, list or tuple)."""
    while isinstance(x, (dict, list, tuple)) and x:
        x = next(iter(x.values())) if isinstance(x, dict) else x[0]
    shape = getattr(x, "shape", None)
    return int(shape[0]) if shape else None


class Trials:
    """Runs the trials of one fit's model and input."""

    def __init__(self, model, keras_callbacks, x, y, dataset: bool, shuffle: bool = True):
        self.model, self.x, self.y, self.dataset, self.shuffle = model, x, y, dataset, shuffle
        self.fit = original_fit(model)
        self.callbacks = keras_callbacks
        self.rows = None if dataset else rows_of(x)

    def cap(self) -> int:
        return min(MAX_BATCH, self.rows) if self.rows else MAX_BATCH

    def _timer(self, marks: list[float]):
        base = self.callbacks.Callback

        class StepMarks(base):  # type: ignore[misc, valid-type]
            def on_train_batch_end(self, batch, logs=None):
                marks.append(time.monotonic())

        return StepMarks()

    def run(self, batch: int) -> dict:
        steps = TRIAL_STEPS if not self.rows else max(1, min(TRIAL_STEPS, self.rows // batch))
        marks: list[float] = []
        phase = agent().begin(f"{BATCH_TRIAL_PHASE} {batch}", "custom")
        start = time.monotonic()
        error = None
        try:
            with PeakRss() as peak:
                if self.dataset:
                    data = self.x.unbatch().batch(batch, drop_remainder=True).repeat()
                    self.fit(self.model, data, epochs=1, steps_per_epoch=steps, verbose=0,
                             callbacks=[self._timer(marks)])
                else:
                    self.fit(self.model, self.x, self.y, batch_size=batch, epochs=1, steps_per_epoch=steps,
                             verbose=0, shuffle=self.shuffle, callbacks=[self._timer(marks)])
        except Exception as exc:  # an out-of-memory error, or an input the trial cannot batch
            error = type(exc).__name__
        finally:
            agent().end(phase)
        seconds = [b - a for a, b in zip([start, *marks], marks)][1:]  # the first step traced
        step = statistics.median(seconds) if seconds else None
        trial = {"batch_size": batch, "peak_bytes": peak.peak, "steps": len(marks),
                 "step_seconds": step, "examples_per_second": batch / step if step else None,
                 "seconds": time.monotonic() - start, "error": error}
        channel().emit(Kind.BATCH_TRIAL, **trial)
        return trial


def line(trials: list[dict]) -> tuple[float, float] | None:
    """(bytes fixed, bytes per example) fitted to the trials' peaks (None: fewer than two sizes)."""
    points = {t["batch_size"]: t["peak_bytes"] for t in trials if not t["error"]}
    if len(points) < 2:
        return None
    slope, intercept = statistics.linear_regression(list(points), list(points.values()))
    return intercept, slope


def largest_within(fitted: tuple[float, float], target: float, cap: int) -> int:
    """The largest batch the fitted line keeps at or under ``target`` (a multiple of 8 from 16 up)."""
    fixed, per_example = fitted
    batch = cap if per_example <= 0 else int((target - fixed) // per_example)
    batch = min(batch, cap)
    return max(1, batch - batch % 8 if batch >= 16 else batch)


def search(trials: Trials, start: int, budget: int) -> dict:
    """Trials from ``start`` up (down where ``start`` does not fit), then the recommendation, verified."""
    target = TARGET_SHARE * budget
    done: list[dict] = []
    batch = max(1, min(start, trials.cap()))
    while len(done) < MAX_TRIALS - 1:
        result = trials.run(batch)
        done.append(result)
        fits = not result["error"] and result["peak_bytes"] <= target
        if not fits:
            if all(t["error"] or t["peak_bytes"] > target for t in done) and batch > 1:
                batch //= 2  # the job's own batch does not fit: look below it
                continue
            break
        fitted = line([t for t in done if not t["error"] and t["peak_bytes"] <= target])
        # Doubling; four times while the line puts that under half the target (small batches are cheap to pass).
        grow = 4 if fitted and fitted[0] + fitted[1] * batch * 4 <= JUMP_SHARE * target else 2
        following = min(trials.cap(), batch * grow)
        if following == batch or (fitted and fitted[0] + fitted[1] * following > target):
            break
        batch = following
    fitted = line([t for t in done if not t["error"]])
    under = [t["batch_size"] for t in done if not t["error"] and t["peak_bytes"] <= target]
    recommended = largest_within(fitted, target, trials.cap()) if fitted else (max(under) if under else None)
    for _ in range(VERIFY_TRIES):  # verify; where the trial says the line was optimistic, refit it and go lower
        if recommended is None or recommended in [t["batch_size"] for t in done]:
            break
        check = trials.run(recommended)
        done.append(check)
        if not check["error"] and check["peak_bytes"] <= target:
            break
        refit = line([t for t in done if not t["error"]])
        lower = min(largest_within(refit, target, trials.cap()) if refit else recommended, int(recommended * 0.9))
        recommended = lower - lower % 8 if lower >= 16 else lower
        if under and recommended <= max(under):
            recommended = max(under)
    verified = [t for t in done if t["batch_size"] == recommended]
    if recommended is not None and (not verified or verified[-1]["error"] or verified[-1]["peak_bytes"] > target):
        recommended = max(under) if under else None
    within_budget = _power_of_two_above(trials, done, recommended, budget)
    recommended, knee, why = _no_larger_than_throughput_needs(done, target, within_budget)
    return {"budget_bytes": budget, "target_bytes": int(target), "original_batch_size": start,
            "recommended_batch_size": recommended, "largest_within_budget": within_budget,
            "throughput_peak_batch_size": knee, "recommendation_reason": why, "fixed_bytes": int(fitted[0]) if fitted else None,
            "per_example_bytes": int(fitted[1]) if fitted else None, "trials": len(done),
            "seconds": sum(t["seconds"] for t in done),
            "how": ("the pipeline re-batched: dataset.unbatch().batch(n)" if trials.dataset
                    else "fit's batch_size on its arrays"),
            "caveat": CAVEAT}


def _no_larger_than_throughput_needs(done: list[dict], target: float, within_budget: int | None
                                     ) -> tuple[int | None, int | None, str | None]:
    """(the batch to recommend, where examples/s stops growing, why the recommendation is smaller than the
    budget allows). Throughput stops growing at the smallest trial within :data:`THROUGHPUT_SHARE` of the
    fastest (a keras-io convnet peaked at 256, 11,403 examples/s, and fell to 9,143 at 4,096). A batch
    memory allows at twice that or more is not recommended: it would only cost memory, and change the
    training (learning rate, generalisation)."""
    timed = [t for t in done if not t["error"] and t["peak_bytes"] <= target and t.get("examples_per_second")]
    if len({t["batch_size"] for t in timed}) < 2:
        return within_budget, None, None
    best = max(timed, key=lambda t: t["examples_per_second"])
    knee = min((t for t in timed if t["examples_per_second"] >= THROUGHPUT_SHARE * best["examples_per_second"]),
               key=lambda t: t["batch_size"])
    if within_budget is None or within_budget < 2 * knee["batch_size"]:  # not a doubling past it: memory decides
        return within_budget, knee["batch_size"], None
    largest = max(timed, key=lambda t: t["batch_size"])
    why = (f"examples/s stops growing at batch {knee['batch_size']} ({knee['examples_per_second']:,.0f}; "
           f"{largest['examples_per_second']:,.0f} at {largest['batch_size']}, the largest tried): the budget "
           f"allows {within_budget}, but a larger batch would only cost memory")
    return knee["batch_size"], knee["batch_size"], why


def _power_of_two_above(trials: Trials, done: list[dict], recommended: int | None, budget: int) -> int | None:
    """The power of two just above ``recommended`` instead, where the line keeps it within
    :data:`POWER_OF_TWO_SHARE` of the budget and a trial of its own confirms that: batches are
    usually powers of two, and one that divides the data set evenly saves the last partial batch's
    second trace (an LSTM at 248 of 4,096 rows peaked at 75-77% of its budget, at 256 at 70%)."""
    if not recommended or recommended & (recommended - 1) == 0:
        return recommended
    above = 1 << recommended.bit_length()
    fitted = line([t for t in done if not t["error"]])
    limit = POWER_OF_TWO_SHARE * budget
    if above > trials.cap() or fitted is None or fitted[0] + fitted[1] * above > limit or len(done) >= MAX_TRIALS + 3:
        return recommended
    check = trials.run(above)
    done.append(check)
    return above if not check["error"] and check["peak_bytes"] <= limit else recommended


def _input(call: FitCall):
    """(x, y, is a tf.data pipeline, the job's batch size) of the fit, or a reason it cannot be re-batched."""
    x, y, batch = call.fit_input or (None, None, None)
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        from tensorgauge.hook.diagnose import _batch_stage_size, _dataset_batch_size

        size = _dataset_batch_size(x) or _batch_stage_size(x)
        if not size:
            return "the pipeline has no batch stage to re-batch"
        return x, None, True, int(size)
    if rows_of(x) is None:
        return f"fit's input ({type(x).__name__}) is not arrays or a tf.data pipeline: its batches are made in " \
               "the job's code, which the trials cannot resize"
    return x, y, False, int(batch or 32)


@on_fit
def _find_batch_size(call: FitCall) -> FitListener | None:
    global _searched
    budget = os.environ.get(FIND_BATCH_ENV)
    if not budget or _searched or call.fit_input is None or call.model is None:
        return None
    _searched = True
    found = _input(call)
    if isinstance(found, str):
        channel().emit(Kind.BATCH_SEARCH, budget_bytes=int(budget), recommended_batch_size=None, reason=found,
                       trials=0)
    else:
        x, y, dataset, start = found
        shuffle = bool(call.kwargs.get("shuffle", call.args[7] if len(call.args) > 7 else True))  # as the job's fit
        result = search(Trials(call.model, call.keras_callbacks, x, y, dataset, shuffle), start, int(budget))
        channel().emit(Kind.BATCH_SEARCH, **result)
    from tensorgauge.hook.exit import exit_job

    exit_job(0)  # the trials trained the model: the job's own fit does not run
    return None
