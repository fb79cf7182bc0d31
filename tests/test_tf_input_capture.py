"""The input A/B's compute-only batch is one the fit produced: a model that rejects a made-up batch
(strings looked up with no OOV slot), and tf_keras, whose variables' ``.value`` is a method, get a
measured verdict; the trained weights are those of the same fit without the tool."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook.protocol import error_text, one_line
from tensorgauge.store import Store

JOBS = Path(__file__).parent / "jobs"


def test_an_error_is_one_line_with_tensorflows_cause():
    trace = ("Graph execution error:\n\nDetected at node model/string_lookup/Assert defined at (most recent call "
             "last):\n  File \"train.py\", line 3\n\nfound OOV values [\"\" \"\"] in the input\n\t [[{{node Assert}}]]")
    assert one_line(trace) == 'found OOV values ["" ""] in the input'
    assert error_text(ValueError("a\nb")) == "ValueError: a"
    assert len(error_text(ValueError("x" * 5000))) <= 300 and error_text(KeyError()) == "KeyError"


@needs_tf
@pytest.mark.tf
@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_the_ab_trains_on_the_fits_own_batches_and_leaves_the_weights_as_a_bare_run(store_path, tg_cmd, tmp_path, legacy):
    if legacy:
        pytest.importorskip("tf_keras", reason="tf_keras is not installed")
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1" if legacy else "0"}
    bare = subprocess.run([sys.executable, str(JOBS / "lookup_fit.py"), str(tmp_path / "bare.json")],
                          capture_output=True, text=True, env=env)
    assert bare.returncode == 0, bare.stderr[-2000:]
    tool = subprocess.run([*tg_cmd, "run", "-q", "--diagnose", "--", sys.executable, str(JOBS / "lookup_fit.py"),
                           str(tmp_path / "tool.json")], capture_output=True, text=True, env=env)
    assert tool.returncode == 0, tool.stderr[-2000:]
    bare_out, tool_out = (json.loads((tmp_path / name).read_text()) for name in ("bare.json", "tool.json"))
    assert tool_out["keras"].startswith("tf_keras") == legacy
    assert tool_out["weights"] == bare_out["weights"]  # the A/B's steps left nothing behind
    split = RunReport.load(Store.open(store_path), "last").input_split
    assert split["measured"], split  # no "A/B failed"
    assert "the fit's own next batches, pulled ahead" in split["measured_by"]  # its own steps: nothing undone
