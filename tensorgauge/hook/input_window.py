"""The input split of a fit, measured in the job at a bounded cost.

On by default (``$TENSORGAUGE_DIAGNOSE`` = ``auto``; ``tensorgauge run
--no-diagnose`` turns it off), in the first ``fit`` of a process:

- a profiler window over up to :data:`WINDOW_STEPS` training steps after
  :data:`WINDOW_START` warm-up steps. Its trace gives, per step, the time spent
  in ``IteratorGetNext`` (waiting for the input pipeline: Keras fetches the batch
  inside the compiled train function) and the train function's own time; the
  step times come from the hook's step marks. Sent as one ``input_probe`` event;
  the trace files are deleted and TensorFlow's log lines about the profiler are
  kept off the job's stderr.
- then, as the fit ends, the compute-only probe: the train function on one
  repeated batch, no input work (``compute_probe``).

Their cost is bounded by the fit's length: at most :data:`COST_SHARE` of the
fit, or :data:`COST_FLOOR_SECONDS` for short fits. The window is sized (or
skipped) from the median step and the fit's expected length when it would
start; the probe gets what the window left of the allowance, by the fit's
actual length. What does not fit is skipped, and the event says why. Never
under a distribution strategy (TensorFlow 2.21's multi-worker runtime can crash
in a profiler window), unless ``always`` (``--diagnose``), which also lifts the
bound.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import PYTHON_OPS, _batch_stage_size, _pipeline_ops, fit_epochs, keras_backend, mode
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import WINDOW_START, Kind

WINDOW_STEPS, WINDOW_MIN_STEPS = 10, 3
PROBE_STEPS, PROBE_MIN_STEPS, PROBE_WARMUP = 32, 4, 1
KEPT_STARTS = 200
COST_SHARE, COST_FLOOR_SECONDS = 0.01, 0.5
# The window's cost, measured (benchmarks/diagnose_overhead.py): a fixed part (profiler start, stop,
# reading the trace) and a slowdown of the profiled steps.
WINDOW_FIXED_SECONDS, WINDOW_SLOWDOWN = 0.15, 0.1
_GET_NEXT = "IteratorGetNextOp::DoCompute"
_COLLECTIVES = ("CollectiveReduce", "CollectiveGather", "CollectiveAllToAll", "NcclAllReduce", "AllReduce")
_INPUT_THREADS = ("tf_data_private_threadpool", "tf_data_iterator_resource")  # not get_next: that is the wait
_PROFILER_LOG = (b"profiler_session.cc:", b"save_profile.cc:", b"profiler_client.cc:", b"xplane_to_")


def allowance(fit_seconds: float) -> float:
    """What the diagnosis may cost in a fit of ``fit_seconds``."""
    return max(COST_SHARE * fit_seconds, COST_FLOOR_SECONDS)


def window_plan(step_seconds: float, fit_seconds: float | None) -> tuple[int, str | None]:
    """(steps to profile, why none) for a fit expected to last ``fit_seconds`` (None: unknown)."""
    if fit_seconds is None:
        return 0, "the fit's length is unknown (a dataset of unknown size and no steps_per_epoch)"
    budget = allowance(fit_seconds)
    for steps in range(WINDOW_STEPS, WINDOW_MIN_STEPS - 1, -1):
        if WINDOW_FIXED_SECONDS + WINDOW_SLOWDOWN * steps * step_seconds <= budget:
            return steps, None
    return 0, (f"a profiler window would cost about {WINDOW_FIXED_SECONDS + WINDOW_SLOWDOWN * WINDOW_MIN_STEPS * step_seconds:.2f} s, "
               f"more than the {budget:.2f} s allowed in this fit (~{fit_seconds:.0f} s at {step_seconds * 1000:.0f} ms "
               "a step); tensorgauge run --diagnose profiles it anyway")


def probe_plan(step_seconds: float, left_seconds: float) -> tuple[int, str | None]:
    """(compute-only steps to time, why none) with ``left_seconds`` of the allowance left."""
    steps = min(PROBE_STEPS, int(left_seconds / max(step_seconds, 1e-6)))
    if steps < PROBE_MIN_STEPS + PROBE_WARMUP:
        return 0, (f"{PROBE_MIN_STEPS} compute-only steps of up to {step_seconds * 1000:.0f} ms would exceed the "
                   f"{max(left_seconds, 0.0):.2f} s left of the diagnosis' allowance in this fit; tensorgauge run "
                   "--diagnose times them anyway")
    return steps, None


@contextlib.contextmanager
def quiet_profiler_logs():
    """Keep TensorFlow's log lines about the profiler (written by C++ to fd 2) off the job's stderr;
    anything else written meanwhile is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().splitlines(keepends=True)
                    if not any(marker in line for marker in _PROFILER_LOG)]
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))


