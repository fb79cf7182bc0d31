"""Which stage of a fit's tf.data pipeline its input cost is spent in, and the fix fitted to that stage.

Pure: from the ``input_stages`` event (:mod:`tensorgauge.hook.stage_costs`). Each stage's own cost
per batch is its prefix's less the prefix before it (never below zero); its share is that of the
stages' sum, and the cores it kept busy its prefix's CPU less the one before, over its own cost.
In the JSON as ``input_split.stages`` (or ``input_split.stages_why`` where none was timed).
"""

from __future__ import annotations

import math

from tensorgauge.hook.protocol import InputStages, StageTiming, one_line
from tensorgauge.model import Event, payloads
from tensorgauge.units import format_bytes

STAGE_KEYS = ("stage", "function", "location", "seconds_per_batch", "share", "cores")
# A Python stage's hottest lines, where they were sampled (hook.hot_lines): carried into its row as they are.
HOT_KEYS = ("hot_lines", "hot_samples", "sampling_cpu_seconds", "sampling_seconds", "hot_lines_why")


def stage_rows(events: list[Event], compute_only_step_seconds: float | None = None) -> dict:
    """``{"stages": [...], "stages_cost_seconds", ...}`` from the last ``input_stages`` event, or
    ``{"stages_why": str}`` where it timed none; ``{}`` without one."""
    found = payloads(events, InputStages)
    if not found:
        return {}
    data = found[-1]
    if data.get("skipped") or data.get("error"):
        why = data.get("skipped") or f"timing the stages failed: {one_line(str(data.get('error')))}"
        return {"stages_why": why}
    rows = own_costs(data.get("stages") or [])
    if not any(r["seconds_per_batch"] is not None for r in rows):
        return {"stages_why": data.get("untimed") or "no stage of the pipeline yielded a batch"}
    for row, stage in zip(rows, data.get("stages") or []):
        row["fix"] = stage_fix(stage, row, compute_only_step_seconds) if row["seconds_per_batch"] else None
    out: dict = {"stages": rows, "stages_cost_seconds": data.get("cost_seconds"),
                 "stages_allowance_seconds": data.get("allowance_seconds")}
    if data.get("untimed"):
        out["stages_untimed"] = data["untimed"]
    return out


def own_costs(stages: list[StageTiming]) -> list[dict]:
    """Each stage's row: its own seconds per batch, share of their sum, cores (None where not timed)."""
    rows, before, cpu_before = [], 0.0, 0.0
    for stage in stages:
        prefix = stage.get("prefix_seconds_per_batch")
        row: dict = {"stage": stage.get("stage"), "function": stage.get("function"), "location": stage.get("location"),
                     "seconds_per_batch": None, "share": None, "cores": None}
        if prefix is not None:
            own = max(0.0, prefix - before)
            cpu = prefix * float(stage.get("cores") or 0.0)
            row["seconds_per_batch"] = round(own, 7)
            row["cores"] = round(max(0.0, cpu - cpu_before) / own, 2) if own > 0 else 0.0
            before, cpu_before = max(before, prefix), max(cpu_before, cpu)
        row.update({k: stage[k] for k in HOT_KEYS if k in stage})  # type: ignore[literal-required]
        rows.append(row)
    total = sum(r["seconds_per_batch"] or 0.0 for r in rows)
    for row in rows:
        if row["seconds_per_batch"] is not None and total > 0:
            row["share"] = round(row["seconds_per_batch"] / total, 4)
    return rows


def costliest(rows: list[dict]) -> dict | None:
    """The stage with the largest share (None: none timed)."""
    timed = [r for r in rows if r.get("share") is not None]
    return max(timed, key=lambda r: r["share"]) if timed else None


def _named(stage: StageTiming) -> str:
    function, location = stage.get("function"), stage.get("location")
    return f"{function} ({location})" if function and location else function or "its function"


def stage_fix(stage: StageTiming, row: dict, compute_only_step_seconds: float | None) -> str:
    """The change fitted to this stage: what it is (Python, a reader, a serial map, a deterministic stage
    before the shuffle) says what would make it cheaper."""
    name = str(stage.get("stage") or "")
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
