"""The user's own code behind the PyTorch ``DataLoader`` a custom loop's training steps read: its
dataset's ``__getitem__`` (``__iter__`` for an ``IterableDataset``) and its collate function, each
named with its file:line and timed on its own per batch.

With ``num_workers=0`` the loader makes each batch in the training thread (its fetcher's ``fetch``:
the dataset's samples, then ``collate_fn`` on them). :data:`WINDOW_BATCHES` of the loop's own batches
are timed there, the fetcher's ``fetch`` and ``collate_fn`` wrapped on that iterator alone and put back
after them (the dataset's cost: the fetch's less the collate's): no batch is made twice, no sample
consumed, and nothing runs per sample. With workers, the batches are made in other processes: as the
loop ends (at exit), where its ``next()`` waited :data:`~.protocol.INPUT_MODERATE` of its steps or
more (always with --diagnose), a short window of batches is made again in this process from the
dataset's first indices (not the sampler's: that would draw from the job's random generator), the
samples and the collate timed apart, within the diagnosis' allowance. Either way one ``input_stages``
event, as for tf.data's stages (:mod:`.stage_costs`): the dataset's stage, then the collate's, each
with the seconds a batch of the loader up to and including it.

The dataset is held weakly (a list, which cannot be, through its sampler's ``data_source``); the
collate function is held until exit.
"""

from __future__ import annotations

import time
import weakref

from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import function_origin, mode
from tensorgauge.hook.protocol import INPUT_MODERATE, Kind, error_text
from tensorgauge.hook.stage_costs import MAX_PULLS, MIN_PULLS, MIN_WINDOW_SECONDS, WINDOW_SECONDS, slice_median

WINDOW_BATCHES = 32  # the loop's own batches timed where the loader has no workers
WRAPPED_DEPTH = 4  # datasets followed through wrappers' ``.dataset`` (torch's Subset, random_split's)
ITERABLE = 1  # torch's _DatasetKind.Iterable


def _sample_function(dataset, iterable: bool) -> tuple[str, object]:
    """(the stage, the function) that makes the samples of ``dataset``."""
    kind = type(dataset)
    if iterable:
        return "IterableDataset.__iter__", getattr(kind, "__iter__", None)
    if getattr(dataset, "__getitems__", None):  # a batch of samples at once
        return "Dataset.__getitems__", getattr(kind, "__getitems__", None)
    return "Dataset.__getitem__", getattr(kind, "__getitem__", None)


def _qualname(function) -> str:
    function = getattr(function, "func", function)  # functools.partial
    return getattr(function, "__qualname__", None) or f"{type(function).__qualname__}.__call__"


def named_stages(dataset, collate, iterable: bool) -> tuple[dict, dict]:
    """The dataset's and the collate's stage: names, function and file:line. The dataset named is the first
    of the user's through torch's wrappers (a ``Subset`` of it names the user's class)."""
    named = dataset
    for _ in range(WRAPPED_DEPTH):
        inner = getattr(named, "dataset", None)
        if inner is None or function_origin(_sample_function(named, iterable)[1])[0] == "user":
            break
        named = inner
    stage, function = _sample_function(named, iterable)
    samples = {"stage": stage, "cls": type(named).__name__, "function": _qualname(function),
               "location": function_origin(function)[1]}
    if (getattr(getattr(collate, "func", collate), "__module__", None) or "").startswith("torch.utils.data"):
        joins = {"stage": "default collate", "cls": "collate", "function": "default collate", "location": None}
    else:
        joins = {"stage": "collate_fn", "cls": "collate", "function": _qualname(collate),
                 "location": function_origin(collate)[1]}
    return samples, joins


