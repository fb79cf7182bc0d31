"""What tensorgauge costs a job, against the job run bare: total CPU (the job, its children and the
monitor, from wait4's rusage) in alternated pairs, and the cost the run reports for its diagnosis
against the time the job lost to it (the excess of its steps that held a pause, tool minus bare).

    .venv/bin/python benchmarks/tool_cost.py [PAIRS] [-- extra tensorgauge run options]

The job: benchmarks/jobs/dense_fit.py (~6 s: a warm-up epoch, then 4 epochs of a 1024-wide dense fit).
The package is byte-compiled first, as pip does when it installs it: an editable checkout run with
PYTHONDONTWRITEBYTECODE=1 compiles its modules in every process (0.07 s of the monitor's CPU).
"""

import compileall
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import tensorgauge
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

PAIRS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "--" else 5
OPTIONS = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
JOB = str(Path(__file__).parent / "jobs" / "dense_fit.py")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str]) -> float:
    """CPU seconds of ``command`` and every process it waited for."""
    before = children_cpu()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return children_cpu() - before


def main() -> None:
    compileall.compile_dir(str(Path(tensorgauge.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory() as folder:
        store_path, out = Path(folder) / "runs.db", Path(folder) / "job.json"
        tool = [sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(store_path), *OPTIONS, "--"]
        cpu: dict[str, list[float]] = {"bare": [], "tool": []}
        excess: dict[str, list[float]] = {"bare": [], "tool": []}
        reported: list[float] = []
        for pair in range(PAIRS):
            for side in (("bare", "tool") if pair % 2 == 0 else ("tool", "bare")):
                cpu[side].append(timed([*(tool if side == "tool" else []), sys.executable, JOB, str(out)]))
                excess[side].append(json.loads(out.read_text())["pause_seconds"])
                if side == "tool":
                    split = RunReport.load(Store.open(store_path), "last").input_split or {}
                    reported.append(split.get("cost_seconds") or 0.0)
            print(f"pair {pair + 1}/{PAIRS}: CPU bare {cpu['bare'][-1]:.2f} s, tool {cpu['tool'][-1]:.2f} s "
                  f"({cpu['tool'][-1] / cpu['bare'][-1]:.3f}x); diagnosis cost reported {reported[-1]:.3f} s, "
                  f"pauses in steps bare {excess['bare'][-1]:.3f} s, tool {excess['tool'][-1]:.3f} s", flush=True)
        ratios = [t / b for t, b in zip(cpu["tool"], cpu["bare"])]
        lost = statistics.median(excess["tool"]) - statistics.median(excess["bare"])
        print(f"total CPU, tool / bare: median {statistics.median(ratios):.3f}x over {PAIRS} alternated pairs "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}); bare {statistics.median(cpu['bare']):.2f} CPU-s")
        print(f"diagnosis cost reported {statistics.median(reported):.3f} s (median); the job lost "
              f"{lost:.3f} s to pauses (the median excess of steps that held one, tool minus bare)")


if __name__ == "__main__":
    main()
