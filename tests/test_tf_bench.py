"""bench --quick twice, the second restricted to one CPU with TF_ENABLE_ONEDNN_OPTS=0:
compare names both causes first and quantifies each affected benchmark."""

import json
import os
import subprocess

import pytest
from conftest import needs_tf

pytestmark = [needs_tf, pytest.mark.tf]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to take one away")
def test_bench_twice_then_compare_names_cpus_and_onednn(store_path, tg_cmd, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    env["TMPDIR"] = str(tmp_path / "tmp")  # to see what the suite leaves behind
    os.mkdir(env["TMPDIR"])
    first = subprocess.run([*tg_cmd, "bench", "--quick", "-o", str(a)], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    assert [p for p in os.listdir(env["TMPDIR"]) if p.startswith("tensorgauge-bench-")] == []  # removed
    assert "tensorgauge bench: numpy matmul 1000" in first.stderr  # progress is shown
    restricted = {**env, "TF_ENABLE_ONEDNN_OPTS": "0"}
    second = subprocess.run(["taskset", "-c", "0", *tg_cmd, "bench", "--quick", "-o", str(b)], env=restricted,
                            capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    out = subprocess.run([*tg_cmd, "compare", str(a), str(b), "--json"], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert [e["cause"] for e in doc["explanations"][:2]] == ["cpus", "onednn"]
    cpus = doc["explanations"][0]
    assert cpus["a"] == 2.0 and cpus["b"] == 1.0
    slowdowns = {r["name"]: r["slowdown"] for r in cpus["affected"]}
    # One core instead of two: the kernels that split over cores slow, and compare puts them down to the CPUs.
    # How much is the machine's (1.17x to over 1.5x for the largest on a loaded 2-core VM): not asserted here.
    assert slowdowns
    results = {r["name"]: r for r in doc["results"]}
    assert {"numpy matmul 1000", "numpy matmul 2000", "tf matmul 1000"} <= results.keys()  # each quantified
    assert all(f"{name} " in cpus["text"] for name in slowdowns)  # every affected benchmark, with its figure
    text = subprocess.run([*tg_cmd, "compare", str(a), str(b)], capture_output=True, text=True, check=True).stdout
    assert "Why, most likely first" in text and " 1. CPUs allowed: 2.0 -> 1.0" in text
