"""Keras 3 on its other backends: the same script's phases and steps on TensorFlow and JAX (and
PyTorch where installed), and `run --backends` comparing them."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import jax_env, needs_jax, needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.commands.run import parse_backends
from tensorgauge.errors import TensorgaugeError
from tensorgauge.store import Store

JOB = str(Path(__file__).parent / "jobs" / "keras_backends.py")
KINDS = ["import", "fit", "epoch", "evaluate", "predict", "save", "load"]


def test_backends_are_checked_before_anything_runs():
    assert parse_backends("tensorflow, JAX,pytorch") == ["tensorflow", "jax", "torch"]
    with pytest.raises(TensorgaugeError, match="unknown Keras backend mxnet"):
        parse_backends("tensorflow,mxnet")
    with pytest.raises(TensorgaugeError, match="two backends or more"):
        parse_backends("jax,jax")


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@needs_tf
@pytest.mark.tf
@needs_jax
def test_the_same_script_on_tensorflow_and_jax_gets_every_phase_and_a_compare(store_path, tg_cmd, tmp_path):
    backends = ["tensorflow", "jax"] + (["torch"] if _installed("torch") else [])
    out = tmp_path / "backends.json"
    result = subprocess.run([*tg_cmd, "run", "-q", "--backends", ",".join(backends), "--json", str(out), "--",
                             sys.executable, JOB, str(tmp_path)], capture_output=True, text=True, env=jax_env())
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(out.read_text())
    assert [r["backend"] for r in document["runs"]] == backends
    store = Store.open(store_path)
    fit_steps = []
    for run in document["runs"]:
        report = RunReport.load(store, run["run_id"])
        assert report.record.name == f"backend: {run['backend']}"
        assert report.record.env["job"]["keras_backend"] == run["backend"]
        assert report.record.env["job"]["backend_version"]
        kinds = [p.kind for p in report.phases]
        assert all(kind in kinds for kind in KINDS), (run["backend"], kinds)
        fit = next(p for p in report.phases if p.kind == "fit")
        fit_steps.append(fit.steps)
        assert [p.steps for p in report.phases if p.kind == "evaluate" and p.name == "evaluate"] == [40]
        findings = {f.id for f in report.findings}
        assert "xla_on_cpu" not in findings or run["backend"] == "tensorflow"  # XLA is how JAX runs
        assert "eager_execution" not in findings  # jitted on JAX; eager by design on PyTorch
        # Where the weights live, named alike on every backend.
        placed = [e.data["devices"] for e in report.events if e.kind == "placement"]
        assert placed and all(set(devices) == {"CPU:0"} for devices in placed), placed
        if run["backend"] != "tensorflow":  # the input wait timed in Keras' own iterator, every step
            assert report.record.env["job"]["backend_devices"][0] == "CPU:0"
            assert report.input_split["measured"] and "Keras' data iterator" in report.input_split["measured_by"]
            # A mean over the batches, within the fit's span (not under its median step: beside another
            # process a few slow batches took a 64-step fit's mean to 0.37 ms against a 0.25 ms median).
            assert 0 < report.input_split["input_wait_seconds"] * fit.steps < fit.end - fit.start
    assert len(set(fit_steps)) == 1 and fit_steps[0] == 2 * 32  # 2048 rows after the split, 64 a batch
    comparison = document["comparisons"][0]
    top = comparison["explanations"][0]
    assert top["cause"] == "backend" and top["a"].startswith("tensorflow") and top["b"].startswith("jax")
    assert top["affected"], top  # backed by measured phase figures
    names = {r["name"] for r in comparison["results"]}
    assert {"fit first step (trace, compile)", "fit step p50", "fit CPU", "fit RSS peak"} <= names, names
    assert comparison["largest"]["kind"] == "phase" and comparison["largest"]["name"] in comparison["headline"]
    assert "Keras backend" in result.stdout + result.stderr and "They differ most in" in result.stdout


@needs_tf
@pytest.mark.tf
@needs_jax
def test_an_eager_jax_fit_is_found_and_jit_timed_back_on(store_path, tg_cmd, tmp_path):
    """One --try-fixes: its baseline is the job as it is, recorded (the finding read from it), then jit."""
    env = {**jax_env(), "KERAS_BACKEND": "jax"}
    out = tmp_path / "fixes.json"
    fixes = subprocess.run([*tg_cmd, "run", "-q", "--try-fixes", "--json", str(out), "--", sys.executable, JOB,
                            str(tmp_path), "--no-jit"], capture_output=True, text=True, env=env)
    assert fixes.returncode == 0, fixes.stderr[-3000:]
    trials = json.loads(out.read_text())["trials"]
    assert [t["fixes"] for t in trials] == ["baseline", "no_eager"]
    finding = next(f for f in RunReport.load(Store.open(store_path), trials[0]["run_id"]).findings
                   if f.id == "eager_execution")
    assert "runs eagerly on JAX (jit_compile=False)" in finding.title
    assert trials[1]["speedup"] > 2.0  # 45x measured on 2 cores: a jitted step against JAX's ops one by one
