"""--try-fixes: which fixes apply, and (with TensorFlow) their measured speedup."""

import json
import sys

import pytest
from conftest import needs_tf

from tensorgauge.cli import main
from tensorgauge.render.terminal import render_trials
from tensorgauge.store import Store
from tensorgauge.tryfixes import Trial, Trials, applicable


def test_applicable_fixes_follow_what_fit_was_given():
    assert applicable({"dataset": True}, {}, 2.0) == ["parallel_map", "prefetch", "parallel_map,prefetch"]
    assert applicable({"run_eagerly": True}, {}, 2.0) == ["no_eager"]
    assert applicable({"intra_op_threads": 1}, {}, 2.0) == ["threads"]
    assert applicable({}, {"thread_env": {"TF_NUM_INTRAOP_THREADS": "1"}}, 4.0) == ["threads"]
    assert applicable({"intra_op_threads": 2}, {}, 2.0) == []
    assert applicable({}, {}, 2.0) == []


def test_a_job_without_fit_is_a_clear_error(store_path, capsys):
    assert main(["run", "--try-fixes", "--", sys.executable, "-c", "print('no keras here')"]) == 2
    err = capsys.readouterr().err
    assert "times the job's first Keras fit, and this job ran none" in err and "Traceback" not in err


@needs_tf
@pytest.mark.tf
def test_eager_job_gets_no_eager_with_its_measured_speedup(store_path, tmp_path, capsys):
    out = tmp_path / "fixes.json"
    assert main(["run", "--try-fixes", "--json", str(out), "--", sys.executable, "-m",
                 "tensorgauge.scenarios.eager"]) == 0
    result = json.loads(out.read_text())
    trials = result["trials"]
    assert [t["fixes"] for t in trials] == ["baseline", "no_eager"]
    assert 0 < result["compute_only_step_seconds"] and trials[1]["reaches_limit"] is True
    assert trials[1]["speedup"] > 2.0  # 18x measured on 2 cores
    names = [r.name for r in Store.open(store_path).runs()]
    assert names == ["try-fixes: baseline", "try-fixes: no_eager"]
    assert "Best: no_eager" in capsys.readouterr().out


def test_render_says_when_no_fix_reaches_the_compute_only_limit():
    from rich.console import Console

    def render(*trials):
        console = Console(record=True, width=200)
        render_trials(console, Trials(list(trials), compute_only_step_seconds=0.0076))
        return console.export_text()

    base = Trial("baseline", "the job as it is", "r1", 0.088, 1.0, False)
    parallel = Trial("parallel_map", "map(...)", "r2", 0.047, 1.87, False)
    text = render(base, parallel)
    assert "Compute-only limit: 7.6 ms" in text and "Best: parallel_map, 1.87x" in text
    assert "No fix reaches the limit" in text and "vectorise" in text
    assert "No fix reaches" not in render(base, Trial("parallel_map", "map(...)", "r2", 0.008, 11.0, True))
