"""The GPU paths for real, on Keras' PyTorch backend (no TensorFlow CUDA build needed).

Needs an NVIDIA GPU, PyTorch with CUDA, Keras 3 and tensorgauge (TensorFlow is not needed).
It records two runs of one Keras script with ``tensorgauge run``:

1. on the GPU: the weights must be on ``GPU:0``, PyTorch must see the GPU, and
   fit must keep it busy, with the job's GPU memory recorded per phase;
2. the same script under ``with keras.device("cpu")``: training on the CPU while
   PyTorch sees a GPU must be found (``gpu_unused``, ``variables_on_cpu``).

It prints each phase's GPU utilisation and the job's GPU memory, and exits 1 if a
check fails. ``--cpu`` runs the same on a machine without a GPU, to check the
script itself (the GPU checks are then expected to find no GPU).

Usage: python benchmarks/gpu_backend_check.py [--cpu] [--epochs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

JOB = '''
import sys, keras, numpy as np
on_cpu, epochs, folder = sys.argv[1] == "cpu", int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
x = rng.random((16384, 512), dtype=np.float32)
y = rng.integers(0, 10, 16384)

def main():
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(2048, activation="relu"),
                              keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=epochs, batch_size=256, validation_split=0.1, verbose=0)
    model.evaluate(x, y, batch_size=256, verbose=0)
    model.predict(x, batch_size=256, verbose=0)
    model.save(folder + "/model.keras")
    keras.models.load_model(folder + "/model.keras")

if on_cpu:
    with keras.device("cpu"):
        main()
else:
    main()
'''


def record(folder: Path, store: Path, where: str, epochs: int) -> dict:
    """Run the job under tensorgauge; its run as ``show --json`` gives it."""
    job = folder / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "KERAS_BACKEND": "torch", "TENSORGAUGE_STORE": str(store)}
    command = [sys.executable, "-m", "tensorgauge", "run", "-q", "--name", f"gpu check: {where}", "--",
               sys.executable, str(job), where, str(epochs), str(folder)]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"the {where} run failed ({result.returncode}):\n{result.stderr[-3000:]}")
    shown = subprocess.run([sys.executable, "-m", "tensorgauge", "show", "--json", "--", "last"], env=env,
                           capture_output=True, text=True, check=True)
    return json.loads(shown.stdout)


def placement(store: Path, run_id: str) -> dict:
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store import Store

    report = RunReport.load(Store.open(str(store)), run_id)
    return next((e.data["devices"] for e in report.events if e.kind == "placement"), {})


def mib(value) -> str:
    return f"{value / 2**20:,.0f} MiB" if value else "-"


def print_phases(run: dict) -> None:
    print(f"  {'phase':<24} {'wall':>9} {'GPU busy mean':>14} {'peak':>6} {'job GPU memory peak':>20}")
    for p in run["phases"]:
        util = p.get("gpu_util_mean")
        print(f"  {p['name'][:24]:<24} {p['wall_seconds']:>8.2f}s {util if util is not None else '-':>14} "
              f"{p.get('gpu_util_peak') if p.get('gpu_util_peak') is not None else '-':>6} "
              f"{mib(p.get('gpu_job_memory_peak_bytes')):>20}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="check the script on a machine without a GPU")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("this check needs PyTorch (and Keras 3): pip install torch keras")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus and not args.cpu:
        sys.exit("PyTorch sees no CUDA GPU here; run with --cpu to check the script itself")
    failures = []

    def check(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as scratch:
        folder, store = Path(scratch), Path(scratch) / "runs.db"
        print(f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, {gpus} GPU(s)"
              + (f": {torch.cuda.get_device_name(0)}" if gpus else ""))
        on_gpu = record(folder, store, "gpu", args.epochs)
        job = on_gpu["env"]["job"]
        fit = next(p for p in on_gpu["phases"] if p["kind"] == "fit")
        weights = placement(store, on_gpu["run_id"])
        print(f"\n1. the model on the default device (run {on_gpu['run_id']}): weights {weights}")
        print_phases(on_gpu)
        findings = {f["id"] for f in on_gpu["findings"]}
        if gpus:
            check(job.get("backend_gpus") == gpus, f"PyTorch sees {job.get('backend_gpus')} GPU(s)")
            check(set(weights) == {"GPU:0"}, "the weights are on GPU:0")
            check((fit.get("gpu_util_mean") or 0) > 5, f"fit keeps the GPU busy ({fit.get('gpu_util_mean')}% mean)")
            check((fit.get("gpu_job_memory_peak_bytes") or 0) > 0,
                  f"the job's GPU memory is recorded for fit ({mib(fit.get('gpu_job_memory_peak_bytes'))})")
            check(not findings & {"gpu_unused", "variables_on_cpu", "gpu_not_visible"}, f"no placement finding: {findings}")
        else:
            check(set(weights) == {"CPU:0"} and job.get("backend_gpus") == 0, "no GPU: weights on CPU:0")

        on_cpu = record(folder, store, "cpu", args.epochs)
        weights = placement(store, on_cpu["run_id"])
        print(f"\n2. the model under keras.device('cpu') (run {on_cpu['run_id']}): weights {weights}")
        print_phases(on_cpu)
        found = {f["id"]: f for f in on_cpu["findings"]}
        for finding in found.values():
            if finding["id"] in ("gpu_unused", "variables_on_cpu"):
                print(f"  {finding['severity']} {finding['title']} ({finding['id']})")
        check(set(weights) == {"CPU:0"}, "the weights are on CPU:0")
        if gpus:
            check("gpu_unused" in found, "gpu_unused found")
            check("variables_on_cpu" in found, "variables_on_cpu found")
        else:
            check(not {"gpu_unused", "variables_on_cpu"} & set(found), "no GPU: no placement finding")
    print("\nall checks passed" if not failures else f"\n{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
