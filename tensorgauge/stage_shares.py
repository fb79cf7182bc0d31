"""Each stage's own cost from the prefixes of a tf.data pipeline timed in the job
(:mod:`tensorgauge.hook.stage_costs`): its prefix's seconds per batch less the prefix's before it
(never below zero), its share of the stages' sum, and the cores it kept busy. Read by the analysis
(:mod:`tensorgauge.analyse.input_stages`) and by ``--try-fixes``, which times the costliest stage's fix."""

from __future__ import annotations

from tensorgauge.hook.protocol import StageTiming

# A Python stage's hottest lines as py-spy sampled them (hook.hot_lines): carried into its row as they are.
HOT_KEYS = ("hot_lines", "hot_samples", "sampling_cpu_seconds", "sampling_seconds", "hot_lines_why")

def own_costs(stages: list[StageTiming]) -> list[dict]:
    """Each stage's row: its own seconds per batch, share of their sum, cores (None where not timed)."""
    rows, before, cpu_before = [], 0.0, 0.0
    for stage in stages:
        prefix = stage.get("prefix_seconds_per_batch")
        row: dict = {"stage": stage.get("stage"), "function": stage.get("function"), "location": stage.get("location"),
                     "seconds_per_batch": None, "share": None, "cores": None}
        if "workers" in stage:  # a DataLoader's stage: its num_workers
            row["workers"] = stage["workers"]
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