class FetchWindow:
    """One single-process iterator's fetcher, its ``fetch`` and ``collate_fn`` timed until ``batches``
    are, then put back; each batch timed goes to ``times`` as (samples seconds, collate seconds,
    samples CPU seconds, collate CPU seconds)."""

    def __init__(self, fetcher, times: list, batches: int, clock=time.perf_counter, cpu=time.process_time):
        self.fetcher, self.times, self.batches, self.clock, self.cpu = fetcher, times, batches, clock, cpu
        self.fetch, self.collate = fetcher.fetch, fetcher.collate_fn
        self.joined = (0.0, 0.0)
        fetcher.fetch, fetcher.collate_fn = self._timed_fetch, self._timed_collate

    def _timed_fetch(self, index):
        self.joined = (0.0, 0.0)
        began, cpu = self.clock(), self.cpu()
        data = self.fetch(index)  # StopIteration (the epoch's end) passes, untimed
        seconds, cpu = self.clock() - began, self.cpu() - cpu
        self.times.append((max(0.0, seconds - self.joined[0]), self.joined[0], max(0.0, cpu - self.joined[1]),
                           self.joined[1]))
        if len(self.times) >= self.batches:
            self.restore()
        return data

    def _timed_collate(self, samples):
        began, cpu = self.clock(), self.cpu()
        try:
            return self.collate(samples)
        finally:
            self.joined = (self.clock() - began, self.cpu() - cpu)

    def restore(self) -> None:
        self.fetcher.__dict__.pop("fetch", None)
        self.fetcher.collate_fn = self.collate


def remade_batches(dataset, collate, iterable: bool, batch_size: int | None, seconds: float,
                   clock=time.perf_counter, cpu=time.process_time) -> list[tuple[float, float, float, float]]:
    """Batches made again in this thread from the dataset's first samples, each timed as
    :class:`FetchWindow` times them, for ``seconds`` (at least :data:`MIN_PULLS`, the first untimed)."""
    stream = iter(dataset) if iterable else None
    size = len(dataset) if not iterable else 0
    drawn = iter(range(MAX_PULLS + 1))

    def samples():
        k = next(drawn)
        if stream is not None:
            return next(stream) if batch_size is None else [next(stream) for _ in range(batch_size)]
        if batch_size is None:
            return dataset[k % size]
        index = [(k * batch_size + j) % size for j in range(batch_size)]
        getitems = getattr(dataset, "__getitems__", None)
        return getitems(index) if getitems else [dataset[i] for i in index]

    collate(samples())  # the first: untimed (a stream starting, caches filling)
    times: list[tuple[float, float, float, float]] = []
    began = clock()
    try:
        while len(times) < MIN_PULLS or (clock() - began < seconds and len(times) < MAX_PULLS):
            t0, c0 = clock(), cpu()
            made = samples()
            t1, c1 = clock(), cpu()
            collate(made)
            times.append((t1 - t0, clock() - t1, c1 - c0, cpu() - c1))
    except StopIteration:  # a stream shorter than the window
        pass
    return times


def stage_timings(times: list, samples: dict, joins: dict) -> list[dict]:
    """The two stages with the seconds a batch of the loader up to each (the median of runs of batches:
    :func:`.stage_costs.slice_median`) and the cores each prefix kept busy."""
    own = [slice_median([t[i] for t in times]) for i in (0, 1)]
    cores = [sum(t[i + 2] for t in times) / max(1e-9, sum(t[i] for t in times)) for i in (0, 1)]
    prefix = own[0] + own[1]
    samples.update(prefix_seconds_per_batch=round(own[0], 7), cores=round(cores[0], 2), pulls=len(times))
    joins.update(prefix_seconds_per_batch=round(prefix, 7), pulls=len(times),
                 cores=round((own[0] * cores[0] + own[1] * cores[1]) / prefix, 2) if prefix > 0 else 0.0)
    return [samples, joins]


