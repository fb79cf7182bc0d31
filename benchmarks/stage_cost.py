"""What timing the input pipeline's stages costs, against its bound: the input-bound demo
(``python -m tensorgauge.scenarios.input_bound``: a serial ~1 ms-an-element Python map, ~5 s of fit)
run N times under ``tensorgauge run`` with default options, each run's ``input_stages`` cost (the
seconds the stage timing spent in the job) beside its allowance (the diagnosis' bound: 1% of the
fit, at least 0.4 s; see tensorgauge/hook/input_window.py), and the stage it named costliest.

    .venv/bin/python benchmarks/stage_cost.py [RUNS]
"""

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorgauge.analyse.input_stages import costliest
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
JOB = [sys.executable, "-m", "tensorgauge.scenarios.input_bound"]


def main() -> None:
    costs: list[float] = []
    within = 0
    with tempfile.TemporaryDirectory() as folder:
        store_path = Path(folder) / "runs.db"
        for run in range(RUNS):
            subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(store_path), "--", *JOB],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            split = RunReport.load(Store.open(store_path), "last").input_split or {}
            cost, bound = split.get("stages_cost_seconds"), split.get("stages_allowance_seconds")
            if cost is None or bound is None:
                print(f"run {run + 1}/{RUNS}: no stage timed ({split.get('stages_why') or 'no input_stages event'})",
                      flush=True)
                continue
            costs.append(cost)
            within += cost <= bound
            top = costliest(split.get("stages") or []) or {}
            print(f"run {run + 1}/{RUNS}: stage timing cost {cost:.3f} s, bound {bound:.3f} s "
                  f"({cost / bound:.0%}); the A/B's own cost {split.get('cost_seconds') or 0:.3f} s; costliest "
                  f"{top.get('stage')} {top.get('function')} ({top.get('location')}) {top.get('share') or 0:.0%}; "
                  f"untimed: {split.get('stages_untimed') or '-'}", flush=True)
    if costs:
        print(f"stage timing cost: median {statistics.median(costs):.3f} s, max {max(costs):.3f} s; "
              f"within its bound in {within} of {len(costs)} runs")


if __name__ == "__main__":
    main()