def _side_effect_free(dataset) -> bool:
    """A pipeline that can be iterated again to peek at one batch: no Python in it (a generator or
    py_function may have side effects, or be slow to restart)."""
    try:
        return not any(op in PYTHON_OPS for op in _pipeline_ops(dataset))
    except Exception:
        return False


def _batch_like(x, y, batch_size: int | None) -> tuple[object, str]:
    """A batch shaped like fit's input, and where its shapes come from: a pipeline whose spec
    leaves a dimension open (sequences of any length) gives one real batch, read from a new
    iterator, when it has no Python in it; otherwise zeros from the spec or the arrays."""
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        flat = tf.nest.flatten(spec)
        open_dims = any(s.shape.rank is None or None in s.shape.as_list()[1:] for s in flat)
        if open_dims and _side_effect_free(x):
            return next(iter(x.take(1))), "a real batch"
        batch = (next((s.shape[0] for s in flat if s.shape.rank and s.shape[0]), None) or batch_size
                 or _batch_stage_size(x) or 32)
        filled = tf.nest.map_structure(lambda s: tf.zeros([batch if d is None else d for d in s.shape], s.dtype), spec)
        return filled, "zeros shaped by the dataset's spec" + (" (open dimensions filled with the batch size)"
                                                               if open_dims else "")
    batch = batch_size or 32

    def zeros(array):
        return tf.zeros((batch, *array.shape[1:]), tf.as_dtype(array.dtype))

    arrays = (tf.nest.map_structure(zeros, x), tf.nest.map_structure(zeros, y)) if y is not None else \
        tf.nest.map_structure(zeros, x)
    return arrays, "zeros shaped by the arrays"


def _saved_variables(model) -> list:
    """(variable, value) of every variable a train step touches (model, optimizer, metrics)."""
    variables = {id(v): v for v in [*model.variables, *getattr(model.optimizer, "variables", []),
                                    *getattr(model, "metrics_variables", [])]}.values()
    return [(v, v.numpy()) for v in variables]


def _time_steps(tf, function, batch, steps: int, seconds: float | None, began: float) -> list[float]:
    """Seconds of each call of a train function on ``batch`` repeated, up to ``steps`` calls, stopping
    once ``seconds`` have gone since ``began`` (after :data:`PROBE_MIN_STEPS`)."""
    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    times: list[float] = []
    while len(times) < steps:
        start = time.monotonic()
        logs = function(iterator)
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, logs)  # wait for it
        times.append(time.monotonic() - start)
        # Stop before a step that would end past ``seconds``.
        if seconds is not None and len(times) >= PROBE_MIN_STEPS and time.monotonic() - began + times[-1] > seconds:
            break
    return times


