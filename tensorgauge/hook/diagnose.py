"""Evidence for the diagnosis, gathered inside the job.

Always on (each costs nothing per step):

- ``fit_config`` at each ``fit``: run_eagerly, functions_run_eagerly,
  jit_compile, steps_per_execution, batch size, epochs, whether the input is a
  ``tf.data.Dataset`` and, for one, under --diagnose or --try-fixes, its
  batches per epoch and bytes (when known), and the op types of its functions
  that are random or call Python (``dataset_random_ops``,
  ``dataset_python_ops``: can its map be cached?).
- ``trace`` each time a ``tf.function`` is traced: its name, whether its code
  is the user's or a library's, the trace number of that instance (2 and up: a
  retrace), and the trace's seconds and RSS change.
- ``eager_gradients`` when ``GradientTape.gradient`` has run eagerly (outside
  any ``tf.function``: a custom training loop in eager mode) 8, 16, 32, ...
  times; the count, and the seconds since the first such call.

With ``$TENSORGAUGE_DIAGNOSE`` (``tensorgauge run --diagnose``): a profiler
window over :data:`WINDOW_STEPS` training steps of the first ``fit``, after
:data:`WINDOW_START` warm-up steps. The window's trace gives, per step, the
time spent in ``IteratorGetNext`` (waiting for the input pipeline: Keras
fetches the batch inside the compiled train function); the step times come
from the hook's own step marks. The trace is parsed in the job and sent as one
``input_probe`` event; the trace files are deleted.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import sys
import tempfile
import time
import weakref

from tensorgauge.hook.channel import channel, process_rss_bytes
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_tensorflow
from tensorgauge.hook.protocol import DIAGNOSE_ENV, WINDOW_ENV, Kind

WINDOW_START = 10
WINDOW_STEPS = 10
_GET_NEXT = "IteratorGetNextOp::DoCompute"
_COLLECTIVES = ("CollectiveReduce", "CollectiveGather", "CollectiveAllToAll", "NcclAllReduce", "AllReduce")


def enabled() -> bool:
    return bool(os.environ.get(DIAGNOSE_ENV))


def send_fit_config(model, args: list, kwargs: dict) -> None:
    """What fit was asked to do, as far as it bears on speed."""
    try:
        tf = sys.modules.get("tensorflow")
        x = args[0] if args else kwargs.get("x")
        batch_size = kwargs.get("batch_size", args[2] if len(args) > 2 else None)
        is_dataset = tf is not None and isinstance(x, tf.data.Dataset)
        if is_dataset and batch_size is None:
            batch_size = _dataset_batch_size(x)
        threading = tf.config.threading if tf else None
        epochs = kwargs.get("epochs", args[3] if len(args) > 3 else 1)
        channel().emit(Kind.FIT_CONFIG, run_eagerly=bool(getattr(model, "run_eagerly", False)),
                       intra_op_threads=threading.get_intra_op_parallelism_threads() if threading else None,
                       inter_op_threads=threading.get_inter_op_parallelism_threads() if threading else None,
                       functions_run_eagerly=bool(tf.config.functions_run_eagerly()) if tf else None,
                       jit_compile=str(getattr(model, "jit_compile", None)),
                       steps_per_execution=_plain_int(getattr(model, "steps_per_execution", 1)),
                       batch_size=int(batch_size) if batch_size else (None if is_dataset else 32),
                       epochs=int(epochs) if isinstance(epochs, int) else None,
                       dataset=is_dataset,
                       **(_dataset_facts(x, batch_size) if is_dataset and _inspect_dataset(tf, model) else {}))
    except Exception:
        pass


def _plain_int(value) -> int | None:
    """An int setting as it is; None for a tf.Variable (tf_keras keeps steps_per_execution in one,
    and reading a variable is not the hook's to do, e.g. under a distribution strategy)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _inspect_dataset(tf, model) -> bool:
    """Look into fit's pipeline only when asked to (--diagnose, --try-fixes), and never under a
    distribution strategy (TensorFlow's multi-worker runtime is fragile: see the README)."""
    if not (enabled() or os.environ.get(WINDOW_ENV, "0") not in ("", "0")):
        return False
    strategy = getattr(model, "distribute_strategy", None)
    return strategy is None or not tf.distribute.has_strategy() and type(strategy).__name__.startswith("_Default")


RANDOM_OPS = ("Random", "Multinomial", "TruncatedNormal")  # op types containing these draw random numbers
PYTHON_OPS = ("PyFunc", "EagerPyFunc", "NumpyFunction")


def _dataset_facts(dataset, batch_size) -> dict:
    """Batches per epoch and bytes of a finite pipeline (None when unknown), and the random and
    Python op types in the functions of every stage (map, filter, ...)."""
    facts: dict = {"dataset_batches": None, "dataset_bytes": None, "dataset_random_ops": None,
                   "dataset_python_ops": None}
    try:
        import numpy as np
        import tensorflow as tf

        batches = int(dataset.cardinality())
        if batches >= 0:
            facts["dataset_batches"] = batches
            batch = batch_size or _batch_stage_size(dataset)
            sizes: list[int | None] = []
            for spec in tf.nest.flatten(dataset.element_spec):
                dims = [batch if i == 0 and d is None else d for i, d in enumerate(spec.shape.as_list())]
                sizes.append(None if None in dims else int(np.prod(dims, dtype=np.int64)) * spec.dtype.size)  # type: ignore[arg-type]
            if None not in sizes:
                facts["dataset_bytes"] = sum(s for s in sizes if s is not None) * batches
        ops = _pipeline_ops(dataset)
        facts["dataset_random_ops"] = sorted(o for o in ops if any(r in o for r in RANDOM_OPS))
        facts["dataset_python_ops"] = sorted(o for o in ops if o in PYTHON_OPS)
    except Exception:
        pass
    return facts


def _batch_stage_size(dataset) -> int | None:
    """The batch size of the pipeline's last ``batch`` stage (its element spec leaves it None)."""
    stage = dataset
    while stage is not None:
        size = getattr(stage, "_batch_size", None)
        if size is not None:
            return int(size)
        inputs = stage._inputs()
        stage = inputs[0] if len(inputs) == 1 else None
    return None


def _pipeline_ops(dataset) -> set[str]:
    """Op types in the functions of the pipeline's stages (private but stable tf.data API:
    ``_inputs()``, ``_functions()``); the data itself is never serialised."""
    ops: set[str] = set()
    seen: set[int] = set()
    todo = [dataset]
    while todo:
        stage = todo.pop()
        if id(stage) in seen:
            continue
        seen.add(id(stage))
        for wrapper in stage._functions():
            graph = wrapper.function.graph.as_graph_def()
            ops |= {node.op for node in graph.node}
            ops |= {node.op for function in graph.library.function for node in function.node_def}
        todo.extend(stage._inputs())
    return ops


def _dataset_batch_size(dataset) -> int | None:
    """The batch size of a batched tf.data pipeline, from its element spec."""
    try:
        import tensorflow as tf

        spec = tf.nest.flatten(dataset.element_spec)[0]
        return spec.shape[0] if spec.shape.rank else None
    except Exception:
        return None


@functools.lru_cache(maxsize=1)
def _library_folders() -> tuple[str, ...]:
    """Where installed packages and the standard library live: code there is not the user's to fix."""
    import site
    import sysconfig

    folders = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        folders.update(site.getsitepackages() + [site.getusersitepackages()])
    except AttributeError:  # a virtualenv's old site.py
        pass
    for name in ("tensorflow", "keras", "tf_keras"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            folders.add(os.path.dirname(os.path.dirname(path)))
    return tuple(os.path.realpath(f) + os.sep for f in folders if f)


@functools.lru_cache(maxsize=1024)
def _code_origin(code) -> tuple[str, str]:
    """("user" or "library", "file.py:line") of a function's code object."""
    path = os.path.realpath(code.co_filename)
    library = path.startswith(_library_folders()) or code.co_filename.startswith("<frozen")
    return ("library" if library else "user"), f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def function_origin(function) -> tuple[str, str | None]:
    """Whose code a traced Python function is: the user's, or a library's (tf.data and Keras
    wrap their own plumbing in functions that are traced anew for every pipeline and fit)."""
    import inspect

    try:
        function = inspect.unwrap(getattr(function, "__func__", function))
        function = getattr(function, "func", function)  # functools.partial
        code = getattr(function, "__code__", None) or getattr(type(function).__call__, "__code__", None)
        return _code_origin(code) if code is not None else ("library", None)
    except Exception:
        return "library", None


# Traces per tf.function instance, keyed by its captures container: one per instance, shared by
# its traces (its function cache has __slots__ and no weak references).
_traces_per_instance: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _count_trace(tracing_options) -> int:
    """This trace's number for its tf.function instance (1: its first trace)."""
    try:
        key = tracing_options.function_captures
        count = _traces_per_instance.get(key, 0) + 1
        _traces_per_instance[key] = count
        return count
    except TypeError:  # None, or not weak-referenceable: taken as a first trace
        return 1


def patch_tracing() -> None:
    """Count traces per tf.function (``tracing_compilation._create_concrete_function``): each
    ``trace`` event names the function, whose code it is, how many times this instance of it
    has been traced and what the trace cost in time and memory."""
    module = sys.modules.get("tensorflow.python.eager.polymorphic_function.tracing_compilation")
    original = getattr(module, "_create_concrete_function", None)
    if original is None or getattr(original, "__tensorgauge_wrapped__", None):
        return

    @functools.wraps(original)
    def traced(function_type, type_context, func_graph, tracing_options):
        start, rss = time.perf_counter(), process_rss_bytes()
        try:
            return original(function_type, type_context, func_graph, tracing_options)
        finally:
            try:
                seconds, after = time.perf_counter() - start, process_rss_bytes()
                count = _count_trace(tracing_options)
                origin, where = function_origin(tracing_options.python_function)
                channel().emit(Kind.TRACE, function=str(getattr(tracing_options, "name", "?")), origin=origin,
                               where=where, instance_trace=count, seconds=round(seconds, 6),
                               rss_delta_bytes=after - rss if after is not None and rss is not None else None)
            except Exception:
                pass

    traced.__tensorgauge_wrapped__ = original  # type: ignore[attr-defined]
    module._create_concrete_function = traced  # type: ignore[union-attr]


def patch_eager_gradients(tf) -> None:
    """Count ``GradientTape.gradient`` calls made eagerly (a tf.function only calls it while tracing)."""
    tape_class = tf.GradientTape
    original = tape_class.gradient
    if getattr(original, "__tensorgauge_wrapped__", None):
        return
    executing_eagerly = tf.executing_eagerly
    state = {"count": 0, "first": 0.0, "next": 8}

    @functools.wraps(original)
    def gradient(self, *args, **kwargs):
        if executing_eagerly():
            state["count"] += 1
            if state["count"] == 1:
                state["first"] = time.monotonic()
            elif state["count"] == state["next"]:
                state["next"] *= 2
                try:
                    channel().emit(Kind.EAGER_GRADIENTS, count=state["count"],
                                   seconds=time.monotonic() - state["first"])
                except Exception:
                    pass
        return original(self, *args, **kwargs)

    gradient.__tensorgauge_wrapped__ = original  # type: ignore[attr-defined]
    tape_class.gradient = gradient


PROBE_STEPS = 32


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
        batch = next((s.shape[0] for s in flat if s.shape.rank and s.shape[0]), None) or batch_size or 32
        filled = tf.nest.map_structure(lambda s: tf.zeros([batch if d is None else d for d in s.shape], s.dtype), spec)
        return filled, "zeros shaped by the dataset's spec" + (" (open dimensions filled with the batch size)"
                                                               if open_dims else "")
    batch = batch_size or 32

    def zeros(array):
        return tf.zeros((batch, *array.shape[1:]), tf.as_dtype(array.dtype))

    arrays = (tf.nest.map_structure(zeros, x), tf.nest.map_structure(zeros, y)) if y is not None else \
        tf.nest.map_structure(zeros, x)
    return arrays, "zeros shaped by the arrays"


def compute_probe(model, fit_input) -> None:
    """Compute-only step time: the train function on one repeated batch, no input work.

    Every variable the steps touch (model, optimizer, metrics) is copied before
    and restored after, so the job's results do not change.
    """
    try:
        import tensorflow as tf

        began = time.monotonic()
        x, y, batch_size = fit_input
        variables = {id(v): v for v in [*model.variables, *getattr(model.optimizer, "variables", []),
                                        *getattr(model, "metrics_variables", [])]}.values()
        saved = [(v, v.numpy()) for v in variables]
        batch, source = _batch_like(x, y, batch_size)
        shapes = [[int(d) if d is not None else -1 for d in t.shape] for t in tf.nest.flatten(batch)]
        iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
        times = []
        try:
            for _ in range(PROBE_STEPS):
                start = time.monotonic()
                logs = model.train_function(iterator)
                tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, logs)  # wait for it
                times.append(time.monotonic() - start)
        finally:
            for variable, value in saved:
                variable.assign(value)
        channel().emit(Kind.COMPUTE_PROBE, step_seconds=times[2:], total_seconds=time.monotonic() - began,
                       shapes=shapes, source=source)
    except Exception as exc:
        channel().emit(Kind.COMPUTE_PROBE, error=f"{type(exc).__name__}: {exc}")


class ProfilerWindow:
    """Profiles WINDOW_STEPS training steps once per process (see the module doc)."""

    done = False

    def __init__(self):
        self.active = False
        self.probed = False
        self.start_seconds = 0.0
        self.logdir: str | None = None
        self.step_starts: list[float] = []
        self.seen = 0

    def on_step_begin(self) -> None:
        if ProfilerWindow.done:
            return
        self.seen += 1
        now = time.monotonic()
        if not self.active and self.seen == WINDOW_START + 1:
            self._start()
        if self.active:
            self.step_starts.append(now)
            if len(self.step_starts) > WINDOW_STEPS:
                self.finish()

    def _start(self) -> None:
        try:
            import tensorflow as tf

            began = time.monotonic()
            self.logdir = tempfile.mkdtemp(prefix="tensorgauge-profile-")
            tf.profiler.experimental.start(self.logdir)
            self.start_seconds = time.monotonic() - began
            self.active = True
        except Exception as exc:
            ProfilerWindow.done = True
            channel().emit(Kind.INPUT_PROBE, error=f"{type(exc).__name__}: {exc}")

    def finish(self) -> None:
        """Stop the profiler (at the window's end, or when fit ends first) and report."""
        if not self.active:
            return
        self.active = False
        ProfilerWindow.done = True
        try:
            import tensorflow as tf

            began = time.monotonic()
            tf.profiler.experimental.stop()
            steps = [b - a for a, b in zip(self.step_starts, self.step_starts[1:])]
            waits, functions, copies, totals = self._trace_seconds(len(steps))
            channel().emit(Kind.INPUT_PROBE, step_seconds=steps, get_next_seconds=waits, function_seconds=functions,
                           copies=len(copies), copy_seconds=sum(copies), **totals,
                           start_seconds=self.start_seconds, stop_seconds=time.monotonic() - began)
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
        others) and ``input_work_seconds`` (tf.data's root iterator producing elements)."""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        paths = glob.glob(os.path.join(self.logdir or "", "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(paths[0], "rb") as f:
            space.ParseFromString(f.read())
        waits: list[tuple[int, float]] = []
        functions: list[tuple[int, float]] = []
        copies: list[float] = []
        totals = {"collective_seconds": 0.0, "input_work_seconds": 0.0}
        for plane in space.planes:
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            gpu = plane.name.startswith("/device:GPU:")
            for line in plane.lines:
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


class _WindowProbe(FitListener):
    """The profiler window over the first training steps, then the compute-only probe."""

    def __init__(self, fit_input):
        self.window, self.fit_input = ProfilerWindow(), fit_input

    def on_train_batch_begin(self, model, epoch: int) -> None:
        self.window.on_step_begin()

    def on_train_end(self, model) -> None:
        probe = self.window.active or (self.window.step_starts and not self.window.probed)
        self.window.finish()
        if probe:
            self.window.probed = True
            compute_probe(model, self.fit_input)


@on_fit
def _diagnose_listener(call: FitCall) -> FitListener | None:
    if call.fit_input is None:
        return None
    send_fit_config(call.model, call.args, call.kwargs)
    return _WindowProbe(call.fit_input) if enabled() else None


@on_tensorflow
def _patch(tf) -> None:
    patch_tracing()
    patch_eager_gradients(tf)
