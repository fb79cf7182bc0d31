"""Evidence for the diagnosis, gathered inside the job.

Always on (each costs nothing per step):

- ``fit_config`` at each ``fit``: run_eagerly, functions_run_eagerly,
  jit_compile, steps_per_execution, batch size, epochs, whether the input is a
  ``tf.data.Dataset`` and, for one, unless --no-diagnose, its
  batches per epoch and bytes (when known), and the op types of its functions
  that are random or call Python (``dataset_random_ops``,
  ``dataset_python_ops``: can its map be cached?).
- ``trace`` each time a ``tf.function`` is traced: its name, whether its code
  is the user's or a library's, the trace number of that instance (2 and up: a
  retrace), and the trace's seconds and RSS change.
- ``eager_gradients`` when ``GradientTape.gradient`` has run eagerly (outside
  any ``tf.function``: a custom training loop in eager mode) 8, 16, 32, ...
  times; the count, and the seconds since the first such call.

The profiler window and the compute-only probe (the input split) are in
:mod:`.input_window`.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import weakref
from typing import Any

from tensorgauge.hook.channel import channel, process_rss_bytes
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_tensorflow
from tensorgauge.hook.protocol import DIAGNOSE_ENV, WINDOW_ENV, Kind, diagnosis_mode
from tensorgauge.hook.wrapping import wrap_once


def mode() -> str:
    """"auto" (the default: the input window within its cost bound), "always" (--diagnose), or ""
    (--no-diagnose)."""
    return diagnosis_mode(os.environ.get(DIAGNOSE_ENV))


def keras_backend(model) -> str:
    """The backend a model runs on: Keras 3's (``KERAS_BACKEND``), or "tensorflow" for tf_keras."""
    keras = sys.modules.get(type(model).__module__.split(".")[0])
    try:
        return str(keras.backend.backend())  # type: ignore[union-attr]
    except Exception:
        return "tensorflow"


def fit_epochs(args: list, kwargs: dict) -> int | None:
    """The ``epochs`` fit was given (positional or keyword; 1 by default), None when not an int."""
    epochs = kwargs.get("epochs", args[3] if len(args) > 3 else 1)
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else None


def send_fit_config(model, args: list, kwargs: dict) -> None:
    """What fit was asked to do, as far as it bears on speed."""
    try:
        tf = sys.modules.get("tensorflow")
        x = args[0] if args else kwargs.get("x")
        batch_size = kwargs.get("batch_size", args[2] if len(args) > 2 else None)
        is_dataset = tf is not None and isinstance(x, tf.data.Dataset)
        if is_dataset and batch_size is None:
            batch_size = _dataset_batch_size(x) or _batch_stage_size(x)
        backend = keras_backend(model)
        pipeline: dict = {}
        if is_dataset and _no_strategy(tf, model):
            ops = _ops_or_none(x)  # walked once for both
            pipeline = {**_pipeline_facts(x, ops), **(_dataset_facts(x, batch_size, ops) if _pipeline_asked() else {})}
        # TensorFlow's pools run a TensorFlow fit only (on JAX, Keras imports TensorFlow for its data adapters).
        channel().emit(Kind.FIT_CONFIG, backend=backend, run_eagerly=bool(getattr(model, "run_eagerly", False)),
                       **_runtime_facts(tf if backend == "tensorflow" else None),
                       jit_compile=str(getattr(model, "jit_compile", None)),
                       steps_per_execution=_plain_int(getattr(model, "steps_per_execution", 1)),
                       batch_size=int(batch_size) if batch_size else (None if is_dataset else 32),
                       epochs=fit_epochs(args, kwargs),
                       dataset=is_dataset, **pipeline)
    except Exception:
        pass


def send_loop_config(dataset, eager: bool, batch_size: int | None = None) -> None:
    """What a custom training loop's first step says about speed: its thread pools and, when it
    reads a ``tf.data.Dataset`` (and diagnosis is on), that pipeline's facts, as for fit; ``batch_size``:
    the loop's batch where its reader tells (a PyTorch ``DataLoader``)."""
    try:
        if dataset is not None:
            batch_size = _dataset_batch_size(dataset) or _batch_stage_size(dataset)
        inspect = dataset is not None and _pipeline_asked()
        keras = sys.modules.get("keras")
        backend = str(keras.backend.backend()) if keras is not None and hasattr(keras, "backend") else "tensorflow"
        channel().emit(Kind.FIT_CONFIG, loop=True, eager=eager, run_eagerly=False, backend=backend,
                       **_runtime_facts(sys.modules.get("tensorflow")),
                       jit_compile="None", steps_per_execution=1, epochs=None,
                       batch_size=int(batch_size) if batch_size else None, dataset=dataset is not None,
                       **(_dataset_facts(dataset, batch_size) if inspect else {}))
    except Exception:
        pass


def _runtime_facts(tf) -> dict:
    """TensorFlow's thread pools and whether tf.functions run eagerly (None without TensorFlow)."""
    threading = tf.config.threading if tf else None
    return {"intra_op_threads": threading.get_intra_op_parallelism_threads() if threading else None,
            "inter_op_threads": threading.get_inter_op_parallelism_threads() if threading else None,
            "functions_run_eagerly": bool(tf.config.functions_run_eagerly()) if tf else None}


