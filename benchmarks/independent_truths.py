"""The figures the tool measures in a run against the same figure measured without the tool, in a
separate process, at another moment: speeds of the machine's moment, so measured here over rounds,
not asserted by the test suite (which checks that each figure is there and consistent).

Each round, on the jobs of ``tests/jobs``:

- ``loop wait``: the input wait per step of a custom loop with a serial map (``custom_loop.py
  --slow-input``) under ``tensorgauge run``, against the loop's own A/B (``--ab``: the same loop on
  its first batch cached);
- ``eager prediction``: the step ``--diagnose`` predicts for an eager loop with ``tf.function``
  (``custom_loop.py --eager``), against the same loop compiled, run without the tool;
- ``spe gain``: ``--diagnose``'s steps_per_execution trial on tiny steps (``tiny_steps.py``) against
  the same fit compiled with ``steps_per_execution=32`` by the job;
- ``compute-only step``: the A/B's compute-only step on a windowed LSTM (``weather_like.py``) against
  the job's own timing of its step on one cached batch.

Printed per figure: each round's ratio tool / independent, then the median and range.

    .venv/bin/python benchmarks/independent_truths.py [ROUNDS]
"""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
JOBS = Path(__file__).parent.parent / "tests" / "jobs"
LOOP = str(JOBS / "custom_loop.py")


def recorded(store_path: Path, *command: str, diagnose: bool = False) -> tuple[RunReport, str]:
    """The job under ``tensorgauge run``; its report and its stdout."""
    options = ["--diagnose"] if diagnose else []
    out = subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(store_path), *options,
                          "--", sys.executable, *command], capture_output=True, text=True, check=True).stdout
    return RunReport.load(Store.open(store_path), "last"), out


def bare(*command: str) -> dict:
    """The job without the tool: the JSON of its last line."""
    out = subprocess.run([sys.executable, *command], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def loop_wait(store_path: Path, folder: Path) -> float:
    report, _ = recorded(store_path, LOOP, "--slow-input", "--epochs", "2")
    return report.input_split["input_wait_seconds"] / bare(LOOP, "--slow-input", "--ab", "--epochs", "1")[
        "input_wait_seconds"]


def eager_prediction(store_path: Path, folder: Path) -> float:
    report, _ = recorded(store_path, LOOP, "--eager", "--epochs", "2", diagnose=True)
    evidence = next(f.evidence for f in report.findings if f.id == "eager_execution")
    return evidence["expected_step_seconds"] / bare(LOOP, "--epochs", "2")["step_seconds_p50"]


def spe_gain(store_path: Path, folder: Path) -> float:
    truth_path = folder / "tiny.json"
    report, _ = recorded(store_path, str(JOBS / "tiny_steps.py"), str(truth_path), diagnose=True)
    evidence = next(f.evidence for f in report.findings if f.id == "small_batch")
    truth = json.loads(truth_path.read_text())
    measured = evidence["trial_single_step_seconds"] / evidence["trial_step_seconds"]
    return measured / (truth["step_seconds"] / truth["spe32_step_seconds"])


def compute_only_step(store_path: Path, folder: Path) -> float:
    truth_path = folder / "weather.json"
    report, _ = recorded(store_path, str(JOBS / "weather_like.py"), str(truth_path), diagnose=True)
    probe = next(e.data for e in report.events if e.kind == "input_ab" and e.data.get("compute_step_seconds"))
    median = statistics.median(t for steps in probe["compute_step_seconds"] for t in steps)
    return median / json.loads(truth_path.read_text())["compute_only_step_seconds"]


FIGURES = {"loop wait": loop_wait, "eager prediction": eager_prediction, "spe gain": spe_gain,
           "compute-only step": compute_only_step}


def main() -> None:
    ratios: dict[str, list[float]] = {name: [] for name in FIGURES}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for round_ in range(ROUNDS):
            for figure, measure in FIGURES.items():
                ratios[figure].append(measure(folder / "runs.db", folder))
                print(f"round {round_ + 1}/{ROUNDS}: {figure} {ratios[figure][-1]:.3f}", flush=True)
    for figure, values in ratios.items():
        print(f"{figure}: tool / independent median {statistics.median(values):.3f} "
              f"({min(values):.3f}-{max(values):.3f}, {len(values)} rounds)")


if __name__ == "__main__":
    main()
