"""The candidate signals for a fit's input share, side by side on jobs whose truth is known: the A/B's
rounds (real steps against compute-only steps on a batch the fit produced, sized by time: the default),
and the time the step waited in ``IteratorGetNext`` as TensorFlow's profiler sees it (the profiler
window ``--diagnose`` opens), each with its cost, beside the job's own A/B timed without the tool.

    .venv/bin/python benchmarks/input_signals.py [RUNS]

The jobs: tests/jobs/input_cost.py --slow (a serial Python map: the step waits for its batch) and
tests/jobs/input_competes.py (a parallel map that takes the cores from the step: it never waits).
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
JOBS = Path(__file__).parent.parent / "tests" / "jobs"


def truth_share(path: Path) -> float:
    truth = json.loads(path.read_text())
    return 1 - truth["compute_only_step_seconds"] / truth["step_seconds"]


def one_run(store_path: Path, job: list[str]) -> dict:
    subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--diagnose", "--store", str(store_path), "--",
                    sys.executable, *job], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = RunReport.load(Store.open(store_path), "last")
    split = report.input_split or {}
    window = next((e.data for e in report.events if e.kind == "input_probe"), {})
    wait, step = split.get("profiled_wait_seconds"), split.get("step_seconds")
    return {"ab": split.get("input_share"), "interval": split.get("input_share_interval"),
            "ab_cost": split.get("cost_seconds"),
            "profiled": wait / step if wait is not None and step else None,
            "profiler_cost": (window.get("start_seconds") or 0) + (window.get("stop_seconds") or 0) if window else None,
            "found": any(f.id == "input_bound" for f in report.findings)}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store_path, truth = Path(folder) / "runs.db", Path(folder) / "truth.json"
        jobs = {"serial Python map (waits)": [str(JOBS / "input_cost.py"), "--slow", "--ab", str(truth)],
                "parallel map taking the cores (never waits)": [str(JOBS / "input_competes.py"), str(truth)]}
        print("| job | run | truth (own A/B) | A/B rounds (95% interval) | A/B cost | IteratorGetNext wait | "
              "profiler cost |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, job in jobs.items():
            for i in range(RUNS):
                r = one_run(store_path, job)
                interval = r["interval"] and f" ({pct(max(0.0, r['interval'][0]))}-{pct(r['interval'][1])})"
                print(f"| {name} | {i + 1} | {pct(truth_share(truth))} | {pct(r['ab'])}{interval or ''}"
                      f"{' found' if r['found'] else ''} | {r['ab_cost'] or 0:.2f} s | {pct(r['profiled'])} | "
                      f"{'-' if r['profiler_cost'] is None else format(r['profiler_cost'], '.2f') + ' s'} |",
                      flush=True)


if __name__ == "__main__":
    main()
