"""Which stage of a fit's tf.data pipeline its input cost is spent in, measured in the job.

As a fit whose input costs ends (or any fit's, with ``--diagnose``; or a custom training loop's over a
``tf.data`` dataset, as the job exits: :func:`measure_loop_stages`), the pipeline is walked from its
source along its first inputs (:func:`.stage_names.chain`), and each prefix that ends at a stage doing
work (the source, a map, filter, interleave, batch, a generator) is pulled on its own, from a new
iterator of that prefix: no element of the job's own iterator is consumed and no step changed. Each
prefix gets a short window: one pull untimed (the iterator starts, buffers fill), then batches of the
fit (a prefix below the batch stage is pulled in batches of the fit's batch size, a large element made a
scalar first, so every prefix pays the same Python per pull and none pays for copying large elements)
until the window's seconds are spent. The prefix's seconds per batch and the process's CPU seconds
over that wall time (the cores it kept busy) go out in one ``input_stages`` event; a stage's own cost (its prefix less the one before) is the analysis's to work out.

The copies run with tf.data's autotuning off (deleting an autotuned iterator waits for its autotuner's
thread: up to 2 s) and the pipeline's other options. The whole is bounded by the diagnosis' allowance;
what does not fit is left untimed and the event says why. A prefix that holds a ``cache()`` is not
pulled (a cache read in part warns on the job's stderr, and a new iterator's cache would fill again).
"""

from __future__ import annotations

import statistics
import time

from tensorgauge.hook import hot_lines
from tensorgauge.hook.channel import channel
from tensorgauge.hook.dataset_facts import element_bytes
from tensorgauge.hook.diagnose import _batch_stage_size, function_origin, mode
from tensorgauge.hook.protocol import INPUT_MODERATE, Kind, error_text
from tensorgauge.hook.stage_names import chain, describe, plain, python_function, timed

WINDOW_SECONDS = 0.3  # each prefix's timed pulls with --diagnose (unbounded)
MIN_WINDOW_SECONDS, MIN_PULLS, MAX_PULLS = 0.03, 3, 2000
SLICES = 3  # a prefix's pulls in this many runs, its seconds a batch the median run's (see slice_median)
COPIED_BYTES = 64 * 1024  # an element larger is made a scalar before a prefix's pulls batch it (see _batched)
MAX_FILL_SECONDS = 10.0  # a shuffle buffer whose filling would take longer is not pulled, even with --diagnose


def _copy_options(dataset):
    """The pipeline's options, with tf.data's autotuning off, and no map fusion: fused with the map that
    makes a prefix's elements scalars (:func:`_batched`), a map's work whose result is dropped could be
    optimised away."""
    import tensorflow as tf

    ours = tf.data.Options()  # set on a new object: the pipeline's own options cannot be changed in place
    ours.autotune.enabled = False
    ours.experimental_optimization.map_fusion = False
    return dataset.options().merge(ours)


def _pull(prefix, per_batch: int, seconds: float, deadline: float | None = None
          ) -> tuple[float, float, float, int] | None:
    """(seconds per batch, cores busy, seconds the first pull took, pulls timed) of ``prefix``, its elements
    in batches of ``per_batch``; None when it yields no batch after the first. ``deadline``: see
    :func:`_time_calls`."""
    start = time.perf_counter()
    iterator = iter(prefix)
    next(iterator)
    first = time.perf_counter() - start
    timing = _time_calls(iterator.__next__, seconds, deadline)
    del iterator
    return None if timing is None else (timing[0], timing[1], first, timing[2])


def _time_calls(pull, seconds: float, deadline: float | None = None) -> tuple[float, float, int] | None:
    """(seconds a call, cores busy, calls timed) of ``pull()`` called for ``seconds`` (at least
    :data:`MIN_PULLS` times, until StopIteration); None when the first call stops. ``deadline`` (a
    ``perf_counter`` time): no call begun that would end past it if as long as the longest so far, whatever
    :data:`MIN_PULLS` (one call at least): a slow prefix's pulls otherwise overran the allowance
    (0.49 s of 0.40 s on the input-bound demo, its 1 ms-a-row map pulled 64 rows at a time)."""
    began, cpu = time.perf_counter(), time.process_time()
    times: list[float] = []
    try:
        while not times or (deadline is None or time.perf_counter() + max(times) <= deadline) and (
                len(times) < MIN_PULLS or (time.perf_counter() - began < seconds and len(times) < MAX_PULLS)):
            before = time.perf_counter()
            pull()
            times.append(time.perf_counter() - before)
    except StopIteration:
        pass
    cpu = time.process_time() - cpu
    if not times:
        return None
    per_call = slice_median(times)
    return per_call, cpu / len(times) / max(per_call, 1e-9), len(times)


