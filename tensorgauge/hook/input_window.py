"""The input diagnosis of a fit, measured in the job at a bounded cost.

On by default (``$TENSORGAUGE_DIAGNOSE`` = ``auto``; ``tensorgauge run
--no-diagnose`` turns it off), in the first TensorFlow ``fit`` of a process,
after :data:`WINDOW_START` warm-up steps (and in up to :data:`MAX_AB_FITS` fits in all where the rounds
of those before left the verdict open):

- the A/B (:mod:`.input_ab`): real steps against compute-only steps on one
  cached batch, interleaved in rounds, its cost kept within the allowance as it
  runs. It decides *whether* input costs the steps;
- where it found a cost (or with ``--diagnose``), a profiler window
  (:mod:`.profiler_window`) over a few steps: it says *how* (waiting in
  ``IteratorGetNext``, or tf.data's threads competing for the cores).

A fit too short for rounds within it (a warm-up fit, often) has its steps timed, and its compute-only
steps wait (:class:`_Deferred`): for the next fit that measures in rounds, which replaces them (their cost
is never paid), or else for the next fit's end, the process's exit, or the end of ``tensorgauge.monitor()``.
Their cost is bounded by the fit's length: at most :data:`COST_SHARE` of the
fit, or :data:`COST_FLOOR_SECONDS` for short fits, from the median step and the
fit's expected length (its length so far while that is unknown). What does not fit is skipped, and the event says why.
Never under a distribution strategy (TensorFlow 2.21's multi-worker runtime can
crash in a profiler window), unless ``always`` (``--diagnose``), which also
lifts the bound and times XLA against no XLA on a CPU.
"""

from __future__ import annotations

import atexit
import os
import statistics
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import fit_epochs, keras_backend, mode
from tensorgauge.hook.input_ab import InputAB, rounds_plan, sizes_for
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.probes import small_steps, spe_probe, xla_on_cpu, xla_probe
from tensorgauge.hook.profiler_window import (
    WINDOW_STEPS,
    ProfilerWindow,
)
from tensorgauge.hook.protocol import INPUT_MODERATE, WINDOW_START, Kind
from tensorgauge.hook.stage_costs import is_pydataset, measure_pydataset, measure_stages

KEPT_STARTS = 200
# Fits whose A/B may measure in rounds: a later fit measures again while the rounds so far leave the verdict
# open (their interval straddles INPUT_MODERATE). keras-io's wide-and-deep program trains three models, one
# fit each, on a CSV pipeline whose cost swings: its first fit waited for almost nothing in 1 run of 5 (2.0 ms
# steps against 2.1 ms compute-only), the two after it paid 30-50% (bare, each fit: 52-75%).
MAX_AB_FITS = 3
COST_SHARE, COST_FLOOR_SECONDS = 0.01, 0.4
EXPLAIN_FROM_SHARE = 0.05  # an input cost the A/B measured this large is worth a profiler window to explain


def allowance(fit_seconds: float) -> float:
    """What the diagnosis may cost in a fit of ``fit_seconds``."""
    return max(COST_SHARE * fit_seconds, COST_FLOOR_SECONDS)


def _under_strategy(model) -> bool:
    import tensorflow as tf

    if os.environ.get("TF_CONFIG"):
        return True
    strategy = getattr(model, "distribute_strategy", None)
    return tf.distribute.has_strategy() or (strategy is not None
                                            and not type(strategy).__name__.startswith("_Default"))