def compute_probe(model, fit_input, steps: int = PROBE_STEPS, seconds: float | None = None) -> None:
    """Compute-only step time: the train function on one repeated batch, no input work; up to
    ``steps`` steps, stopping once ``seconds`` have gone (after :data:`PROBE_MIN_STEPS`).

    Every variable the steps touch (model, optimizer, metrics) is copied before
    and restored after, so the job's results do not change.
    """
    try:
        import tensorflow as tf

        began = time.monotonic()
        x, y, batch_size = fit_input
        saved = _saved_variables(model)
        batch, source = _batch_like(x, y, batch_size)
        shapes = [[int(d) if d is not None else -1 for d in t.shape] for t in tf.nest.flatten(batch)]
        try:
            times = _time_steps(tf, model.train_function, batch, steps, seconds, began)
        finally:
            for variable, value in saved:
                variable.assign(value)
        channel().emit(Kind.COMPUTE_PROBE, step_seconds=times[PROBE_WARMUP:], total_seconds=time.monotonic() - began,
                       shapes=shapes, source=source)
    except Exception as exc:
        channel().emit(Kind.COMPUTE_PROBE, error=f"{type(exc).__name__}: {exc}")


def xla_on_cpu(model) -> bool:
    """fit compiles its steps with XLA and TensorFlow sees no GPU."""
    try:
        import tensorflow as tf

        return getattr(model, "jit_compile", False) is True and not tf.config.list_logical_devices("GPU")
    except Exception:
        return False