def slice_median(times: list[float], slices: int = SLICES) -> float:
    """Seconds per pull: the median of the mean pull in ``slices`` runs of consecutive pulls. Another
    process taking the cores for part of the window slows one run; the whole window's mean would carry
    it into this prefix's cost and, as the difference of two prefixes, into a stage's."""
    size = max(1, len(times) // slices)
    count = len(times) // size
    runs = [times[i * size:(i + 1) * size] for i in range(count)]
    runs[-1] = runs[-1] + times[count * size:]
    return statistics.median(sum(run) / len(run) for run in runs)


def _batched(prefix, per_batch: int, bytes_each: int | None):
    """``prefix`` pulled in batches of ``per_batch`` elements (as is when 1; ragged where an element's shape is
    open). An element over :data:`COPIED_BYTES` (``bytes_each``: at least, its known parts) is made a scalar first: a batch of such elements would copy
    them, a cost the job never pays where a later stage makes them small (keras' ``timeseries_dataset_from_array``
    zips the whole array into every element: batching 256 of them cost 229 ms a pull, named costliest on
    keras-io's weather LSTM). Small elements are batched as they are: a map call an element costs more than
    their copy (1.8 ms against 0.4 ms a batch of keras-io's FeatureSpace rows)."""
    import tensorflow as tf

    if per_batch <= 1:
        return prefix
    if bytes_each is not None and bytes_each > COPIED_BYTES:
        return prefix.map(lambda *_: tf.zeros((), tf.int8)).batch(per_batch)
    shapes = [s.shape for s in tf.nest.flatten(prefix.element_spec)]
    if any(not isinstance(s, tf.TensorShape) or not s.is_fully_defined() for s in shapes):
        return prefix.ragged_batch(per_batch)
    return prefix.batch(per_batch)


def _shuffle_fill(stages: list, per_element: float | None) -> float:
    """Seconds to fill the shuffle buffers among ``stages`` at ``per_element`` seconds an element."""
    total = 0.0
    for stage in stages:
        buffer = getattr(stage, "_buffer_size", None)
        if plain(stage).startswith("Shuffle") and buffer is not None and per_element is not None:
            total += max(0, int(buffer)) * per_element
    return total


def measure_stages(dataset, batch_size: int | None, allowance_seconds: float | None, name_lines: bool = True) -> None:
    """Time each prefix of ``dataset`` (see the module doc) and send one ``input_stages`` event."""
    began = time.perf_counter()
    try:
        payload = _measure(dataset, batch_size, allowance_seconds, began, name_lines)
    except Exception as exc:
        payload = {"error": error_text(exc)}
    channel().emit(Kind.INPUT_STAGES, **payload, cost_seconds=round(time.perf_counter() - began, 4),
                   allowance_seconds=allowance_seconds)


def _measure(dataset, batch_size: int | None, allowance: float | None, began: float, name_lines: bool = True) -> dict:
    stages = chain(dataset)
    batch_at = max((i for i, s in enumerate(stages) if "Batch" in plain(s) and plain(s) != "Unbatch"), default=None)
    # The batch stage found along the first inputs: the pipeline's own end may be a zip of batched branches
    # (keras-io's mixup), where a walk that stops at the zip finds none and would time the stages before the
    # batch per element, the batch per batch.
    batch = batch_size or (_batch_stage_size(stages[batch_at]) if batch_at is not None else None) or 1
    ends = [i for i, s in enumerate(stages) if timed(s, i == 0)]
    window = WINDOW_SECONDS if allowance is None else max(MIN_WINDOW_SECONDS, allowance / (2 * max(1, len(ends))))
    options = _copy_options(dataset)
    out: list[dict] = []
    untimed, last_end, per_element, last_pull_seconds = None, -1, None, 0.0
    for i in ends:
        stage = stages[i]
        facts = describe(stage)
        per_batch = batch if batch_at is None or i < batch_at else 1
        facts.update(elements_per_batch=per_batch, element_bytes=_bytes(stage), cardinality=_cardinality(stage),
                     before_shuffle=any(plain(s).startswith("Shuffle") for s in stages[i + 1:]))
        if getattr(stage, "_tensorgauge_map_call", None):  # numbered under --try-fixes (hook.fixes)
            facts["map_call"] = stage._tensorgauge_map_call
        out.append(facts)
        if untimed is not None:
            continue
        spent = time.perf_counter() - began
        fill = _shuffle_fill(stages[last_end + 1:i + 1], per_element)
        # The least a prefix costs: its first pull and one timed (the deadline stops the rest), each at least
        # the last prefix's seconds a pull (a pull is a batch above the batch stage as below it: counted in
        # elements, the demo's batch stage was thought 64 times cheaper, and its pulls overran the allowance).
        least = max(window, 2 * last_pull_seconds)
        if any(plain(s).startswith("Cache") for s in stages[:i + 1]):
            untimed = f"the pipeline caches before {facts['stage']}: a copy would fill its cache again"
        elif fill > MAX_FILL_SECONDS or (allowance is not None and spent + fill + least > allowance):
            untimed = (f"a shuffle buffer before {facts['stage']} would take about {fill:.1f} s to fill"
                       if fill > window else
                       f"the allowance ({allowance or 0:.2f} s) was spent before {facts['stage']}")
        if untimed is not None:
            continue
        pulled = _pull(_batched(stage, per_batch, _bytes(stage, at_least=True)).with_options(options), per_batch,
                       window, None if allowance is None else began + allowance)
        last_end = i
        if pulled is None:  # a source of one element (from_generator's): the stages after it are timed all the same
            continue
        seconds, cores, first, pulls = pulled
        per_element, last_pull_seconds = seconds / per_batch, seconds
        facts.update(prefix_seconds_per_batch=round(seconds, 7), cores=round(cores, 2),
                     first_pull_seconds=round(first, 4), pulls=pulls)
    top = _costliest(out)
    if name_lines and top is not None and out[top].get("python"):
        i = ends[top]
        prefix = _batched(stages[i], batch if batch_at is None or i < batch_at else 1,
                          _bytes(stages[i], at_least=True)).with_options(options)
        out[top].update(_hot_lines(python_function(stages[i]), lambda: iter(prefix).__next__, allowance, began))
    result: dict = {"stages": out, "batch_size": batch if batch_at is not None else None}
    if untimed is not None:
        result["untimed"] = untimed
    return result


def _costliest(stages: list[dict]) -> int | None:
    """The index of the timed stage whose own cost (its prefix less the costliest prefix before it) is largest."""
    best, most, before = None, 0.0, 0.0
    for i, stage in enumerate(stages):
        prefix = stage.get("prefix_seconds_per_batch")
        if prefix is None:
            continue
        if prefix - before > most:
            best, most = i, prefix - before
        before = max(before, prefix)
    return best


def _hot_lines(function, make_pull, allowance: float | None, began: float) -> dict:
    """The costliest Python stage's hottest lines (:mod:`.hot_lines`), within what the allowance leaves."""
    left = None if allowance is None else allowance - (time.perf_counter() - began)
    try:
        return hot_lines.sample(function, make_pull, left)
    except Exception as exc:
        return {"hot_lines_why": f"sampling its lines failed: {error_text(exc)}"}


def _bytes(stage, at_least: bool = False) -> int | None:
    try:
        return element_bytes(stage, at_least)
    except Exception:
        return None


def _cardinality(stage) -> int | None:
    try:
        return int(stage.cardinality())
    except Exception:
        return None


def measure_loop_stages(dataset, pairs: list[list[float]], step_seconds: float | None,
                        allowance_seconds: float) -> None:
    """As a custom training loop ends (at exit): the stages of the ``tf.data`` dataset its steps read,
    timed as a fit's are, where its ``next()`` waited :data:`INPUT_MODERATE` of a step or more beyond
    ``next()`` on one cached batch (its ``pairs``, see :mod:`.train_loop`), or always with --diagnose;
    else one ``input_stages`` event saying why not. ``dataset`` None: the job no longer holds it;
    ``allowance_seconds``: what the timing may cost, but for --diagnose."""
    unbounded = mode() == "always"
    budget = None if unbounded else allowance_seconds
    why = None
    if dataset is None:
        why = "the loop's dataset was gone when the loop ended"
    elif not unbounded:
        share = (statistics.median(p[0] for p in pairs) - statistics.median(p[1] for p in pairs)) / step_seconds \
            if pairs and step_seconds else None
        if share is None:
            why = "the loop's next() was not paired with next() on a cached batch"
        elif share < INPUT_MODERATE:
            why = f"the loop's next() waited {max(share, 0.0):.0%} of a step for input, under {INPUT_MODERATE:.0%}"
    if why is not None:
        channel().emit(Kind.INPUT_STAGES, skipped=f"{why}: no stage timed (tensorgauge run --diagnose times them)",
                       allowance_seconds=budget)
        return
    measure_stages(dataset, None, budget)


KERAS_SEQUENCES = ("PyDataset", "Sequence")  # keras.utils.PyDataset (Keras 3), keras.utils.Sequence (tf_keras)


def is_pydataset(x) -> bool:
    """``x`` is a Keras ``PyDataset`` (or tf_keras' ``Sequence``): a batch maker of the user's class."""
    return any(c.__name__ in KERAS_SEQUENCES and c.__module__.split(".")[0] in ("keras", "tf_keras")
               for c in type(x).__mro__[1:])


def measure_pydataset(data, allowance_seconds: float | None) -> None:
    """A fit fed by a Keras ``PyDataset``: its ``__getitem__`` (the user's code that makes each batch)
    named with its file:line and timed on its own as the fit ends, a short window of batches called in
    this thread (none of the fit's consumed); one ``input_stages`` event with that one stage."""
    began = time.perf_counter()
    window = WINDOW_SECONDS if allowance_seconds is None else max(MIN_WINDOW_SECONDS, allowance_seconds / 2)
    try:
        deadline = None if allowance_seconds is None else began + allowance_seconds
        stage = _getitem_stage(data, window, deadline)
        stage.update(_hot_lines(type(data).__getitem__, lambda: _getitem_pull(data), allowance_seconds, began))
        payload: dict = {"stages": [stage], "batch_size": None}
    except Exception as exc:
        payload = {"error": error_text(exc)}
    channel().emit(Kind.INPUT_STAGES, **payload, cost_seconds=round(time.perf_counter() - began, 4),
                   allowance_seconds=allowance_seconds)


def _batches(data) -> int:
    """A PyDataset's batches (0: infinite, num_batches None: any index is a batch)."""
    try:
        return int(len(data))
    except Exception:
        return 0


def _getitem_pull(data):
    """A call that makes the PyDataset's next batch (by index, from 1, wrapping at its length)."""
    batches = _batches(data)
    index = iter(range(1, MAX_PULLS + 1))
    return lambda: data[next(index) % batches if batches else next(index)]


def _getitem_stage(data, window: float, deadline: float | None) -> dict:
    getitem = type(data).__getitem__
    batches = _batches(data)
    facts: dict = {"stage": "PyDataset.__getitem__", "cls": type(data).__name__, "function": getitem.__qualname__,
                   "location": function_origin(getitem)[1], "python": True, "random": False,
                   "parallel": False, "reader": False, "before_shuffle": False, "elements_per_batch": 1,
                   "element_bytes": None, "cardinality": batches or None}
    start = time.perf_counter()
    data[0]
    first = time.perf_counter() - start
    timing = _time_calls(_getitem_pull(data), window, deadline)
    if timing is None:
        raise ValueError(f"{getitem.__qualname__} raised StopIteration")
    facts.update(prefix_seconds_per_batch=round(timing[0], 7), cores=round(timing[1], 2),
                 first_pull_seconds=round(first, 4), pulls=timing[2])
    return facts
