"""The pipeline's stages, analysed and shown, on hand-built events: own costs from prefix timings, the
fix fitted to each stage, the costliest stage in input_bound's evidence, the table in ``show`` and the
bar chart in the HTML report."""

import io

from rich.console import Console

from tensorgauge.analyse.input_rules import fit_input_bound
from tensorgauge.analyse.input_stages import own_costs, stage_fix, stage_rows
from tensorgauge.model import Event, Phase
from tensorgauge.render.charts import stages_chart
from tensorgauge.render.terminal import render_stages


def _stage(stage, prefix, cores=1.0, **more):
    return {"stage": stage, "prefix_seconds_per_batch": prefix, "cores": cores, "function": None, "location": None,
            "python": False, "random": False, "parallel": False, "reader": False, "before_shuffle": False,
            "elements_per_batch": 8, "element_bytes": 32, "cardinality": 4096, **more}


STAGES = [_stage("from_tensor_slices", 0.0001),
          _stage("Map", 0.0011, function="<lambda>", location="train.py:10"),
          _stage("Map (py_function)", 0.0111, function="augment", location="train.py:20", python=True),
          _stage("Map", 0.0121, function="<lambda>", location="train.py:30"),
          _stage("Batch", 0.0120, elements_per_batch=1)]


def _events(payload):
    return [Event(t=5.0, pid=1, kind="input_stages", data=payload)]


def test_own_cost_is_each_prefix_less_the_one_before_and_the_share_is_of_their_sum():
    rows = own_costs(STAGES)  # type: ignore[arg-type]
    assert [r["seconds_per_batch"] for r in rows] == [0.0001, 0.001, 0.01, 0.001, 0.0]  # a prefix faster: 0
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-3 and rows[2]["share"] > 0.8
    assert rows[2]["function"] == "augment" and rows[2]["location"] == "train.py:20"


def test_the_fix_is_fitted_to_the_stage():
    python = stage_fix(STAGES[2], {"seconds_per_batch": 0.01, "cores": 1.0}, 0.002)  # type: ignore[arg-type]
    assert "vectorise augment (train.py:20)" in python and "num_parallel_calls" not in python
    serial = stage_fix(STAGES[1], {"seconds_per_batch": 0.01, "cores": 1.0}, 0.002)  # type: ignore[arg-type]
    assert "num_parallel_calls" in serial and "about 5 cores" in serial  # 10 ms of work in a 2 ms step
    before_shuffle = _stage("Map", 0.01, before_shuffle=True)
    cache = stage_fix(before_shuffle, {"seconds_per_batch": 0.01, "cores": 1.0}, None)  # type: ignore[arg-type]
    assert ".cache() after it, before the shuffle" in cache and "128.0 KiB (4096 elements)" in cache
    random = stage_fix({**before_shuffle, "random": True}, {"seconds_per_batch": 0.01}, None)  # type: ignore[arg-type]
    assert ".cache()" not in random
    generator = stage_fix(_stage("from_generator", 0.01, function="rows", location="t.py:3", python=True),
                          {"seconds_per_batch": 0.01}, None)  # type: ignore[arg-type]
    assert "generator rows (t.py:3)" in generator
    reader = stage_fix(_stage("TFRecord", 0.01, reader=True), {"seconds_per_batch": 0.01}, None)  # type: ignore[arg-type]
    assert "interleave" in reader


def test_stage_rows_say_why_where_none_was_timed():
    assert stage_rows([]) == {}
    skipped = stage_rows(_events({"skipped": "the A/B found input costs 1% of a step, under 5%: no stage timed"}))
    assert skipped == {"stages_why": "the A/B found input costs 1% of a step, under 5%: no stage timed"}
    failed = stage_rows(_events({"error": "ValueError: bad\nmore"}))
    assert failed["stages_why"] == "timing the stages failed: ValueError: bad"
    untimed = stage_rows(_events({"stages": [{"stage": "Map"}], "untimed": "the allowance (0.40 s) was spent"}))
    assert untimed == {"stages_why": "the allowance (0.40 s) was spent"}


def _split():
    split = {"rounds": 3, "established": True, "input_share": 0.8, "step_seconds": 0.01,
             "compute_only_step_seconds": 0.002, "input_wait_seconds": 0.008, "steps": 24}
    return {**split, **stage_rows(_events({"stages": STAGES, "cost_seconds": 0.9, "allowance_seconds": None}), 0.002)}


def test_input_bound_names_the_costliest_stage_and_leads_its_fix_with_it():
    fit = Phase(name="fit", kind="fit", start=0.0, end=10.0, cores_busy_mean=1.0, steps=100)
    finding = fit_input_bound(_split(), fit, 2.0, {"dataset": True, "dataset_stages": ["_PrefetchDataset"]})
    assert finding is not None
    top = finding.evidence["costliest_stage"]
    assert top["stage"] == "Map (py_function)" and top["function"] == "augment" and top["share"] > 0.8
    assert set(top) == {"stage", "function", "location", "seconds_per_batch", "share", "cores"}
    assert finding.fix.startswith("The costliest stage is Map (py_function) augment (train.py:20)")
    without = fit_input_bound({**_split(), "stages": None}, fit, 2.0, {"dataset": True})
    assert without is not None and "costliest_stage" not in without.evidence


def test_show_prints_the_stage_table_and_the_report_draws_its_bars():
    out = io.StringIO()
    render_stages(Console(file=out, width=200, color_system=None), _split())
    text = out.getvalue()
    assert "stages (source first)" in text and "augment (train.py:20)" in text and "83%" in text
    assert "vectorise augment" in text
    out = io.StringIO()
    render_stages(Console(file=out, width=200), {"stages_why": "the A/B did not measure the input's cost"})
    assert "stages: not timed: the A/B did not measure" in out.getvalue()
    chart = stages_chart(_split()["stages"])
    assert chart is not None and chart["mark"] == "bar"
    bars = {v["stage"]: v["ms"] for v in chart["data"]["values"]}
    assert bars["2: Map (py_function) augment"] == 10.0 and len(bars) == 5
    assert stages_chart([]) is None


def test_a_prefix_costs_its_median_run_of_pulls_so_a_burst_of_contention_is_not_a_stage():
    from tensorgauge.hook.stage_costs import slice_median

    steady = [0.010] * 9
    burst = steady[:6] + [0.040] * 3  # another process took the cores for the window's last third
    assert slice_median(steady) == 0.010
    assert slice_median(burst) == 0.010  # the window's mean (0.020) would have doubled this prefix's cost
    assert slice_median([0.004]) == 0.004 and slice_median([0.002, 0.004]) == 0.003
