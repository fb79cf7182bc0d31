"""Steps timed on the job's own model outside its training: the pieces every probe shares.

- :func:`cached_input`: one batch like fit's, repeated (a real one where it is cheap to take);
- :func:`restored`: every variable a train step touches, put back as it was afterwards;
- :func:`time_steps`: calls of a train function on one batch, repeated, each timed to its end;
- :func:`compute_probe` and :func:`xla_probe`, the two probes built from them (the compute-only
  limit of a ``--try-fixes`` window; fit's XLA step against the same step without XLA).

The job's results never change: whatever a probe trains is restored.
"""

from __future__ import annotations

import contextlib
import sys
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.dataset_facts import element_bytes
from tensorgauge.hook.diagnose import PYTHON_OPS, _batch_stage_size, _pipeline_ops
from tensorgauge.hook.protocol import SMALL_BATCH, SMALL_STEP_SECONDS, SPE_TRIAL, Kind, error_text
from tensorgauge.hook.timing import MIN_STEPS, time_calls

PROBE_STEPS, PROBE_MIN_STEPS, PROBE_WARMUP = 32, MIN_STEPS, 1
PEEK_MAX_SHUFFLE = 10_000  # a shuffle buffer larger than this makes a peek at one real batch too costly,
PEEK_MAX_SHUFFLE_BYTES = 32 << 20  # ... and one holding more than this (a new iterator fills a copy of it)


def _peekable(dataset) -> bool:
    """A pipeline that can be iterated again to take one real batch cheaply: no Python in it (a
    generator or py_function may have side effects, or be slow to restart), no large shuffle
    buffer (a new iterator fills another before its first element: time and memory the job would
    not have spent) and no cache (a cache read in part
    warns on the job's stderr)."""
    try:
        if any(op in PYTHON_OPS for op in _pipeline_ops(dataset)):
            return False
        stage = dataset
        while stage is not None:
            if "Cache" in type(stage).__name__:
                return False
            buffer = getattr(stage, "_buffer_size", None)
            if "Shuffle" in type(stage).__name__ and buffer is not None:
                size = int(buffer)
                held = element_bytes(stage)
                if size < 0 or size > PEEK_MAX_SHUFFLE or held is None or size * held > PEEK_MAX_SHUFFLE_BYTES:
                    return False
            inputs = stage._inputs()
            stage = inputs[0] if len(inputs) == 1 else None
        return True
    except Exception:
        return False


def cached_input(x, y, batch_size: int | None, spec=None) -> tuple[object, str, list[list[int]]]:
    """An iterator that yields one batch like fit's, for ever (a train function's input with no input
    work), where the batch comes from, and its shapes. A pipeline cheap to peek at gives its first
    batch; arrays give their first rows, and other pipelines zeros shaped by their spec. The batch
    has the element spec ``spec`` (fit's own iterator's, when known; else the pipeline's, or for
    arrays an open batch dimension): the same spec, the same traced train function."""
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset) and _peekable(x):
        batch = x.take(1).get_single_element()  # the job's pipeline is not kept: its iterator ends here
        return iter(repeated(batch, spec or x.element_spec)), "a real batch", shapes_of(batch)
    if isinstance(x, tf.data.Dataset):
        spec = spec or x.element_spec
        flat = tf.nest.flatten(spec)
        open_dims = any(s.shape.rank is None or None in s.shape.as_list()[1:] for s in flat)
        rows = (next((s.shape[0] for s in flat if s.shape.rank and s.shape[0]), None) or batch_size
                or _batch_stage_size(x) or 32)
        batch = tf.nest.map_structure(lambda s: tf.zeros([rows if d is None else d for d in s.shape], s.dtype), spec)
        source = "zeros shaped by the dataset's spec" + (" (open dimensions filled with the batch size)"
                                                          if open_dims else "")
        return iter(repeated(batch, spec)), source, shapes_of(batch)
    rows = batch_size or 32

    def first_rows(array):
        return tf.convert_to_tensor(array[:rows])

    batch = (tf.nest.map_structure(first_rows, x), tf.nest.map_structure(first_rows, y)) if y is not None else \
        tf.nest.map_structure(first_rows, x)
    if spec is None:  # fit's own batches of arrays: the batch dimension is open
        spec = tf.nest.map_structure(lambda t: tf.TensorSpec([None, *t.shape[1:]], t.dtype), batch)
    return iter(repeated(batch, spec)), "the arrays' first rows", shapes_of(batch)


