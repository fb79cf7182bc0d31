"""Which stage of a fit's tf.data pipeline its input cost is spent in, and the fix fitted to that stage.

Pure: from the ``input_stages`` event (:mod:`tensorgauge.hook.stage_costs`). Each stage's own cost
per batch is its prefix's less the prefix before it (never below zero), plus its own part of starting
a new iterator spread over the batches one iterator yields (:mod:`tensorgauge.stage_shares`); its share
is that of the stages' sum, and the cores it kept busy its prefix's CPU less the one before, over its
own cost.
In the JSON as ``input_split.stages`` (or ``input_split.stages_why`` where none was timed).
"""

from __future__ import annotations

import math

from tensorgauge.hook.protocol import InputStages, StageTiming, one_line
from tensorgauge.model import Event, payloads
from tensorgauge.stage_shares import batches_per_start, costliest, own_costs, starts_every_epoch
from tensorgauge.units import format_bytes

__all__ = ["STAGE_KEYS", "costliest", "own_costs", "stage_fix", "stage_rows", "stage_table_rows"]

STAGE_KEYS = ("stage", "function", "location", "seconds_per_batch", "share", "cores")
# A Python stage's hottest lines, where they were sampled (hook.hot_lines): carried into its row as they are.


def stage_rows(events: list[Event], compute_only_step_seconds: float | None = None,
               steps_per_epoch: int | None = None, fit_steps: int | None = None) -> dict:
    """``{"stages": [...], "stages_cost_seconds", ...}`` from the last ``input_stages`` event, or
    ``{"stages_why": str}`` where it timed none; ``{}`` without one. ``steps_per_epoch``, ``fit_steps``: the
    fit's, for a pipeline whose length is unknown or infinite (see :func:`batches_per_start`)."""
    found = payloads(events, InputStages)
    if not found:
        return {}
    data = found[-1]
    if data.get("skipped") or data.get("error"):
        why = data.get("skipped") or f"timing the stages failed: {one_line(str(data.get('error')))}"
        return {"stages_why": why}
    stages = data.get("stages") or []
    per_start = batches_per_start(stages, steps_per_epoch, fit_steps)
    rows = own_costs(stages, per_start)
    if not any(r["seconds_per_batch"] is not None for r in rows):
        return {"stages_why": data.get("untimed") or "no stage of the pipeline yielded a batch"}
    per_epoch = per_start if starts_every_epoch(stages) else None  # a start paid once a fit needs no epoch advice
    for row, stage in zip(rows, stages):
        row["fix"] = stage_fix(stage, row, compute_only_step_seconds, per_epoch) if row["seconds_per_batch"] else None
    out: dict = {"stages": rows, "stages_cost_seconds": data.get("cost_seconds"),
                 "stages_allowance_seconds": data.get("allowance_seconds"), "stages_batches_per_start": per_start}
    if data.get("untimed"):
        out["stages_untimed"] = data["untimed"]
    if data.get("measured_by"):
        out["stages_measured_by"] = data["measured_by"]
    return out


def _named(stage: StageTiming) -> str:
    function, location = stage.get("function"), stage.get("location")
    return f"{function} ({location})" if function and location else function or "its function"