def _planned_steps(call: FitCall) -> int | None:
    """Steps per epoch fit will run, when its arguments say (steps_per_epoch, a sized dataset, arrays)."""
    steps = call.kwargs.get("steps_per_epoch")
    if isinstance(steps, int):
        return steps
    x, _, batch_size = call.fit_input or (None, None, None)
    try:
        cardinality = getattr(x, "cardinality", None)
        if cardinality is not None:
            n = int(cardinality())
            return n if n > 0 else None
        rows = len(x[0] if isinstance(x, (list, tuple)) else next(iter(x.values())) if isinstance(x, dict) else x)
        rows = int(rows * (1 - float(call.kwargs.get("validation_split") or 0.0)))
        return -(-rows // int(batch_size or 32))
    except Exception:
        return None


def input_signature(fit_input) -> object:
    """What a fit's input is, to tell whether two fits train on the same: a dataset's element spec and length,
    arrays' shapes and dtypes, the batch size; else the input's type."""
    x, y, batch_size = fit_input or (None, None, None)

    def of(value) -> object:
        if isinstance(value, dict):
            return tuple(sorted((str(key), of(item)) for key, item in value.items()))
        if isinstance(value, (list, tuple)):
            return tuple(of(item) for item in value)
        if hasattr(value, "element_spec") and hasattr(value, "cardinality"):  # a tf.data.Dataset
            try:
                return "dataset", repr(value.element_spec), int(value.cardinality())
            except Exception:
                return "dataset", repr(value.element_spec)
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            return tuple(value.shape), str(value.dtype)
        return type(value).__name__

    return of(x), of(y), batch_size


class _InputDiagnosis(FitListener):
    """Decides, at step :data:`WINDOW_START` + 1 of a fit, how many rounds of the A/B the fit has room
    for; runs them; then, with --diagnose, a profiler window where the A/B found a cost. Once one fit
    of the process has measured, no other tries; until then, a fit tries when it is expected to last at
    least twice as long as the longest that tried (a warm-up fit is often too short, the real one after
    it long enough; a sweep of equal fits tries once). A fit whose rounds leave the verdict open is no
    such measure: the next fit with room for rounds measures again, up to :data:`MAX_AB_FITS` fits."""

    done = False  # measured: no other fit tries
    longest_tried = 0.0  # the expected seconds of the longest fit that tried and did not measure
    open_fits = 0  # fits that measured in rounds and left the verdict open (see InputAB.conclusive)
    open_input: object = None  # ... the input they trained on (input_signature): a fit on other input does not
    stages_timed = False  # a fit's pipeline stages were timed: a later fit measuring again does not time them

    def __init__(self, call: FitCall, unbounded: bool):
        self.call, self.unbounded = call, unbounded
        self.began = time.monotonic()
        self.epochs = fit_epochs(call.args, call.kwargs) or 1
        self.steps_per_epoch = _planned_steps(call)
        self.starts: list[float] = []  # the first step begins (up to KEPT_STARTS), for the median step
        self.seen = 0  # steps before the A/B
        self.first_epoch_steps = 0
        self.ab: InputAB | None = None
        self.window: ProfilerWindow | None = None
        self.budget: float | None = None
        self.decided = False
        self.under_strategy = False  # no probe on one worker: the others would wait in its collectives

    def on_train_batch_begin(self, model, epoch: int, batch: int) -> None:
        now = time.monotonic()
        if self.ab is not None and self.ab.active:
            try:
                if self.ab.on_step_begin():
                    _Deferred.settle(self.ab)
                    self._explain(now)
            except Exception as exc:
                self.ab.fail(exc)
            return
        if self.window is not None and self.window.active:
            self.window.on_step_begin(now)
            return
        if self.decided:
            return
        self.seen += 1
        if len(self.starts) < KEPT_STARTS:
            self.starts.append(now)
        if epoch == 0:
            self.first_epoch_steps += 1
        if self.seen == WINDOW_START + 1:
            self._decide(model, epoch, now)

    def _step_seconds(self) -> float:
        return statistics.median(b - a for a, b in zip(self.starts[2:], self.starts[3:]))

    def _steps_left(self, epoch: int) -> int | None:
        per_epoch = self.steps_per_epoch or (self.first_epoch_steps if epoch > 0 else None)
        return None if per_epoch is None else max(0, self.epochs * per_epoch - self.seen)

    def _decide(self, model, epoch: int, now: float) -> None:
        if _under_strategy(model):
            self.under_strategy = True
            # Every fit of this process runs under it, and the A/B's compute-only steps would run the
            # strategy's collectives on this worker alone (the others would wait for it): never here.
            _InputDiagnosis.done = True
            self._skip("fit runs under a distribution strategy: compute-only steps on one worker would stall "
                       "the others' collectives" + ("; --diagnose profiles a window of its steps instead"
                                                    if self.unbounded else ""))
            if self.unbounded:  # a profiler window over its own steps (wait, all-reduce, input work)
                self._start_window()
            return
        step, left = self._step_seconds(), self._steps_left(epoch)
        # The fit's expected length; while it is unknown (a dataset of unknown size in its first epoch),
        # its length so far: the bound then holds whatever its end.
        expected = (now - self.began) + step * (left or 0)
        rounds, why = rounds_plan(left, step)
        if _InputDiagnosis.open_fits and (not rounds or input_signature(self.call.fit_input) != _InputDiagnosis.open_input):
            # Measuring again needs rounds, and the same input (a job's fit on one cached batch of its data, after
            # its real one, measured no input cost, and the two fits' rounds pooled withheld the real one's): the
            # verdict so far stands.
            self.decided = True
            return
        # Rounds replace an earlier fit's after-fit A/B still held (at no more cost: its steps never run).
        replaces = _Deferred.held is not None and rounds > 0
        if _InputDiagnosis.longest_tried and not replaces and not _InputDiagnosis.open_fits and \
                (left is None or expected < 2 * _InputDiagnosis.longest_tried):
            self.decided = True  # not long enough to do better than the fit that tried before
            return
        if why is not None:  # nothing spent: a longer fit after it tries (a 64-step warm-up epoch kept a 4-epoch fit out)
            self._skip(why)
            return
        _InputDiagnosis.longest_tried = max(_InputDiagnosis.longest_tried, expected)
        if not self.unbounded:
            self.budget = allowance(expected)
        self.decided = True
        # With --diagnose, rounds in place of disturbed ones leave a profiler window its steps: beside another
        # process they ran to the end of an input-bound 80-step fit, and the window got none.
        self.ab = InputAB(model, self.call.fit_input, rounds, self.budget, sizes=sizes_for(left, step),
                           steps_left=left, keep_steps=WINDOW_STEPS + 1 if self.unbounded else 0)
        self.ab.on_step_begin()  # this step is the first of the A/B

    def _explain(self, now: float) -> None:
        """After the A/B, with --diagnose: a profiler window where it found a cost worth explaining. Not by
        default: a window's cost (reading its trace) grows with the ops in a step, past any estimate from
        the step time (1.3 s for keras-io's weather LSTM against 0.5 s allowed)."""
        assert self.ab is not None
        if self.unbounded and self.ab.median_share() >= EXPLAIN_FROM_SHARE:
            self._start_window()

    def _start_window(self) -> None:
        self.window = ProfilerWindow(WINDOW_STEPS, None)
        if self.window.start():
            self.window.on_step_begin(time.monotonic())

    def _skip(self, why: str | None) -> None:
        self.decided = True
        channel().emit(Kind.INPUT_AB, skipped=why, allowance_seconds=self.budget)

    def on_train_end(self, model) -> None:
        ab = self.ab
        held = ab is not None and ab.excursions_left()
        if ab is not None and held:  # a fit too short for rounds: its compute-only steps wait (see _Deferred)
            ab.unwrap()
        elif ab is not None:
            ab.finish()
            _Deferred.settle(ab)
            if ab.measured and not ab.after_fit:
                conclusive = ab.conclusive()
                _InputDiagnosis.open_fits += not conclusive
                _InputDiagnosis.open_input = input_signature(self.call.fit_input)
                _InputDiagnosis.done = (_InputDiagnosis.done or conclusive
                                        or _InputDiagnosis.open_fits >= MAX_AB_FITS)
        if self.window is not None:
            self.window.finish()
        if not self.decided or self.under_strategy:
            return
        if held:
            _Deferred.hold(self)
        else:
            if self.ab is not None:  # an A/B that did not measure in rounds: the one held reports now
                _Deferred.flush()
            self._stages()
        if self.unbounded and xla_on_cpu(model):
            xla_probe(model, self.call.fit_input)
        elif xla_on_cpu(model):  # a step built again without XLA: its trace, then steps of each kind
            channel().emit(Kind.XLA_PROBE, skipped="XLA against no XLA needs a second train function traced "
                           "(seconds): tensorgauge run --try-fixes (or --diagnose) measures it")
        _, _, batch_size = self.call.fit_input or (None, None, None)
        if len(self.starts) > 4 and small_steps(model, self._step_seconds(), batch_size):
            if self.unbounded:
                spe_probe(model, self.call.fit_input)
            else:  # a train function traced again with N steps a call: seconds, past the 1% bound
                channel().emit(Kind.SPE_PROBE, skipped="steps_per_execution needs a second train function traced "
                               "(seconds): tensorgauge run --diagnose measures it")


    def _stages(self) -> None:
        """Each stage of a tf.data pipeline (or a PyDataset's ``__getitem__``) timed on its own
        (:mod:`.stage_costs`) where the A/B found input costs the steps (or with --diagnose); else one line
        saying why not."""
        import tensorflow as tf

        x, _, batch_size = self.call.fit_input or (None, None, None)
        if not isinstance(x, tf.data.Dataset) and not is_pydataset(x):
            return
        share = self.ab.median_share() if self.ab is not None and self.ab.measured else None
        if not self.unbounded and (share is None or share < INPUT_MODERATE):
            why = ("the A/B did not measure the input's cost" if share is None else
                   f"the A/B found input costs {share:.0%} of a step, under {INPUT_MODERATE:.0%}")
            channel().emit(Kind.INPUT_STAGES, skipped=f"{why}: no stage timed (tensorgauge run --diagnose times them)",
                           allowance_seconds=self.budget)
            return
        if _InputDiagnosis.stages_timed:
            return
        _InputDiagnosis.stages_timed = True
        if is_pydataset(x):
            measure_pydataset(x, self.budget)
        else:
            measure_stages(x, batch_size, self.budget)


class _Deferred:
    """The after-fit A/B of a fit too short for rounds (a warm-up fit, often), its compute-only steps not yet
    run: a later fit whose rounds measure replaces it (:meth:`settle`; the analysis prefers rounds, and
    those steps were 0.65 CPU-s of a 17 CPU-s job), else it runs at the next fit's end that tried and did
    not measure in rounds, at the next such hold, at the process's exit, or as ``tensorgauge.monitor()``
    ends (:func:`flush_deferred`). Its stage timing waits with it: it needs the A/B's share."""

    held: _InputDiagnosis | None = None

    @classmethod
    def hold(cls, diagnosis: _InputDiagnosis) -> None:
        cls.flush()  # the first fit's A/B, as before: one held at a time
        cls.held = diagnosis

    @classmethod
    def settle(cls, ab: InputAB) -> None:
        """``ab`` has ended: measured in rounds, it replaces the one held."""
        held = cls.held
        if held is None or held.ab is None or not ab.measured or ab.after_fit:
            return
        cls.held = None
        held.ab.supersede("a later fit measured the input in rounds of real and compute-only steps: "
                          "this fit's compute-only steps were not run")

    @classmethod
    def flush(cls) -> None:
        held, cls.held = cls.held, None
        if held is None or held.ab is None:
            return
        try:
            held.ab.finish()
        except Exception as exc:
            held.ab.fail(exc)
            return
        held._stages()


def flush_deferred() -> None:
    """Run the held after-fit A/B (see :class:`_Deferred`), if any: at exit, or as an in-process monitor ends."""
    try:
        _Deferred.flush()
    except Exception:
        pass  # never fails the job's exit


atexit.register(flush_deferred)  # registered after TensorFlow's own handlers and the hook's exit event: runs before them


@on_fit
def _input_listener(call: FitCall) -> FitListener | None:
    if call.fit_input is None or _InputDiagnosis.done or not mode():
        return None
    backend = keras_backend(call.model)
    if backend != "tensorflow":  # the JAX and PyTorch fits time Keras' iterator (.fit_input)
        _InputDiagnosis.done = True
        channel().emit(Kind.INPUT_AB, skipped=f"the A/B runs TensorFlow's train function, which Keras' {backend} "
                       "backend does not have")
        return None
    return _InputDiagnosis(call, unbounded=mode() == "always")