def repeated(batch, spec):
    """A dataset of ``batch`` for ever, its dense parts' shapes relaxed to ``spec`` (:func:`_as_fit_reads`)."""
    import tensorflow as tf

    return _as_fit_reads(tf.data.Dataset.from_tensors(batch).repeat(), spec)


def stashed(batches: list, spec):
    """A dataset of ``batches`` once each, in order, its dense parts' shapes relaxed to ``spec``: the
    fit's own batches, pulled ahead of their steps (see :mod:`.input_ab`). Batches of one shape are
    stacked (a few ms); others (a last, smaller batch; ragged or sparse parts) concatenated (about
    2 ms a batch)."""
    import tensorflow as tf

    flat = [tf.nest.flatten(batch) for batch in batches]
    if all(isinstance(t, tf.Tensor) for t in flat[0]) and all(
            [(t.shape, t.dtype) for t in parts] == [(t.shape, t.dtype) for t in flat[0]] for parts in flat[1:]):
        stacked = [tf.stack(parts) for parts in zip(*flat)]
        dataset = tf.data.Dataset.from_tensor_slices(tf.nest.pack_sequence_as(batches[0], stacked))
    else:
        dataset = tf.data.Dataset.from_tensors(batches[0])
        for batch in batches[1:]:
            dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
    return _as_fit_reads(dataset, spec)


def batch_bytes(batch) -> int:
    """What a batch holds, about (a string counted as 64 bytes)."""
    import tensorflow as tf

    return sum((t.shape.num_elements() or 0) * (64 if t.dtype == tf.string else t.dtype.size)
               for t in tf.nest.flatten(batch, expand_composites=True) if hasattr(t, "shape"))


def _as_fit_reads(dataset, spec):
    """``dataset`` with its dense parts' shapes relaxed to ``spec`` (the same spec, the same traced train
    function) and tf.data's autotuning off: deleting an autotuned iterator waits for the autotuner's
    thread, which cost the job up to 2 s of idle time on a 2-core machine (at the end of the A/B)."""
    import tensorflow as tf

    flat_spec = tf.nest.flatten(spec)
    if dataset.element_spec != spec and len(flat_spec) == len(tf.nest.flatten(dataset.element_spec)):

        def relax(*parts):
            flat = tf.nest.flatten(parts)
            return tf.nest.pack_sequence_as(spec, [
                tf.raw_ops.PlaceholderWithDefault(input=t, shape=s.shape) if isinstance(s, tf.TensorSpec) else t
                for t, s in zip(flat, flat_spec)])

        dataset = dataset.map(relax)
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


@contextlib.contextmanager
def restored(model):
    """Every variable a train step touches (model, optimizer, metrics) as it was on entry, on exit.
    The copies stay on the variables' device (``tf.identity``: TensorFlow copies a variable's buffer
    before updating it in place while a read of it is alive): ten times cheaper than through numpy."""
    variables = {id(v): v for v in [*model.variables, *getattr(model.optimizer, "variables", []),
                                    *getattr(model, "metrics_variables", [])]}.values()
    tf = sys.modules.get("tensorflow")
    saved = [(v, tf.identity(_current(v)) if tf is not None else v.numpy()) for v in variables]
    try:
        yield
    finally:
        for variable, value in saved:
            variable.assign(value)


def _current(variable):
    """A variable's value as a tensor: Keras 3's ``.value`` is a property, tf_keras' (a ``tf.Variable``,
    or an ``AutoCastVariable`` under mixed precision) a method."""
    value = getattr(variable, "value", variable)
    return value() if callable(value) else value


def time_steps(function, iterator, steps: int, seconds: float | None = None, began: float = 0.0,
               min_steps: int = PROBE_MIN_STEPS, gap: float = 0.0) -> list[float]:
    """Seconds of each call of a train function on ``iterator`` (see :func:`.timing.time_calls`)."""
    return time_calls(lambda: function(iterator), steps, seconds, began, min_steps, gap)


def shapes_of(batch) -> list[list[int]]:
    """Each tensor's shape in a batch (-1: unknown)."""
    import tensorflow as tf

    return [[int(d) if d is not None else -1 for d in t.shape] for t in tf.nest.flatten(batch)]


