"""`tensorgauge check`'s acceptance: false failures of an unchanged job, and three injected regressions.

The job (benchmarks/check_job.py) is recorded once and saved as a baseline; then RUNS unchanged runs
and REPEATS runs of each regression (SERIAL=1: the map's num_parallel_calls removed; EAGER=1:
run_eagerly=True; WIDE=1: hidden layers 30% wider) are each checked against it with the defaults.

    .venv/bin/python benchmarks/check_regressions.py [RUNS] [REPEATS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

JOB = Path(__file__).parent / "check_job.py"
TG = [sys.executable, "-m", "tensorgauge"]
REGRESSIONS = {"SERIAL": "input pipeline", "EAGER": "eagerly", "WIDE": "weights"}


def record(store: str, name: str, env: dict[str, str]) -> None:
    subprocess.run([*TG, "run", "-q", "--store", store, "--name", name, "--", sys.executable, str(JOB)],
                   env={**os.environ, **env}, check=True, capture_output=True)


def checked(store: str, name: str, folder: Path) -> tuple[int, dict]:
    out = folder / f"{name}.json"
    result = subprocess.run([*TG, "check", name, "--store", store, "--against", "base", "--json", str(out)],
                            capture_output=True, text=True)
    return result.returncode, json.loads(out.read_text())


def main(runs: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "runs.db")
        record(store, "base-run", {})
        subprocess.run([*TG, "baseline", "--store", store, "save", "base", "base-run"], check=True,
                       capture_output=True)
        fails, ratios = 0, []
        for i in range(runs):
            record(store, f"same-{i}", {})
            code, doc = checked(store, f"same-{i}", Path(folder))
            fails += code != 0
            ratios.append({c["name"]: c["ratio"] for c in doc["checks"]})
            print(f"unchanged {i + 1}: exit {code}; " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios[-1].items()),
                  flush=True)
        print(f"unchanged: {fails} false failures of {runs}", flush=True)
        for variable, expected in REGRESSIONS.items():
            caught, named = 0, 0
            for i in range(repeats):
                name = f"{variable.lower()}-{i}"
                record(store, name, {variable: "1"})
                code, doc = checked(store, name, Path(folder))
                caught += code == 1
                first = (doc["causes"] or ["(none)"])[0]
                named += expected in first
                failed = [f"{c['name']} {c['ratio']:.2f}x" for c in doc["checks"] if c["verdict"] == "fail"]
                print(f"{variable} {i + 1}: exit {code}; failed {', '.join(failed) or '-'}; first cause: {first}",
                      flush=True)
            print(f"{variable}: failed {caught} of {repeats}, the right cause first in {named}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10, int(sys.argv[2]) if len(sys.argv) > 2 else 5)
