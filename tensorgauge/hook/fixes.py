"""Fixes applied without code edits, and the short window they are timed over.

Used by ``tensorgauge run --try-fixes``: the job runs once per fix, with
``$TENSORGAUGE_FIX`` naming the fixes to apply and ``$TENSORGAUGE_WINDOW_STEPS``
set; the first ``fit`` (or custom training loop) then stops after
:data:`WARMUP_STEPS` + that many steps, sends the timed steps as a
``try_window`` event (a loop's with each step's wait in ``next()``), and the job
exits (code 0).
The run without fixes also times the compute-only probe (see
:func:`tensorgauge.hook.probes.compute_probe`): the limit a fix can reach.

Fixes:
- ``parallel_map``: ``Dataset.map`` without ``num_parallel_calls`` gets
  ``tf.data.AUTOTUNE`` (order kept: ``deterministic`` stays as it was).
- ``prefetch``: a ``tf.data.Dataset`` given to ``fit``, or iterated by a custom
  training loop, gets ``.prefetch(AUTOTUNE)``.
- ``cache``: every ``Dataset.map`` is followed by ``.cache()`` (in memory), so
  each map runs once and later epochs read its results; timed in the second
  epoch (``$TENSORGAUGE_WINDOW_WARMUP`` steps of warm-up cover the first).
- ``no_eager``: ``run_eagerly`` off and ``tf.config.run_functions_eagerly(False)``; on JAX
  also ``jit_compile`` on (a JAX step without it runs eagerly).
- ``no_jit``: ``model.jit_compile = False`` (fit's steps built without XLA).
- ``threads``: TensorFlow's thread pools sized to the CPUs allowed (the
  runner sets the environment; in-code ``set_*_parallelism_threads`` calls are ignored).
- ``stage_parallel``, ``stage_cache``: the fix fitted to the pipeline's costliest stage, applied to that
  stage alone: the ``Dataset.map`` call numbered ``$TENSORGAUGE_FIX_STAGE`` (the process's map calls
  counted from 1, the same in every run of the same program) gets ``num_parallel_calls=AUTOTUNE``, or
  ``.cache()`` after it. Under a window every map is numbered (``map_call``), so the baseline's stage
  timing says which call made each stage.
"""

from __future__ import annotations

import functools
import os
import sys
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_tensorflow
from tensorgauge.hook.protocol import FIX_ENV, FIX_STAGE_ENV, WARMUP_ENV, WARMUP_STEPS, WINDOW_ENV, Kind

FIXES = ("parallel_map", "prefetch", "cache", "no_eager", "threads", "no_jit", "stage_parallel", "stage_cache")
MAP_CALL_ATTRIBUTE = "_tensorgauge_map_call"


def active() -> set[str]:
    return {f for f in os.environ.get(FIX_ENV, "").split(",") if f in FIXES}


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        return default


def window_steps() -> int:
    return _env_int(WINDOW_ENV, 0)


def apply_tensorflow(tf) -> None:
    """Fixes that patch TensorFlow right after it is imported."""
    fixes = active()
    dataset_class = tf.data.Dataset
    if "parallel_map" in fixes:
        original = dataset_class.map

        @functools.wraps(original)
        def map_parallel(self, map_func, num_parallel_calls=None, *args, **kwargs):
            return original(self, map_func, num_parallel_calls or tf.data.AUTOTUNE, *args, **kwargs)

        dataset_class.map = map_parallel
    if "cache" in fixes:
        original_map = dataset_class.map

        @functools.wraps(original_map)
        def map_cached(self, *args, **kwargs):
            return original_map(self, *args, **kwargs).cache()

        dataset_class.map = map_cached
    if window_steps() > 0:
        _number_maps(dataset_class, fixes, _env_int(FIX_STAGE_ENV, 0), tf.data.AUTOTUNE)
    if "threads" in fixes:
        threading = tf.config.threading
        threading.set_intra_op_parallelism_threads = lambda n: None
        threading.set_inter_op_parallelism_threads = lambda n: None


def _number_maps(dataset_class, fixes: set[str], stage_call: int, autotune) -> None:
    """Number every ``Dataset.map`` call of the process on the dataset it makes (``map_call``), and
    apply a stage fix to the call numbered ``stage_call``."""
    original = dataset_class.map
    calls = [0]

    @functools.wraps(original)
    def map_numbered(self, map_func, num_parallel_calls=None, *args, **kwargs):
        calls[0] += 1
        fitted = calls[0] == stage_call
        if fitted and "stage_parallel" in fixes:
            num_parallel_calls = num_parallel_calls or autotune
        made = original(self, map_func, num_parallel_calls, *args, **kwargs)
        try:
            setattr(made, MAP_CALL_ATTRIBUTE, calls[0])
        except Exception:  # a dataset that takes no attribute: its stage is not numbered
            pass
        return made.cache() if fitted and "stage_cache" in fixes else made

    dataset_class.map = map_numbered