def compute_probe(model, fit_input, steps: int = PROBE_STEPS, seconds: float | None = None) -> None:
    """Compute-only step time: the train function on one repeated batch, no input work; up to
    ``steps`` steps, stopping once ``seconds`` have gone (after :data:`PROBE_MIN_STEPS`)."""
    try:

        began = time.monotonic()
        iterator, source, shapes = cached_input(*fit_input)
        with restored(model):
            times = time_steps(model.train_function, iterator, steps, seconds, began)
        channel().emit(Kind.COMPUTE_PROBE, step_seconds=times[PROBE_WARMUP:], total_seconds=time.monotonic() - began,
                       shapes=shapes, source=source)
    except Exception as exc:
        channel().emit(Kind.COMPUTE_PROBE, error=error_text(exc))


def xla_on_cpu(model) -> bool:
    """fit compiles its steps with XLA and TensorFlow sees no GPU."""
    try:
        import tensorflow as tf

        return getattr(model, "jit_compile", False) is True and not tf.config.list_logical_devices("GPU")
    except Exception:
        return False


def against_rebuilt(model, fit_input, setting: str, value, calls_before: int, calls_after: int
                    ) -> tuple[list[float], list[float]]:
    """fit's train function timed (``calls_before`` calls), then the same built again with ``model.setting``
    = ``value`` (``calls_after`` calls, the first its trace), on one repeated batch; the model's variables,
    its setting and its train function restored after."""
    iterator, _, _ = cached_input(*fit_input)
    function, before = model.train_function, getattr(model, setting)
    with restored(model):
        try:
            first = time_steps(function, iterator, calls_before)
            setattr(model, setting, value)
            model.make_train_function(force=True)
            second = time_steps(model.train_function, iterator, calls_after)
        finally:
            setattr(model, setting, before)
            model.train_function = function
    return first, second


def xla_probe(model, fit_input, steps: int = PROBE_STEPS // 2) -> None:
    """The train step with XLA (as fit runs it) against the same step built without, on one repeated
    batch: ``steps`` of each (the new function's first call, its trace, timed apart). The model's
    variables, its ``jit_compile`` and its train function are restored after."""
    try:
        began = time.monotonic()
        xla, plain = against_rebuilt(model, fit_input, "jit_compile", False, steps + PROBE_WARMUP, steps + 1)
        channel().emit(Kind.XLA_PROBE, xla_step_seconds=xla[PROBE_WARMUP:], plain_step_seconds=plain[1:],
                       plain_trace_seconds=plain[0], total_seconds=time.monotonic() - began)
    except Exception as exc:
        channel().emit(Kind.XLA_PROBE, error=error_text(exc))


def small_steps(model, step_seconds: float, batch_size: int | None) -> bool:
    """fit's steps are tiny on a small batch, one step a call: a steps_per_execution trial may pay."""
    per_execution = getattr(model, "steps_per_execution", 1)
    return (step_seconds < SMALL_STEP_SECONDS and (batch_size is None or batch_size <= SMALL_BATCH)
            and isinstance(per_execution, int) and per_execution == 1 and hasattr(model, "make_train_function"))


def spe_probe(model, fit_input, per_execution: int = SPE_TRIAL, calls: int = PROBE_STEPS // 4) -> None:
    """fit's train function (one step a call) against the same built with ``steps_per_execution``
    = ``per_execution`` (that many steps a call, Python dispatching once), on one repeated batch:
    :data:`PROBE_STEPS` single steps, ``calls`` calls of the other (its first, the trace, timed apart).
    The model's variables, its steps_per_execution and its train function are restored after."""
    try:
        began = time.monotonic()
        single, multi = against_rebuilt(model, fit_input, "steps_per_execution", per_execution,
                                        PROBE_STEPS + PROBE_WARMUP, calls + 1)
        channel().emit(Kind.SPE_PROBE, steps_per_execution=per_execution, single_step_seconds=single[PROBE_WARMUP:],
                       multi_call_seconds=multi[1:], trace_seconds=multi[0], total_seconds=time.monotonic() - began)
    except Exception as exc:
        channel().emit(Kind.SPE_PROBE, error=error_text(exc))