class LoaderStages:
    """The loop's DataLoader, watched from its training ``next()`` calls (once settled, a flag read)."""

    def __init__(self, clock=time.perf_counter, cpu=time.process_time):
        self.clock, self.cpu = clock, cpu
        self.watching = True  # until the loader is settled: timed, or held for the loop's end
        self.times: list = []
        self.window: FetchWindow | None = None
        self.facts: dict = {}  # the stages' names and the loader's batch, workers, samples
        self.held: tuple | None = None  # (dataset getter, collate) for a loader with workers

    def watch(self, iterator) -> None:
        """A ``next()`` of the iterator the loop's training steps read."""
        if not self.watching:
            return
        try:
            self._watch(iterator)
        except Exception:
            self.watching = False

    def _watch(self, iterator) -> None:
        if not self.facts:
            if not mode():
                self.watching = False
                return
            self.facts = _loader_facts(iterator)
        if self.facts["workers"]:
            self.held = (_dataset_ref(iterator), iterator._collate_fn)
            self.watching = False
        elif len(self.times) >= WINDOW_BATCHES:
            self.send({"measured_by": f"{len(self.times)} of the loop's own batches (num_workers=0)"})
        elif self.window is None or self.window.fetcher is not iterator._dataset_fetcher:  # a new epoch's
            if self.window is not None:
                self.window.restore()
            self.window = FetchWindow(iterator._dataset_fetcher, self.times, WINDOW_BATCHES, self.clock, self.cpu)

    def loop_ended(self, input_share: float | None, allowance_seconds: float) -> None:
        """As the loop ends: a window not yet sent goes out; a loader with workers is timed again here
        where its ``next()`` waited ``input_share`` of the steps, :data:`INPUT_MODERATE` or more."""
        if self.window is not None:
            self.window.restore()
        if self.times and self.held is None and self.watching:
            self.send({"measured_by": f"{len(self.times)} of the loop's own batches (num_workers=0)"})
        if self.held is None:
            return
        dataset, collate = self.held[0]() if self.held[0] else None, self.held[1]
        self.held = None
        unbounded = mode() == "always"
        why = ("the loop's dataset was gone when the loop ended" if dataset is None else
               None if unbounded or (input_share or 0.0) >= INPUT_MODERATE else
               f"the loop's next() waited {max(input_share or 0.0, 0.0):.0%} of its steps, under {INPUT_MODERATE:.0%}")
        budget = None if unbounded else allowance_seconds
        if why is not None:
            channel().emit(Kind.INPUT_STAGES, skipped=f"{why}: no stage timed (tensorgauge run --diagnose times them)",
                           allowance_seconds=budget)
            return
        window = WINDOW_SECONDS if budget is None else max(MIN_WINDOW_SECONDS, budget / 2)
        began = self.clock()
        try:
            self.times = remade_batches(dataset, collate, self.facts["iterable"], self.facts["batch_size"], window,
                                        self.clock, self.cpu)
        except Exception as exc:
            channel().emit(Kind.INPUT_STAGES, error=error_text(exc), allowance_seconds=budget)
            return
        self.send({"measured_by": f"{len(self.times)} batches made again in the job's process as the loop ended "
                                  f"(its {self.facts['workers']} workers make them elsewhere)",
                   "cost_seconds": round(self.clock() - began, 4), "allowance_seconds": budget})

    def send(self, more: dict) -> None:
        self.watching = False
        if not self.times:
            return
        samples, joins = ({**self.facts["common"], **facts} for facts in self.facts["named"])
        channel().emit(Kind.INPUT_STAGES, stages=stage_timings(self.times, samples, joins),
                       batch_size=self.facts["batch_size"], **{"cost_seconds": 0.0, **more})


def _loader_facts(iterator) -> dict:
    """What the stages' rows say of the loader: their names, its batch, workers, samples."""
    iterable = getattr(iterator, "_dataset_kind", 0) == ITERABLE
    batch = getattr(iterator._index_sampler, "batch_size", None) if iterator._auto_collation else None
    workers = int(iterator._num_workers or 0)
    try:
        cardinality: int | None = len(iterator._dataset)
    except Exception:
        cardinality = None
    common = {"python": True, "random": False, "parallel": workers > 0, "reader": False, "before_shuffle": False,
              "elements_per_batch": batch or 1, "element_bytes": None, "cardinality": cardinality, "workers": workers}
    return {"named": named_stages(iterator._dataset, iterator._collate_fn, iterable), "common": common,
            "iterable": iterable, "batch_size": batch if isinstance(batch, int) else None, "workers": workers}


def _dataset_ref(iterator):
    """A weak reference to the loader's dataset (a list has none: through its sampler's ``data_source``)."""
    dataset = iterator._dataset
    try:
        return weakref.ref(dataset)
    except TypeError:
        sampler = getattr(iterator._index_sampler, "sampler", iterator._index_sampler)
        if getattr(sampler, "data_source", None) is not dataset:
            return None
        holder = weakref.ref(sampler)
        return lambda: getattr(holder(), "data_source", None)


_loader = LoaderStages()
