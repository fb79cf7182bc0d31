"""--try-fixes: which fixes apply, and (with TensorFlow) their measured speedup."""

import json
import sys

import pytest

from conftest import needs_tf
from tensorgauge.cli import main
from tensorgauge.store import Store
from tensorgauge.tryfixes import applicable


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
    trials = json.loads(out.read_text())["trials"]
    assert [t["fixes"] for t in trials] == ["baseline", "no_eager"]
    assert trials[1]["speedup"] > 2.0  # 18x measured on 2 cores
    names = [r.name for r in Store.open(store_path).runs()]
    assert names == ["try-fixes: baseline", "try-fixes: no_eager"]
    assert "Best: no_eager" in capsys.readouterr().out
