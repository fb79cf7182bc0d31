"""The pipeline's stages, analysed and shown, on hand-built events: own costs from prefix timings, the
fix fitted to each stage, the costliest stage in input_bound's evidence, the table in ``show`` and the
bar chart in the HTML report."""

import io

from rich.console import Console

from tensorgauge.analyse.input_rules import fit_input_bound
from tensorgauge.analyse.input_stages import costliest, own_costs, stage_fix, stage_rows
from tensorgauge.model import Event, Phase
from tensorgauge.render.charts import stages_chart
from tensorgauge.render.terminal import render_stages
from tensorgauge.stage_shares import batches_per_start, starts_every_epoch


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


# keras-io's FeatureSpace program as timed in the job: a parallel map whose prefix pulls no slower than the batch
# before it (it runs on other threads), but whose first pull takes 0.14 s as its function is made ready.
FEATURE_SPACE = [_stage("from_tensor_slices", 0.00064, 0.99, first_pull_seconds=0.007, before_shuffle=True,
                        elements_per_batch=32, cardinality=2424),
                 _stage("Batch", 0.00066, 1.04, first_pull_seconds=0.0185, elements_per_batch=1, cardinality=76),
                 _stage("ParallelMap", 0.00047, 1.66, first_pull_seconds=0.1398, function="<lambda>",
                        location="prog.py:83", parallel=True, elements_per_batch=1, cardinality=76)]


def test_a_stage_whose_cost_comes_as_each_epoch_starts_its_iterator_is_named_with_that_fix():
    """Its start-up, spread over the epoch's batches, makes it the costliest; the fix keeps one iterator."""
    split = stage_rows(_events({"stages": FEATURE_SPACE, "cost_seconds": 0.3}), 0.0012)
    rows = split["stages"]
    assert split["stages_batches_per_start"] == 76  # the pipeline's batches: a new iterator each epoch
    # Each start-up: its first pull less one pull, less the prefix's before it; the shuffle's buffer filled by the
    # batch's prefix is the source's work.
    assert [r["start_seconds"] for r in rows] == [0.0178, 0.0, 0.1215]
    top = costliest(rows)
    assert top is not None and top["stage"] == "ParallelMap" and top["share"] > 0.6
    assert abs(top["seconds_per_batch"] - 0.1215 / 76) < 1e-6  # no steady cost of its own: all start-up
    assert "keep one iterator across epochs (dataset.repeat() and fit(steps_per_epoch=N))" in top["fix"]
    assert "122 ms an epoch" in top["fix"]
    # Without the start-ups (an older event, or an iterator that starts once a fit) the source led with 97%.
    assert costliest(own_costs(FEATURE_SPACE))["stage"] == "from_tensor_slices"  # type: ignore[arg-type,index]


def test_the_start_up_is_spread_over_an_epoch_or_a_fit_as_fit_starts_its_iterators():
    endless = [{**s, "cardinality": -1} for s in FEATURE_SPACE]
    assert batches_per_start(endless, steps_per_epoch=76, fit_steps=1520) == 1520  # one iterator a fit
    assert not starts_every_epoch(endless)
    unknown = [{**s, "cardinality": -2} for s in FEATURE_SPACE]
    assert batches_per_start(unknown, steps_per_epoch=76, fit_steps=1520) == 76 and starts_every_epoch(unknown)
    assert batches_per_start(unknown) is None
    assert batches_per_start(FEATURE_SPACE[:1]) == 76  # 2424 elements in batches of 32
    # Once a fit, the start-up weighs little and the advice is not about epochs.
    split = stage_rows(_events({"stages": endless}), 0.0012, 76, 1520)
    top = costliest(split["stages"])
    assert top is not None and top["stage"] != "ParallelMap" and "steps_per_epoch" not in (top["fix"] or "")


def test_a_shuffle_buffer_filled_through_the_stages_before_it_is_their_cost():
    """The prefix after a shuffle starts by filling its buffer: elements pulled through the stages before it."""
    stages = [_stage("from_tensor_slices", 0.001, first_pull_seconds=0.002, before_shuffle=True, cardinality=256),
              _stage("Map", 0.011, first_pull_seconds=0.012, function="encode", location="t.py:5",
                     before_shuffle=True, cardinality=256),
              _stage("Batch", 0.011, first_pull_seconds=0.652, elements_per_batch=1, cardinality=32)]
    rows = own_costs(stages, 32)  # type: ignore[arg-type]
    assert rows[2]["start_seconds"] == 0.0  # the batch stage did none of the filling
    assert rows[1]["start_seconds"] > 9 * rows[0]["start_seconds"] > 0  # the map did most: 10x the source's work
    assert costliest(rows)["stage"] == "Map"  # type: ignore[index]
    fix = stage_fix(stages[1], rows[1], None, 32)  # type: ignore[arg-type]
    assert fix.startswith("most of its cost") and ".cache() after it, before the shuffle" in fix


def test_show_gives_the_start_up_its_own_column_where_a_stage_has_one():
    out = io.StringIO()
    render_stages(Console(file=out, width=250, color_system=None),
                  stage_rows(_events({"stages": FEATURE_SPACE}), 0.0012))
    text = out.getvalue()
    assert "of it at start" in text and "spread over its 76 batches" in text
    out = io.StringIO()
    render_stages(Console(file=out, width=250, color_system=None), _split())
    assert "of it at start" not in out.getvalue()  # no start-up timed: the table as it was
