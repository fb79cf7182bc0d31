"""The hottest line of a ``py_function`` that costs a fit's input, named from outside the job by py-spy:
a real job whose py_function spends almost all its time on one line, run under ``--diagnose``."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook.hot_lines import py_spy
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf,
              pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (extra [profile])")]
JOB = Path(__file__).parent / "jobs" / "hot_line_input.py"


def test_the_py_function_s_hot_line_is_named_first_with_the_sampler_s_cost(store_path, tg_cmd):
    result = subprocess.run([*tg_cmd, "run", "-q", "--diagnose", "--", sys.executable, str(JOB)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    split = RunReport.load(Store.open(store_path), "last").input_split or {}
    stage = next(s for s in split.get("stages") or [] if s.get("function") == "featurize")
    assert stage.get("hot_lines"), stage
    hot = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if line.endswith("# HOT"))
    top = stage["hot_lines"][0]
    assert top["location"] == f"hot_line_input.py:{hot}" and top["code"].startswith("checksum = sum(")
    assert top["share"] >= 0.5 and stage["hot_samples"] > 0
    assert stage["sampling_cpu_seconds"] > 0  # shown by show and the report: tests/test_hot_lines.py