def apply_fit(model, args: list, kwargs: dict) -> None:
    """Fixes applied to one ``fit`` call (in place on its arguments)."""
    fixes = active()
    tf = sys.modules.get("tensorflow")
    if "no_jit" in fixes and getattr(model, "jit_compile", False) is True:
        model.jit_compile = False
        model.train_function = None  # built again, without XLA
    if "no_eager" in fixes:
        model.run_eagerly = False
        if tf is not None:
            tf.config.run_functions_eagerly(False)
        from tensorgauge.hook.diagnose import keras_backend

        if keras_backend(model) == "jax" and getattr(model, "jit_compile", True) is False:
            model.jit_compile = True  # on JAX a step without jit runs eagerly
            model.train_function = None  # built again, jitted
    if "prefetch" in fixes and tf is not None:
        if args and isinstance(args[0], tf.data.Dataset):
            args[0] = args[0].prefetch(tf.data.AUTOTUNE)
        elif isinstance(kwargs.get("x"), tf.data.Dataset):
            kwargs["x"] = kwargs["x"].prefetch(tf.data.AUTOTUNE)


def loop_dataset(dataset):
    """The dataset a custom loop iterates: prefetched under the ``prefetch`` fix."""
    if "prefetch" in active():
        import tensorflow as tf

        return dataset.prefetch(tf.data.AUTOTUNE)
    return dataset


_window: Window | None = None


def window() -> Window | None:
    """The process's timing window (over its first fits), when one was asked for."""
    global _window
    if _window is None and window_steps() > 0:
        _window = Window(window_steps(), max(WARMUP_STEPS, _env_int(WARMUP_ENV, WARMUP_STEPS)))
    return _window


class Window:
    """Times ``steps`` training steps after ``warmup`` steps, then stops training."""

    def __init__(self, steps: int, warmup: int = WARMUP_STEPS):
        self.steps = steps
        self.warmup = warmup
        self.marks: list[float] = []
        self.finished = False
        self.loop_steps: list[tuple[float, float]] = []  # a custom loop's (seconds, wait), warm-up included

    def on_step_begin(self, model) -> None:
        if self.finished:
            return
        self.marks.append(time.monotonic())
        if len(self.marks) > self.warmup + self.steps:
            timed = self.marks[self.warmup:]
            channel().emit(Kind.TRY_WINDOW, fixes=sorted(active()),
                           step_seconds=[b - a for a, b in zip(timed, timed[1:])])
            self.finished = True
            model.stop_training = True

    def on_loop_step(self, seconds: float, waited: float) -> None:
        """A custom loop's training step ended (it took ``seconds``, ``waited`` of them in next());
        once the window is full, the job ends here."""
        if self.finished:
            return
        self.loop_steps.append((seconds, waited))
        timed = self.loop_steps[self.warmup:]
        if len(timed) >= self.steps:
            channel().emit(Kind.TRY_WINDOW, fixes=sorted(active()), step_seconds=[s for s, _ in timed],
                           next_seconds=[w for _, w in timed])
            self.finished = True
            self.exit_if_finished()

    def exit_if_finished(self) -> None:
        if self.finished:
            from tensorgauge.hook.exit import exit_job

            exit_job(0)


class _WindowWatch(FitListener):
    def __init__(self, timed: Window, fit_input):
        self.timed, self.fit_input = timed, fit_input

    def on_train_batch_begin(self, model, epoch: int, batch: int) -> None:
        self.timed.on_step_begin(model)

    def on_train_end(self, model) -> None:
        from tensorgauge.hook import diagnose, probes

        if self.timed.finished and not active() and not diagnose.mode():
            probes.compute_probe(model, self.fit_input)  # the limit the fixes are measured against

    def after_fit(self, model) -> None:
        from tensorgauge.hook import diagnose

        tf = sys.modules.get("tensorflow")
        x, _, batch_size = self.fit_input
        if self.timed.finished and not active() and not diagnose.mode() and tf is not None \
                and isinstance(x, tf.data.Dataset):
            from tensorgauge.hook.stage_costs import measure_stages

            # Which stage costs, its fix to get a trial of its own: timed once fit has returned and deleted its
            # iterator (a stopped fit's iterator, still prefetching, took the cores from the first prefixes).
            measure_stages(x, batch_size, None, name_lines=False)  # (which lines: not what a trial changes)
        self.timed.exit_if_finished()


@on_fit
def _fixes_listener(call: FitCall) -> FitListener | None:
    if call.fit_input is None:
        return None
    apply_fit(call.model, call.args, call.kwargs)
    timed = window()
    return _WindowWatch(timed, call.fit_input) if timed is not None else None


on_tensorflow(apply_tensorflow)
