"""Budgets on real TensorFlow jobs: the acceptance figures of the budget feature."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf]
JOBS = Path(__file__).parent / "jobs"
PY = sys.executable


def tg(tg_cmd, *args, env=None):
    return subprocess.run([*tg_cmd, *args], capture_output=True, text=True, env=env, timeout=300)


def test_memory_budget_stops_gracefully_and_training_resumes(store_path, tg_cmd, tmp_path):
    budget = int(psutil.virtual_memory().total * 0.10)
    checkpoint = tmp_path / "ckpt"  # the user's own folder, with a file of theirs in it
    checkpoint.mkdir()
    (checkpoint / "my_best.weights.h5").write_text("mine")
    first = tg(tg_cmd, "run", "-q", "--max-memory", "10%", "--checkpoint", str(checkpoint), "--",
               PY, str(JOBS / "budget_grow.py"), str(tmp_path / "first.json"))
    assert first.returncode == 75, first.stderr[-2000:]
    assert "run the same command again to resume" in first.stderr
    store = Store.open(store_path)
    report = RunReport.load(store, "last")
    b = report.record.budget
    assert report.memory["end_cause"] == "budget" and report.memory["post_mortem"]["epoch"] is not None
    own = checkpoint / "tensorgauge-resume"  # the tool writes only into a folder of its own
    assert b["stopped"] and b["graceful"] and b["checkpoint"] == str(own)
    assert b["max_memory_bytes"] == pytest.approx(budget, rel=0.001)
    # What the budget counts is what the kernel charges (in a cgroup, its working set: the RSS of TensorFlow's
    # mapped libraries that another process read first is not the job's), held within 5% of the budget.
    assert b["peak_bytes"] <= budget * 1.05
    assert sorted(p.name for p in checkpoint.iterdir()) == ["my_best.weights.h5", "tensorgauge-resume"]
    assert sorted(p.name for p in own.iterdir()) == ["latest.weights.h5", "tensorgauge-resume.json",
                                                     "training_metadata.json"]
    ran = json.loads((tmp_path / "first.json").read_text())
    # The stop came as this step began; Keras still trained it, and the checkpoint was saved again with it in.
    stopped_in, stopped_at = ran["finished"][-1]
    assert ran["finished"] == ran["steps"]  # each batch that began finished
    assert stopped_in >= 1  # 8 MiB a batch reaches the soft line after ~200 batches
    finding = next(f for f in report.findings if f.id == "memory_budget")
    assert finding.severity == "high" and "Resume by running the same command again" in finding.fix
    assert any(f.id == "memory_growth" for f in report.findings)
    show = tg(tg_cmd, "show", "last")
    assert "Stopped by the memory budget" in show.stdout and "memory_budget" in show.stdout

    # The same command again (the leak fixed) resumes after the last batch the stopped run finished: with
    # the batches before the stop, the job's own callback counts what an unstopped run trains, 5 epochs of
    # 100 batches, none twice.
    second = tg(tg_cmd, "run", "-q", "--max-memory", "10%", "--checkpoint", str(checkpoint), "--",
                PY, str(JOBS / "budget_grow.py"), str(tmp_path / "second.json"), env={**os.environ, "RESUME": "1"})
    assert second.returncode == 0, second.stderr[-2000:]
    resumed = json.loads((tmp_path / "second.json").read_text())["finished"]
    assert len(ran["finished"]) + len(resumed) == 5 * 100
    epoch, step = (stopped_in, stopped_at + 1) if stopped_at < 99 else (stopped_in + 1, 0)  # where the resume begins
    left = [[epoch, b] for b in range(100 - step)] if step else []
    assert resumed == left + [[e, b] for e in range(epoch + (1 if step else 0), 5) for b in range(100)]
    where = f"epoch {epoch + 1}, from step {step + 1} of 100" if step else f"epoch {epoch + 1}, from its start"
    assert f"resuming from the budget stop's checkpoint: {where}" in second.stderr
    record = RunReport.load(store, "last").record.budget
    assert record["stopped"] is False
    assert record["resumed"]["epoch"] == epoch and record["resumed"]["step"] == step
    # The tool's files are gone once training completed; the user's folder and file are not.
    assert sorted(p.name for p in checkpoint.iterdir()) == ["my_best.weights.h5"]
    assert (checkpoint / "my_best.weights.h5").read_text() == "mine"


def test_checkpoint_folder_of_the_users_survives_a_run_that_completes(store_path, tg_cmd, tmp_path):
    """A budget that never fires: the user's folder and files are left as they were."""
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    (checkpoint / "my_best.weights.h5").write_text("mine")
    done = tg(tg_cmd, "run", "-q", "--max-memory", "90%", "--checkpoint", str(checkpoint), "--",
              PY, str(JOBS / "budget_grow.py"), str(tmp_path / "o.json"), env={**os.environ, "RESUME": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in checkpoint.iterdir()) == ["my_best.weights.h5"]
    assert (checkpoint / "my_best.weights.h5").read_text() == "mine"


def test_cpu_budget_keeps_fit_on_one_core(store_path, tg_cmd, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to show a limit of one")
    result = tg(tg_cmd, "run", "-q", "--max-cpus", "1", "--max-gpu-memory", "1GiB", "--", PY,
                str(JOBS / "busy_fit.py"), str(tmp_path / "o.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads((tmp_path / "o.json").read_text())
    assert seen == {"affinity": 1, "intra": "1", "inter": "1"}  # TF's pools sized before TF started
    report = RunReport.load(Store.open(store_path), "last")
    fit = next(p for p in report.phases if p.kind == "fit")
    assert fit.cores_busy_mean <= 1.05
    assert any(e.startswith("affinity") for e in report.record.budget["enforced_by"])
    assert report.record.budget["stopped"] is False
    # The hook reached TensorFlow; with no GPU visible there is nothing to limit, and nothing claims it was.
    assert report.record.budget["gpu_memory_limit"] == {"gpus": 0, "error": None}
    assert not any("GPU" in e for e in report.record.budget["enforced_by"])