def _pipeline_facts(dataset, ops: set[str] | None) -> dict:
    """What every run tells of fit's pipeline: whether tf.data autotunes it (its default), and the
    Python ops in its stages (``ops``: a generator, a ``py_function``), which wait on the job's own code."""
    facts: dict = {}
    try:
        facts["dataset_autotune"] = dataset.options().autotune.enabled is not False
    except Exception:
        pass
    if ops is not None:
        facts["dataset_python_ops"] = sorted(o for o in ops if o in PYTHON_OPS)
    return facts


def _ops_or_none(dataset) -> set[str] | None:
    """:func:`_pipeline_ops`, or None where tf.data's private API is not there."""
    try:
        return _pipeline_ops(dataset)
    except Exception:
        return None


def _pipeline_asked() -> bool:
    """Looking into the training pipeline was asked for: diagnosis on, or a --try-fixes window."""
    return bool(mode() or os.environ.get(WINDOW_ENV, "0") not in ("", "0"))


def steps_per_call(model) -> int | None:
    """Steps one call of fit's train function runs (``steps_per_execution``: tf_keras keeps it in a
    variable, read here eagerly); None when it cannot be read."""
    value: Any = getattr(model, "steps_per_execution", 1)
    try:
        return _plain_int(value) or int(value.numpy())
    except Exception:
        return None


def _plain_int(value) -> int | None:
    """An int setting as it is; None for a tf.Variable (tf_keras keeps steps_per_execution in one,
    and reading a variable is not the hook's to do, e.g. under a distribution strategy)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _no_strategy(tf, model) -> bool:
    """fit runs under no distribution strategy: its pipeline may be looked into (TensorFlow's
    multi-worker runtime is fragile: see docs/many-machines.md)."""
    strategy = getattr(model, "distribute_strategy", None)
    return strategy is None or not tf.distribute.has_strategy() and type(strategy).__name__.startswith("_Default")


FEATURE = "diagnose"  # the mark on its wrappers (traces, eager gradients)
RANDOM_OPS = ("Random", "Multinomial", "TruncatedNormal")  # op types containing these draw random numbers
PYTHON_OPS = ("PyFunc", "EagerPyFunc", "NumpyFunction")


def _dataset_facts(dataset, batch_size, ops: set[str] | None = None) -> dict:
    """Batches per epoch and bytes of a finite pipeline (None when unknown), and the random and
    Python op types in the functions of every stage (map, filter, ...; ``ops``: those already walked)."""
    facts: dict = {"dataset_batches": None, "dataset_bytes": None, "dataset_random_ops": None,
                   "dataset_python_ops": None, "dataset_stages": _stages(dataset)}
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
        ops = _pipeline_ops(dataset) if ops is None else ops
        facts["dataset_random_ops"] = sorted(o for o in ops if any(r in o for r in RANDOM_OPS))
        facts["dataset_python_ops"] = sorted(o for o in ops if o in PYTHON_OPS)
    except Exception:
        pass
    return facts


def _stages(dataset) -> list[str] | None:
    """The class names of the pipeline's stages, outermost first, along its first inputs (a zip's
    other branches are left out); None when tf.data's private ``_inputs()`` is not there."""
    try:
        out: list[str] = []
        stage = dataset
        while stage is not None and len(out) < 64:
            out.append(type(stage).__name__)
            inputs = stage._inputs()
            stage = inputs[0] if inputs else None
        return out
    except Exception:
        return None


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


_tracing = threading.local()


def tracing_now() -> list[tuple[object, str]]:
    """The tf.functions this thread is tracing, outermost first: (the instance's captures container,
    "user" or "library"). Read by :mod:`.train_loop` to learn which functions apply gradients."""
    stack = getattr(_tracing, "stack", None)
    if stack is None:
        stack = _tracing.stack = []
    return stack


def patch_tracing() -> None:
    """Count traces per tf.function (``tracing_compilation._create_concrete_function``): each
    ``trace`` event names the function, whose code it is, how many times this instance of it
    has been traced and what the trace cost in time and memory."""
    module = sys.modules.get("tensorflow.python.eager.polymorphic_function.tracing_compilation")
    if module is not None:
        wrap_once(module, "_create_concrete_function", _traced, by=FEATURE)


def _traced(original):
    @functools.wraps(original)
    def traced(function_type, type_context, func_graph, tracing_options):
        start, rss = time.perf_counter(), process_rss_bytes()
        origin, where = function_origin(tracing_options.python_function)
        stack = tracing_now()
        stack.append((getattr(tracing_options, "function_captures", None), origin))
        try:
            return original(function_type, type_context, func_graph, tracing_options)
        finally:
            stack.pop()
            try:
                seconds, after = time.perf_counter() - start, process_rss_bytes()
                count = _count_trace(tracing_options)
                channel().emit(Kind.TRACE, function=str(getattr(tracing_options, "name", "?")), origin=origin,
                               where=where, instance_trace=count, seconds=round(seconds, 6),
                               rss_delta_bytes=after - rss if after is not None and rss is not None else None)
            except Exception:
                pass

    return traced


def patch_eager_gradients(tf) -> None:
    """Count ``GradientTape.gradient`` calls made eagerly (a tf.function only calls it while tracing)."""
    executing_eagerly = tf.executing_eagerly
    state = {"count": 0, "first": 0.0, "next": 8}

    def counted(original):
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

        return gradient

    wrap_once(tf.GradientTape, "gradient", counted, by=FEATURE, inherited=True)


@on_fit
def _diagnose_listener(call: FitCall) -> FitListener | None:
    if call.fit_input is None:
        return None
    send_fit_config(call.model, call.args, call.kwargs)
    return None


@on_tensorflow
def _patch(tf) -> None:
    patch_tracing()
    patch_eager_gradients(tf)
