"""On a machine with an NVIDIA GPU, for real: NVML sampling at 10 a second, per-phase
GPU figures, the GPU in `show`, and the Prometheus GPU gauges. The load is PyTorch
or CuPy (NVML sees any framework), so this runs where TensorFlow is not installed.
Skipped, with the reason, on machines without a GPU; GPU logic is covered by the
fakes in test_nvml, test_sampler, test_summary and test_phases everywhere."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tensorgauge.cli import main
from tensorgauge.sources.nvml import NoGpus, open_gpus
from tensorgauge.store import Store

JOB = str(Path(__file__).parent / "jobs" / "gpu_load.py")
GIB = 1 << 30


def _gpu_names() -> list[str]:
    gpus = open_gpus()
    names = [] if isinstance(gpus, NoGpus) else gpus.names
    gpus.close()
    return names


GPUS = _gpu_names()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU (NVML finds none) on this machine"),
    pytest.mark.skipif(not any(importlib.util.find_spec(m) for m in ("torch", "cupy")),
                       reason="the GPU load needs PyTorch or CuPy"),
]


def test_nvml_samples_a_gpu_job_phase_by_phase(store_path, tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["run", "-q", "--name", "gpu", "--json", str(out), "--", sys.executable, JOB, "3"]) == 0
    doc = json.loads(out.read_text())
    assert doc["env"]["host"]["gpus"] == GPUS and doc["env"]["host"]["nvidia_driver"]
    store = Store.open(store_path)
    samples = store.samples(doc["run_id"])
    assert sum(bool(s.gpus) for s in samples) >= 0.9 * len(samples)  # every sample reads every GPU
    gaps = [b.t - a.t for a, b in zip(samples, samples[1:])]
    assert sorted(gaps)[len(gaps) // 2] < 0.13 and max(gaps) < 0.3  # NVML keeps the 0.1 s interval

    phases = {p["name"]: p for p in doc["phases"]}
    idle, busy = phases["gpu idle"], phases["gpu busy"]
    assert busy["gpu_util_mean"] >= 50 and busy["gpu_util_peak"] >= 90
    assert busy["gpu_util_mean"] >= idle["gpu_util_mean"] + 40
    assert busy["gpu_memory_peak_bytes"] - idle["gpu_memory_peak_bytes"] >= 3.5 * GIB  # the 4 GiB it holds
    (gpu, *_) = doc["summary"]["gpu"]
    assert gpu["name"] == GPUS[0] and gpu["memory_total_bytes"] > 8 * GIB
    # The job's own share (NVML per process): the 4 GiB it holds plus its CUDA context, at most the device's.
    assert 4 * GIB <= gpu["job_memory_peak_bytes"] <= gpu["memory_used_peak_bytes"]
    power = [g.power_watts for s in samples for g in s.gpus if g.index == 0 and g.power_watts is not None]
    assert power and max(power) > min(power)

    capsys.readouterr()
    assert main(["show", doc["run_id"]]) == 0
    shown = capsys.readouterr().out
    assert "GPU %" in shown and "GPU mem" in shown and GPUS[0] in shown

    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.render.charts import run_charts

    gpu_chart = run_charts(RunReport.load(store, doc["run_id"]))["gpu"]  # the report's GPU chart has the load
    assert gpu_chart and max(r["gpu_util_peak"] for r in gpu_chart["data"]["values"]) >= 90


def test_prometheus_serves_gpu_gauges(store_path):
    from test_prometheus import free_port, scraping

    port = free_port()
    with scraping(port, every_seconds=0.2) as scraped:
        assert main(["run", "-q", "--prometheus", str(port), "--", sys.executable, JOB, "3"]) == 0

    def peak(metric: str) -> float:
        values = [float(line.rsplit(" ", 1)[1]) for text in scraped for line in text.splitlines()
                  if line.startswith(metric + "{") and 'gpu="0"' in line]
        return max(values, default=-1.0)

    assert peak("tensorgauge_gpu_utilization_percent") >= 90
    assert peak("tensorgauge_gpu_memory_used_bytes") >= 4 * GIB
    assert peak("tensorgauge_gpu_job_memory_bytes") >= 4 * GIB  # the job's own processes


def test_gpu_memory_budget_is_verified_by_nvml(store_path, capsys):
    # No TensorFlow in this job: the limit cannot be applied, and NVML shows the job went over it.
    assert main(["run", "-q", "--max-gpu-memory", "2GiB", "--", sys.executable, JOB, "1"]) == 0
    budget = Store.open(store_path).run("last").budget
    assert budget["max_gpu_memory_bytes"] == 2 * GIB and budget["gpu_memory_peak_bytes"] >= 4 * GIB
    capsys.readouterr()
    assert main(["show", "last"]) == 0
    shown = capsys.readouterr().out
    assert "did not import TensorFlow" in shown and "over the budget" in shown
