"""``compare`` and ``check`` name the same change in the job, and say a pipeline change in words."""

import io

from rich.console import Console
from test_check import MiB, side

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


def test_an_input_share_that_moved_is_not_named_a_change_in_the_job():
    """Fewer cores make the same pipeline a larger share of the step: ``compare`` of two machines puts it
    down to them, not to the job; ``check`` still reports it, after the job's own changes."""
    a, b = side("a"), side("b", step=0.014)
    a.report.input_split = {"measured": True, "input_share": 0.20}
    b.report.input_split = {"measured": True, "input_share": 0.45}
    assert compare(a, b).job_changes == []
    assert check(a, b).causes == ["the input's share of fit's step: 20% -> 45% (measured by the A/B)"]
    wider = side("c", step=0.014, weights=8 * MiB)
    wider.report.input_split = b.report.input_split
    assert check(a, wider).causes[0].startswith("the model's weights")
    assert check(a, wider).causes[1].startswith("the input's share")
