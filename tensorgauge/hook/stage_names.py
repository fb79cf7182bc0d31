"""What each stage of a tf.data pipeline is, and whose Python function it runs.

tf.data keeps the user's function: a ``map``/``filter``/``flat_map``/``interleave`` stage holds a
``StructuredFunctionWrapper`` whose ``_func`` is the function given to it; a ``py_function`` or
``numpy_function`` inside it is registered in ``script_ops._py_funcs`` under the ``token`` attribute
of its op; ``Dataset.from_generator`` is a ``flat_map`` whose function's closures hold a
``_GeneratorState`` with the user's generator. Private but stable tf.data API; any of it missing
gives a stage without a function, never an error.
"""

from __future__ import annotations

import sys

from tensorgauge.hook.diagnose import PYTHON_OPS, RANDOM_OPS, function_origin

# Stages that pass elements through (or buffer them): their cost, if any, falls to the next stage timed.
PASS_THROUGH = ("Prefetch", "Options", "Shuffle", "Repeat", "Take", "Skip", "Shard", "Cache", "AssertCardinality",
                "MaxIntraOpParallelism", "PrivateThreadPool", "Ignore_errors", "Apply", "ModelDataset")
# Ops that call Python: diagnose's, and numpy_function(stateful=False)'s.
CALLS_PYTHON = (*PYTHON_OPS, "PyFuncStateless")
AUTOGRAPH_FILE = "__autograph_generated_file"  # the module AutoGraph writes a converted function's code to
READERS = ("TFRecord", "TextLine", "FixedLengthRecord", "ListFiles")


SOURCES = {"TensorSlice": "from_tensor_slices", "Tensor": "from_tensors", "Range": "range",
           "SparseTensorSlice": "from_sparse_tensor_slices"}


def plain(stage) -> str:
    """A stage's class named plainly: ``_ParallelMapDataset`` -> ``ParallelMap``, ``_TensorSliceDataset`` ->
    ``from_tensor_slices``."""
    name = type(stage).__name__.strip("_").removesuffix("V2").removesuffix("Dataset")
    return SOURCES.get(name, name)


def chain(dataset) -> list:
    """The pipeline's stages along their first inputs, source first (a zip's other branches left out)."""
    out: list = []
    stage = dataset
    while stage is not None and len(out) < 64:
        out.append(stage)
        inputs = stage._inputs()
        stage = inputs[0] if inputs else None
    return out[::-1]


def timed(stage, first: bool) -> bool:
    """A stage that ends a prefix of its own: the source, and every stage that does work on elements."""
    return first or not any(plain(stage).startswith(p) for p in PASS_THROUGH)


def _wrapper(stage):
    return getattr(stage, "_map_func", None) or getattr(stage, "_predicate", None)


def _graph_ops(wrapper) -> list:
    """The ops of a stage function's graph and of the functions it calls."""
    try:
        graph = wrapper.function.graph
        ops = list(graph.get_operations())
        for function in getattr(graph, "_functions", {}).values():
            ops.extend(getattr(getattr(function, "graph", None), "get_operations", lambda: [])())
        return ops
    except Exception:
        return []


def _python_function(ops) -> tuple[bool, object]:
    """(whether ``ops`` call Python, the function of the first py_function / numpy_function among them
    that is still registered: a lambda made in the stage's function may be gone)."""
    script_ops = sys.modules.get("tensorflow.python.ops.script_ops")
    registry = getattr(script_ops, "_py_funcs", None)
    calls = False
    for op in ops:
        if op.type not in CALLS_PYTHON:
            continue
        calls = True
        try:
            token = op.get_attr("token")
            function = registry.get(token.decode() if isinstance(token, bytes) else token)  # type: ignore[union-attr]
        except Exception:
            continue
        if function is not None:
            return True, getattr(function, "_func", function)
    return calls, None


def _generator(function, depth: int = 4):
    """The user's generator in the closures of ``from_generator``'s flat_map function (None: not one)."""
    todo, seen = [(function, 0)], set()
    while todo:
        item, level = todo.pop()
        if id(item) in seen or level > depth:
            continue
        seen.add(id(item))
        if type(item).__name__ == "_GeneratorState":
            return getattr(item, "_generator", None)
        for cell in getattr(item, "__closure__", None) or ():
            try:
                todo.append((cell.cell_contents, level + 1))
            except ValueError:  # an empty cell
                pass
    return None


def python_function(stage):
    """The user's Python function a stage runs for its elements (its generator, its py_function's or
    numpy_function's function); None where it runs none that is still registered."""
    wrapper = _wrapper(stage)
    if wrapper is None:
        return None
    function = getattr(wrapper, "_func", None)
    generator = _generator(function) if "from_generator" in getattr(function, "__qualname__", "") else None
    return generator if generator is not None else _python_function(_graph_ops(wrapper))[1]


def describe(stage) -> dict:
    """``{"stage", "cls", "function", "location", "python", "random", "parallel", "reader"}`` of one stage."""
    name = plain(stage)
    facts: dict = {"stage": name, "cls": type(stage).__name__, "function": None, "location": None,
                   "python": False, "random": False, "parallel": name.startswith("Parallel") or name == "MapAndBatch",
                   "reader": any(name.startswith(r) for r in READERS)}
    wrapper = _wrapper(stage)
    if wrapper is None:
        return facts
    function = getattr(wrapper, "_func", None)
    ops = _graph_ops(wrapper)
    facts["random"] = any(r in op.type for op in ops for r in RANDOM_OPS)
    generator = _generator(function) if "from_generator" in getattr(function, "__qualname__", "") else None
    calls_python, python = _python_function(ops)
    if generator is not None:
        facts.update(stage="from_generator", python=True)
        function = generator
    elif calls_python:
        facts.update(stage=f"{name} (py_function)", python=True)
        function = python or function
    if function is not None and AUTOGRAPH_FILE in (function_origin(function)[1] or ""):
        # A lambda made inside the map function, which AutoGraph converted: its code is in a generated file
        # (the input-bound demo's numpy_function lambda); the map function the user wrote is named instead.
        function = getattr(wrapper, "_func", None)
    if function is not None:
        facts["function"] = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) \
            or type(function).__name__
        facts["location"] = function_origin(function)[1]
    facts["reader"] = facts["reader"] or any(any(r in op.type for r in READERS) for op in ops)
    return facts