def xla_probe(model, fit_input, steps: int = PROBE_STEPS // 2) -> None:
    """The train step with XLA (as fit runs it) against the same step built without, on one repeated
    batch: ``steps`` of each (the new function's first call, its trace, timed apart). The model's
    variables, its ``jit_compile`` and its train function are restored after."""
    try:
        import tensorflow as tf

        began = time.monotonic()
        x, y, batch_size = fit_input
        saved = _saved_variables(model)
        batch, _ = _batch_like(x, y, batch_size)
        function = model.train_function
        try:
            xla = _time_steps(tf, function, batch, steps + PROBE_WARMUP, None, began)
            model.jit_compile = False
            model.make_train_function(force=True)
            plain = _time_steps(tf, model.train_function, batch, steps + 1, None, began)
        finally:
            model.jit_compile = True
            model.train_function = function
            for variable, value in saved:
                variable.assign(value)
        channel().emit(Kind.XLA_PROBE, xla_step_seconds=xla[PROBE_WARMUP:], plain_step_seconds=plain[1:],
                       plain_trace_seconds=plain[0], total_seconds=time.monotonic() - began)
    except Exception as exc:
        channel().emit(Kind.XLA_PROBE, error=f"{type(exc).__name__}: {exc}")


def _busy_seconds(events) -> float:
    """The time a thread's line was busy: the union of its events (nested ones counted once)."""
    busy, end = 0, -1
    for event in sorted(events, key=lambda e: e.offset_ps):
        stop = event.offset_ps + event.duration_ps
        if stop > end:
            busy += stop - max(event.offset_ps, end)
            end = stop
    return busy / 1e12


class ProfilerWindow:
    """Profiles ``steps`` training steps (see the module doc)."""

    def __init__(self, steps: int = WINDOW_STEPS, allowance_seconds: float | None = None):
        self.steps = steps
        self.allowance_seconds = allowance_seconds
        self.active = False
        self.start_seconds = self.stop_seconds = 0.0
        self.logdir: str | None = None
        self.step_starts: list[float] = []
        self.compute_seconds: float | None = None  # the median step less its input wait, once finished

    def start(self) -> bool:
        try:
            import tensorflow as tf

            began = time.monotonic()
            self.logdir = tempfile.mkdtemp(prefix="tensorgauge-profile-")
            with quiet_profiler_logs():
                tf.profiler.experimental.start(self.logdir)
            self.start_seconds = time.monotonic() - began
            self.active = True
        except Exception as exc:
            channel().emit(Kind.INPUT_PROBE, error=f"{type(exc).__name__}: {exc}")
        return self.active

    def on_step_begin(self, now: float) -> bool:
        """Marks a step; True once the window is over."""
        self.step_starts.append(now)
        if len(self.step_starts) > self.steps:
            self.finish()
            return True
        return False

    def finish(self) -> None:
        """Stop the profiler (at the window's end, or when fit ends first) and report."""
        if not self.active:
            return
        self.active = False
        try:
            import tensorflow as tf

            began = time.monotonic()
            with quiet_profiler_logs():
                tf.profiler.experimental.stop()
            steps = [b - a for a, b in zip(self.step_starts, self.step_starts[1:])]
            waits, functions, copies, totals = self._trace_seconds(len(steps))
            self.stop_seconds = time.monotonic() - began
            if steps and waits:
                self.compute_seconds = max(0.0, statistics.median(steps) - statistics.median(waits))
            channel().emit(Kind.INPUT_PROBE, step_seconds=steps, get_next_seconds=waits, function_seconds=functions,
                           copies=len(copies), copy_seconds=sum(copies), **totals,
                           start_seconds=self.start_seconds, stop_seconds=self.stop_seconds,
                           allowance_seconds=self.allowance_seconds)
        except Exception as exc:
            channel().emit(Kind.INPUT_PROBE, error=f"{type(exc).__name__}: {exc}")
        finally:
            if self.logdir is not None:
                shutil.rmtree(self.logdir, ignore_errors=True)

    def _trace_seconds(self, steps: int) -> tuple[list[float], list[float], list[float], dict[str, float]]:
        """Per step, in order: IteratorGetNext's duration, and the train function's
        (Keras names it ``*_on_iterator``; the rest of a step is Keras' Python loop);
        the durations of the window's host<->GPU copies (``Memcpy*`` on a GPU plane); and
        window totals: ``collective_seconds`` (all-reduce ops: time a worker waits for the
        others), ``input_work_seconds`` (tf.data's root iterator producing elements) and
        ``input_thread_seconds`` (the time tf.data's own threads were busy: its maps and
        prefetching, which compete with the train step for the cores)."""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        paths = glob.glob(os.path.join(self.logdir or "", "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(paths[0], "rb") as f:
            space.ParseFromString(f.read())
        waits: list[tuple[int, float]] = []
        functions: list[tuple[int, float]] = []
        copies: list[float] = []
        totals = {"collective_seconds": 0.0, "input_work_seconds": 0.0, "input_thread_seconds": 0.0}
        for plane in space.planes:
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            gpu = plane.name.startswith("/device:GPU:")
            for line in plane.lines:
                if line.name.startswith(_INPUT_THREADS):
                    totals["input_thread_seconds"] += _busy_seconds(line.events)
                for event in line.events:
                    name = names.get(event.metadata_id, "")
                    op_type = name.rsplit(":", 1)[-1]
                    if op_type.startswith(_COLLECTIVES):
                        totals["collective_seconds"] += event.duration_ps / 1e12
                    elif name == "Iterator::Root":
                        totals["input_work_seconds"] += event.duration_ps / 1e12
                    if gpu and name.startswith("Memcpy") and ("HtoD" in name or "DtoH" in name or "H2D" in name
                                                              or "D2H" in name):
                        copies.append(event.duration_ps / 1e12)
                    at = (line.timestamp_ns * 1000 + event.offset_ps, event.duration_ps / 1e12)
                    if name == _GET_NEXT:
                        waits.append(at)
                    elif line.name == "python" and name.endswith("_on_iterator"):
                        functions.append(at)
        return [s for _, s in sorted(waits)[:steps]], [s for _, s in sorted(functions)[:steps]], copies, totals


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


class _InputWindow(FitListener):
    """Decides, at step :data:`WINDOW_START` + 1 of the process's first fit, whether a window fits the
    bound and how long; profiles it; then times the compute-only probe with what is left."""

    done = False  # once per process

    def __init__(self, call: FitCall, unbounded: bool):
        self.call, self.unbounded = call, unbounded
        self.began = time.monotonic()
        self.epochs = fit_epochs(call.args, call.kwargs) or 1
        self.steps_per_epoch = _planned_steps(call)
        self.starts: list[float] = []  # the first step begins (up to KEPT_STARTS), for the median step
        self.seen = 0  # steps before the window
        self.first_epoch_steps = 0
        self.window: ProfilerWindow | None = None
        self.decided = False
        self.why_not: str | None = None  # why no window yet, while the fit's length is unknown

    def on_train_batch_begin(self, model, epoch: int) -> None:
        now = time.monotonic()
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
        if self.seen > WINDOW_START and (self.seen - WINDOW_START) % WINDOW_START == 1:
            self._decide(model, epoch, now)

    def _step_seconds(self) -> float:
        return statistics.median(b - a for a, b in zip(self.starts[2:], self.starts[3:]))

    def _expected_fit_seconds(self, epoch: int, step: float, now: float) -> float | None:
        """The fit's expected length; while it is unknown (a dataset of unknown size in its first
        epoch), its length so far: the bound then holds whatever its end."""
        per_epoch = self.steps_per_epoch or (self.first_epoch_steps if epoch > 0 else None)
        if per_epoch is None:
            return None
        return (now - self.began) + step * max(0, self.epochs * per_epoch - self.seen)

    def _decide(self, model, epoch: int, now: float) -> None:
        if _under_strategy(model) and not self.unbounded:
            self._skip("fit runs under a distribution strategy, where a profiler window can crash TensorFlow "
                       "2.21; tensorgauge run --diagnose profiles it anyway")
            return
        step = self._step_seconds()
        budget = None
        if self.unbounded:
            steps = WINDOW_STEPS
        else:
            expected = self._expected_fit_seconds(epoch, step, now)
            fit_seconds = expected if expected is not None else now - self.began
            steps, why = window_plan(step, fit_seconds)
            budget = allowance(fit_seconds)
            if not steps:
                if expected is None:  # the fit may yet prove long enough: ask again later
                    self.why_not = why
                    return
                self._skip(why, budget)
                return
        self.decided = _InputWindow.done = True
        self.window = ProfilerWindow(steps, budget)
        if self.window.start():
            self.window.on_step_begin(time.monotonic())

    def _skip(self, why: str | None, budget: float | None = None) -> None:
        self.decided = _InputWindow.done = True
        channel().emit(Kind.INPUT_PROBE, skipped=why, allowance_seconds=budget)

    def on_train_end(self, model) -> None:
        window = self.window
        if window is None or not window.step_starts:
            if not self.decided and self.why_not:
                self._skip(self.why_not)
            return
        window.finish()
        step = self._step_seconds()
        if self.unbounded:
            compute_probe(model, self.call.fit_input)
            if xla_on_cpu(model):
                xla_probe(model, self.call.fit_input)
            return
        spent = window.start_seconds + window.stop_seconds
        profiled = [b - a for a, b in zip(window.step_starts, window.step_starts[1:])]
        spent += max(0.0, sum(profiled) - step * len(profiled))
        left = allowance(time.monotonic() - self.began) - spent
        # A compute-only step is about the step less its input wait (the probe stops at the allowance anyway).
        steps, why = probe_plan(window.compute_seconds if window.compute_seconds else step, left)
        if steps:
            compute_probe(model, self.call.fit_input, steps, left)
        else:
            channel().emit(Kind.COMPUTE_PROBE, skipped=why)
        if xla_on_cpu(model):  # a step built again without XLA: its trace, then steps of each kind
            channel().emit(Kind.XLA_PROBE, skipped="XLA against no XLA needs a second train function traced "
                           "(seconds): tensorgauge run --try-fixes (or --diagnose) measures it")


@on_fit
def _input_window_listener(call: FitCall) -> FitListener | None:
    if call.fit_input is None or _InputWindow.done or not mode():
        return None
    backend = keras_backend(call.model)
    if backend != "tensorflow":  # TensorFlow's profiler sees no JAX or PyTorch step
        _InputWindow.done = True
        channel().emit(Kind.INPUT_PROBE, skipped=f"the input window is TensorFlow's profiler, which does not see the "
                       f"steps of Keras' {backend} backend")
        return None
    return _InputWindow(call, unbounded=mode() == "always")
