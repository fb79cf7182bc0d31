"""What held the memory and what ended the job, on real TensorFlow jobs (tests/jobs/memory_held.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_tf
from test_oom import limited_cgroup

from tensorgauge.analyse.memory_breakdown import COMPONENTS, largest
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf]
JOB = Path(__file__).parent / "jobs" / "memory_held.py"


def test_framework_oom_gets_a_post_mortem_with_exact_counts(store_path, tg_cmd, tmp_path):
    counts = tmp_path / "counts.json"
    result = subprocess.run([*tg_cmd, "run", "-q", "--json", str(tmp_path / "run.json"), "--",
                             sys.executable, str(JOB), str(counts), "oom"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "ResourceExhaustedError" in result.stderr
    doc = json.loads((tmp_path / "run.json").read_text())
    independent = json.loads(counts.read_text())
    assert doc["end_cause"] == "framework_oom"
    pm = doc["post_mortem"]
    assert pm["path"] == "fit > epoch 2" and pm["steps_done"] == 3
    assert pm["error"]["type"] == "ResourceExhaustedError"
    for breakdown in (pm["memory_breakdown"], doc["memory_breakdown"],
                      next(p for p in doc["phases"] if p["kind"] == "fit")["memory_breakdown"]):
        assert breakdown["weights_bytes"] == independent["weights"]  # sum(v.numpy().nbytes), exactly
        assert breakdown["optimizer_bytes"] == independent["optimizer"]
        assert sum(breakdown[n] or 0 for n in COMPONENTS) + breakdown["residual_bytes"] == breakdown["rss_bytes"]
        assert breakdown["residual_bytes"] > 0  # the framework's runtime is there, and shown
    # The shuffle buffer over the mapped data set (10,000 x 16 KiB) is the largest thing counted.
    assert pm["largest"] == "data_buffers_bytes" == largest(doc["memory_breakdown"])
    assert pm["memory_breakdown"]["data_buffers"][0]["op"] == "shuffle"
    assert pm["memory_breakdown"]["data_buffers_bytes"] == 10_000 * 64 * 64 * 4 + 10_000 * 4
    assert "shuffle" in pm["fix"]
    finding = next(f for f in doc["findings"] if f["id"] == "out_of_memory")
    assert "fit > epoch 2, after 3 steps" in finding["title"]
    show = subprocess.run([*tg_cmd, "show", "last"], capture_output=True, text=True)
    assert "held     at the peak:" in show.stdout and "out of memory" in show.stdout


def test_kernel_oom_kill_gets_a_post_mortem(store_path, tg_cmd, tmp_path):
    path = limited_cgroup(1600 << 20)
    if path is None:
        pytest.skip("no writable memory cgroup here (needs root and cgroup v1 or v2)")
    try:
        wrapper = f'echo $$ > {path}/cgroup.procs && exec "$@"'
        result = subprocess.run(["sh", "-c", wrapper, "sh", *tg_cmd, "run", "-q", "--", sys.executable, str(JOB),
                                 str(tmp_path / "counts.json"), "hog"], capture_output=True, text=True, timeout=300)
        assert result.returncode == 137, result.stderr[-2000:]
    finally:
        os.rmdir(path)
    report = RunReport.load(Store.open(store_path), "last")
    assert report.memory["end_cause"] == "oom_killer"
    pm = report.memory["post_mortem"]
    assert pm["path"] == "fit > epoch 2"
    # Steps reach the monitor every 0.5 s: epoch 2's may not have arrived before the kill; then the
    # count is the fit's (at least epoch 1's 157), said as such.
    assert (pm["steps_phase"] == "epoch 2" and 1 <= pm["steps_done"] <= 3) or \
        (pm["steps_phase"] == "fit" and pm["steps_done"] >= 157), pm
    assert pm["memory_breakdown"]["weights_bytes"] == json.loads((tmp_path / "counts.json").read_text())["weights"]
    assert pm["rss_bytes"] > 1000 << 20  # the peak before the kill, near the limit
    assert any(f.id == "out_of_memory" and "OOM killer" in f.title and "after at least" in f.title
               for f in report.findings)


FINDER_JOB = """
import numpy as np, keras
x = np.random.rand(4096, 64).astype("float32"); y = np.random.rand(4096, 1).astype("float32")
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(8192, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
print("the job's own fit ran")
"""


def test_find_batch_size_recommends_a_verified_batch_within_the_budget(store_path, tg_cmd, tmp_path):
    result = subprocess.run([*tg_cmd, "run", "--find-batch-size", "--max-memory", "2GiB", "--json",
                             str(tmp_path / "run.json"), "--", sys.executable, "-c", FINDER_JOB],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "the job's own fit ran" not in result.stdout  # the trials trained the model: the job ends after them
    assert "Recommended batch size" in result.stdout
    search = json.loads((tmp_path / "run.json").read_text())["batch_size_search"]
    target, recommended = search["target_bytes"], search["recommended_batch_size"]
    assert target == int(0.8 * (2 << 30)) and recommended and recommended > 32
    trials = {t["batch_size"]: t for t in search["trials"]}
    assert trials[recommended]["peak_bytes"] <= target and not trials[recommended]["error"]  # verified
    assert search["per_example_bytes"] > 0 and search["how"] == "fit's batch_size on its arrays"
    assert all(t["peak_bytes"] <= (2 << 30) for t in search["trials"])  # never past the budget


def test_find_batch_size_is_one_mode_at_a_time(tg_cmd):
    result = subprocess.run([*tg_cmd, "run", "--find-batch-size", "--try-fixes", "--", sys.executable, "-c", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "cannot be combined" in result.stderr and "Traceback" not in result.stderr
