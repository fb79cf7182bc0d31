"""Whether the input verdict is stable and true: tests/jobs/input_cost.py run N times in each of its
four forms (fit or custom loop, healthy or slow input) under ``tensorgauge run`` (default options),
each run's verdict and input share beside the job's own A/B (the same training on one cached batch,
timed by the job without the tool's help).

    .venv/bin/python benchmarks/input_verdict.py [RUNS]
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
JOB = str(Path(__file__).parent.parent / "tests" / "jobs" / "input_cost.py")
FORMS = {"fit, healthy": [], "fit, slow input": ["--slow"], "loop, healthy": ["--loop"],
         "loop, slow input": ["--loop", "--slow"]}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store_path, ab = Path(folder) / "runs.db", Path(folder) / "ab.json"
        for form, args in FORMS.items():
            found, shares, own = 0, [], []
            for _ in range(RUNS):
                subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(store_path), "--",
                                sys.executable, JOB, *args, "--ab", str(ab)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                report = RunReport.load(Store.open(store_path), "last")
                found += any(f.id == "input_bound" for f in report.findings)
                shares.append((report.input_split or {}).get("input_share") or 0.0)
                truth = json.loads(ab.read_text())
                own.append(1 - truth["compute_only_step_seconds"] / truth["step_seconds"])
            print(f"{form}: input_bound in {found} of {RUNS} runs; input share "
                  f"{', '.join(f'{s:.0%}' for s in shares)}; the job's own A/B {', '.join(f'{o:.0%}' for o in own)}",
                  flush=True)


if __name__ == "__main__":
    main()