def stage_fix(stage: StageTiming, row: dict, compute_only_step_seconds: float | None,
              per_start: int | None = None) -> str:
    """The change fitted to this stage: what it is (Python, a reader, a serial map, a deterministic stage
    before the shuffle) says what would make it cheaper. A stage whose cost comes mostly as an iterator
    starts, every epoch (``per_start``: the batches of one, None where it starts once a fit), is paid once
    an epoch: one iterator kept across epochs pays it once."""
    name = str(stage.get("stage") or "")
    start = float(row.get("start_seconds") or 0.0)
    if per_start and row.get("seconds_per_batch") and start / per_start > row["seconds_per_batch"] / 2:
        lead = (f"most of its cost, {start * 1000:.0f} ms an epoch, comes as each epoch starts a new iterator (its "
                f"function made ready, its buffers filled), spread here over the epoch's {per_start} batches")
        cache = _cache_text(stage)
        return (f"{lead}: {cache} (a cache skips its start too)" if cache else
                f"{lead}: keep one iterator across epochs (dataset.repeat() and fit(steps_per_epoch=N)), or fewer, "
                "longer epochs")
    if "workers" in stage:
        return loader_fix(stage)
    if name == "from_generator":
        return (f"the generator {_named(stage)} makes every element in Python on one thread: read the data with "
                "from_tensor_slices or TFRecord files, or interleave several generators "
                "(num_parallel_calls=tf.data.AUTOTUNE), or a keras.utils.PyDataset with workers=N")
    if name == "PyDataset.__getitem__":
        return (f"{_named(stage)} makes every batch in Python, in the fit's input thread: give the PyDataset "
                "workers=N with use_multiprocessing=True (threads share the GIL), or make each batch with "
                "whole-array numpy operations instead of a loop over its rows")
    advice = []
    if stage.get("python"):
        advice.append(f"vectorise {_named(stage)} with TensorFlow ops (or move it into the model): it runs Python "
                      "for every element, holding the GIL, so parallel calls help little")
    elif stage.get("reader"):
        advice.append("read the files in parallel: interleave over them with num_parallel_calls=tf.data.AUTOTUNE")
    elif not stage.get("parallel") and name in ("Map", "Interleave", "FlatMap", "Filter"):
        need = _cores_needed(row, compute_only_step_seconds)
        verb = "map" if name != "Interleave" else "interleave"
        advice.append(f"{verb} with num_parallel_calls=tf.data.AUTOTUNE: it runs on one thread now"
                      + (f" (about {need} cores would keep up with the {compute_only_step_seconds * 1000:.1f} ms "
                         "compute-only step)" if need and compute_only_step_seconds else ""))
    elif "Batch" in name:
        advice.append("batch first and map on whole batches (vectorised), or a smaller element to copy")
    cache = _cache_text(stage)
    if cache:
        advice.append(cache)
    if not advice:
        advice.append("do less work in it, or do it once offline and store the result")
    return "; ".join(advice)


def loader_fix(stage: StageTiming) -> str:
    """A PyTorch ``DataLoader``'s stage (its dataset's or its collate's): ``num_workers``, naming the function,
    and what makes that function cheaper."""
    workers, collate = stage.get("workers") or 0, "collate" in str(stage.get("stage"))
    named = "default collate" if stage.get("stage") == "default collate" else _named(stage)
    if workers:
        head = (f"{named} is where the DataLoader's {workers} worker{'s' * (workers > 1)} spend their time, and they "
                "do not keep up with the steps: raise num_workers (up to the cores the steps leave free)")
    else:
        head = (f"{named} runs in the training process between steps (num_workers=0): give the DataLoader "
                "num_workers=N (with persistent_workers=True) so worker processes make the batches while the steps "
                "compute")
    if stage.get("stage") == "default collate":
        tail = "and return one tensor per field from the dataset, not many small tensors or Python objects to collate"
    elif collate:
        tail = "and vectorise it: build the batch with whole-tensor operations, not a loop over its samples"
    else:
        tail = ("and make each sample cheaper (decode or tokenise once, offline), or give the dataset __getitems__ to "
                "make a batch at once")
    return f"{head}; {tail}"


def _cores_needed(row: dict, compute_only: float | None) -> int | None:
    """Cores at which the stage's work per batch fits in the compute-only step."""
    own, cores = row.get("seconds_per_batch"), row.get("cores") or 1.0
    if not own or not compute_only or compute_only <= 0:
        return None
    return max(1, math.ceil(own * max(cores, 1.0) / compute_only))


def _cache_text(stage: StageTiming) -> str | None:
    """``cache()`` after a deterministic stage before the shuffle, with what it would hold in memory."""
    elements, size = stage.get("cardinality"), stage.get("element_bytes")
    if stage.get("random") or not stage.get("before_shuffle") or elements is None or elements <= 0:
        return None
    caveat = " (it calls Python: make sure it is deterministic)" if stage.get("python") else ""
    held = f", holding about {format_bytes(elements * size)} ({elements} elements)" if size else ""
    return f"add .cache() after it, before the shuffle{held}, so epochs after the first skip it{caveat}"


def hot_stage(split: dict | None) -> dict | None:
    """The stage row whose hottest lines were sampled, or that says why not (renderers' one reading)."""
    return next((r for r in stage_table_rows(split) if r.get("hot_lines") or r.get("hot_lines_why")), None)


def stage_table_rows(split: dict | None) -> list[dict]:
    """The stage rows of an ``input_split`` that has them (renderers' one reading)."""
    return list((split or {}).get("stages") or [])
