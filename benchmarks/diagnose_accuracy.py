"""How close the input A/B's evidence (with --diagnose) comes to an independent A/B measurement.

Each round runs the input-bound scenario once under ``tensorgauge run
--diagnose`` and once as ``--ab`` (the same job measured by hand in one
process: compute-only steps on one cached batch, input-only iteration), order
alternating between rounds. Reported per figure: the median over rounds of the
ratio diagnose / A/B, and its quartiles. Goal: within 15%.

    .venv/bin/python benchmarks/diagnose_accuracy.py [ROUNDS]
"""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.monitoring.runner import run
from tensorgauge.store import Store

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
JOB = [sys.executable, "-m", "tensorgauge.scenarios.input_bound"]
FIGURES = {"input_seconds_per_step": "input_only_batch_seconds",
           "compute_only_step_seconds": "compute_only_step_seconds"}


def diagnosed(store: Store) -> dict:
    result = run(JOB, store, diagnose=True, name="accuracy")
    report = RunReport.load(store, result.record.run_id)
    return next(f.evidence for f in report.findings if f.id == "input_bound")


def ab() -> dict:
    out = subprocess.run([*JOB, "--ab"], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ratios: dict[str, list[float]] = {key: [] for key in FIGURES}
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(Path(folder) / "runs.db")
        for round_ in range(ROUNDS):
            if round_ % 2 == 0:
                evidence, reference = diagnosed(store), ab()
            else:
                reference, evidence = ab(), diagnosed(store)
            line = []
            for key, ref_key in FIGURES.items():
                ratios[key].append(evidence[key] / reference[ref_key])
                line.append(f"{key} {evidence[key] * 1000:.2f} ms vs {reference[ref_key] * 1000:.2f} ms")
            print(f"round {round_ + 1}/{ROUNDS}: " + "; ".join(line), flush=True)
    for key, values in ratios.items():
        q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
        print(f"{key}: diagnose / A/B median {q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}, {len(values)} rounds)")


if __name__ == "__main__":
    main()
