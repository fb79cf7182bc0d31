"""Each stage's own cost from the prefixes of a tf.data pipeline timed in the job
(:mod:`tensorgauge.hook.stage_costs`): its prefix's seconds per batch less the prefix's before it
(never below zero), plus its share of what starting a new iterator costs (a map's function made
ready, a buffer filled) spread over the batches one iterator yields; its share of the stages' sum,
and the cores it kept busy. Read by the analysis (:mod:`tensorgauge.analyse.input_stages`) and by
``--try-fixes``, which times the costliest stage's fix."""

from __future__ import annotations

from tensorgauge.hook.protocol import StageTiming

# A Python stage's hottest lines as py-spy sampled them (hook.hot_lines): carried into its row as they are.
HOT_KEYS = ("hot_lines", "hot_samples", "sampling_cpu_seconds", "sampling_seconds", "hot_lines_why")


def batches_per_start(stages: list[StageTiming], steps_per_epoch: int | None = None,
                      fit_steps: int | None = None) -> int | None:
    """The batches one iterator of the pipeline yields: a new one starts every epoch of a finite pipeline (its
    last stage's cardinality in batches), once a fit of an infinite one (``fit_steps``), every epoch where the
    length is unknown (``steps_per_epoch``); None where that cannot be told."""
    last = _last_sized(stages)
    if last is None:
        return None
    cardinality = int(last["cardinality"])  # type: ignore[arg-type]
    if cardinality > 0:
        return max(1, -(-cardinality // int(last.get("elements_per_batch") or 1)))
    return fit_steps if cardinality == -1 else steps_per_epoch


def starts_every_epoch(stages: list[StageTiming]) -> bool:
    """Whether fit starts a new iterator of the pipeline every epoch: a pipeline that ends (an infinite one,
    with ``steps_per_epoch``, keeps one iterator for the whole fit)."""
    last = _last_sized(stages)
    return last is not None and last.get("cardinality") != -1


def _last_sized(stages: list[StageTiming]) -> StageTiming | None:
    known = [s for s in stages if s.get("cardinality") is not None and s.get("prefix_seconds_per_batch") is not None]
    return known[-1] if known else None


def _start_costs(stages: list[StageTiming], steady: list[float | None]) -> list[float]:
    """Each stage's own seconds of starting a new iterator: its prefix's first pull beyond one batch's
    pull, less the prefixes' before it. What a shuffle's buffer fill adds is the work of the stages before
    the shuffle, pulled through them to fill it: it goes to them, by their own cost a batch."""
    own = [0.0] * len(stages)
    before = 0.0
    for i, stage in enumerate(stages):
        first, prefix = stage.get("first_pull_seconds"), stage.get("prefix_seconds_per_batch")
        if first is None or prefix is None:
            continue
        start = max(0.0, float(first) - float(prefix))
        added = max(0.0, start - before)
        before = max(before, start)
        filled = i > 0 and stages[i - 1].get("before_shuffle") and not stage.get("before_shuffle")
        weights = [w or 0.0 for w in steady[:i]]
        if filled and sum(weights) > 0:
            for j, w in enumerate(weights):
                own[j] += added * w / sum(weights)
        else:
            own[i] += added
    return own


def own_costs(stages: list[StageTiming], per_start: int | None = None) -> list[dict]:
    """Each stage's row: its own seconds per batch (``per_start``: the batches one iterator yields, over which
    its start-up is spread; None: start-up left out, see :func:`batches_per_start`), the start-up itself
    (``start_seconds``), share of their sum, cores (None where not timed)."""
    rows, before, cpu_before = [], 0.0, 0.0
    steady: list[float | None] = []
    for stage in stages:
        prefix = stage.get("prefix_seconds_per_batch")
        row: dict = {"stage": stage.get("stage"), "function": stage.get("function"), "location": stage.get("location"),
                     "seconds_per_batch": None, "share": None, "cores": None}
        if "workers" in stage:  # a DataLoader's stage: its num_workers
            row["workers"] = stage["workers"]
        own = None
        if prefix is not None:
            own = max(0.0, prefix - before)
            cpu = prefix * float(stage.get("cores") or 0.0)
            row["cores"] = round(max(0.0, cpu - cpu_before) / own, 2) if own > 0 else 0.0
            before, cpu_before = max(before, prefix), max(cpu_before, cpu)
        steady.append(own)
        row.update({k: stage[k] for k in HOT_KEYS if k in stage})  # type: ignore[literal-required]
        rows.append(row)
    for row, own, start in zip(rows, steady, _start_costs(stages, steady)):
        if own is None:
            continue
        row["start_seconds"] = round(start, 4)
        row["seconds_per_batch"] = round(own + (start / per_start if per_start else 0.0), 7)
    total = sum(r["seconds_per_batch"] or 0.0 for r in rows)
    for row in rows:
        if row["seconds_per_batch"] is not None and total > 0:
            row["share"] = round(row["seconds_per_batch"] / total, 4)
    return rows


def costliest(rows: list[dict]) -> dict | None:
    """The stage with the largest share (None: none timed)."""
    timed = [r for r in rows if r.get("share") is not None]
    return max(timed, key=lambda r: r["share"]) if timed else None
