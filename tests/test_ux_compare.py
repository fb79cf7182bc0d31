"""``compare`` and ``check`` name the same change in the job, and say a pipeline change in words."""

import io

from rich.console import Console
from test_check import side

from tensorgauge.analyse.check import check
from tensorgauge.analyse.compare import compare
from tensorgauge.render.compare import render_compare

HEALTHY = ["_PrefetchDataset", "_BatchDataset", "_ParallelMapDataset", "_RangeDataset"]  # outermost first
SLOW = ["_PrefetchDataset", "_MapDataset", "_BatchDataset", "_RangeDataset"]  # a serial map, after batch


def test_compare_puts_a_slower_step_down_to_the_pipeline_change_check_names():
    healthy, slow = side("healthy", step=0.010, stages=HEALTHY), side("slow", step=0.096, cpu=30.0, stages=SLOW)
    comparison = compare(healthy, slow)
    named = check(healthy, slow).causes[0]
    assert named.startswith("the input pipeline changed") and comparison.job_changes[0] == named
    console = Console(file=io.StringIO(), width=400)
    render_compare(console, comparison)
    out = console.file.getvalue()
    assert f"1. The job changed: {named}." in out
    assert "noise, load, or the job itself" not in out
    assert comparison.to_dict()["job_changes"] == [named]


def test_a_pipeline_change_is_said_in_words():
    named = check(side("healthy", stages=HEALTHY), side("slow", step=0.096, stages=SLOW)).causes[0]
    assert named == ("the input pipeline changed: map now runs after batch (was before it); num_parallel_calls "
                     "removed from map (was range, then map(num_parallel_calls), then batch, then prefetch; "
                     "now range, then batch, then map, then prefetch)")
    assert "->" not in named and "<-" not in named
    added = check(side("a", stages=SLOW), side("b", stages=["_PrefetchDataset", "_CacheDataset", *SLOW[1:]])).causes[0]
    assert added.startswith("the input pipeline changed: cache added (")
