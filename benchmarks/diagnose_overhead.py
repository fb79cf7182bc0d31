"""What the default diagnosis (the input window and the compute-only probe) costs: paired,
alternating runs with it (the default) and with --no-diagnose.

Each round runs ``tensorgauge run`` on a job both ways (order alternating between rounds);
reported are the median ratio of wall times, and the diagnosis' own cost read from the runs'
events (the hook times its own work: profiler start, stop and parse, compute probe; plus the
slowdown of the profiled steps against the median step) as a share of the job's fit.

    .venv/bin/python benchmarks/diagnose_overhead.py [ROUNDS] [demo|slow]

``demo``: the demo job (train, save, load, predict; ~20 s); ``slow``: a minute-long fit of
~130 ms steps (benchmarks/jobs/slow_steps.py).
"""

import statistics
import sys
import tempfile
from pathlib import Path

from tensorgauge.analyse.phases import main_fit
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.monitoring.runner import run
from tensorgauge.store import Store

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
JOBS = {"demo": [sys.executable, "-m", "tensorgauge.scenarios.demo"],
        "slow": [sys.executable, str(Path(__file__).parent / "jobs" / "slow_steps.py")]}
JOB = JOBS[sys.argv[2] if len(sys.argv) > 2 else "demo"]


def own_cost(store: Store, run_id: str) -> tuple[float, float]:
    """(seconds the diagnosis added to one run, from the hook's own timings; the fit's seconds)."""
    report = RunReport.load(store, run_id)
    window = next(e.data for e in report.events if e.kind == "input_probe")
    probe = next((e.data for e in report.events if e.kind == "compute_probe"), {})
    fit = main_fit(report.phases)
    assert fit is not None and fit.step_seconds_p50
    tracing = sum(window.get("step_seconds") or []) - fit.step_seconds_p50 * len(window.get("step_seconds") or [])
    cost = ((window.get("start_seconds") or 0.0) + (window.get("stop_seconds") or 0.0)
            + (probe.get("total_seconds") or 0.0) + max(tracing, 0.0))
    return cost, fit.wall_seconds


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(Path(folder) / "runs.db")
        walls: dict[bool, list[float]] = {False: [], True: []}
        direct: list[float] = []
        shares: list[float] = []
        for round_ in range(ROUNDS):
            for diagnose in ((False, True) if round_ % 2 == 0 else (True, False)):
                result = run(JOB, store, diagnose="auto" if diagnose else "", name=f"diagnose={diagnose}")
                walls[diagnose].append(result.record.wall_seconds)
                if diagnose:
                    cost, fit_seconds = own_cost(store, result.record.run_id)
                    direct.append(cost)
                    shares.append(cost / fit_seconds)
            print(f"round {round_ + 1}/{ROUNDS}: --no-diagnose {walls[False][-1]:.2f} s, "
                  f"default {walls[True][-1]:.2f} s; the diagnosis' own cost {direct[-1]:.3f} s = "
                  f"{100 * shares[-1]:.2f}% of the fit", flush=True)
        ratios = sorted(d / p for d, p in zip(walls[True], walls[False]))
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        plain = statistics.median(walls[False])
        print(f"direct cost of the diagnosis: median {statistics.median(direct):.3f} s = "
              f"{100 * statistics.median(shares):.2f}% of the fit, "
              f"{100 * statistics.median(direct) / plain:.2f}% of the --no-diagnose run's median wall ({plain:.2f} s)")
        print(f"default / --no-diagnose wall time: median {statistics.median(ratios):.4f} "
              f"({100 * (statistics.median(ratios) - 1):+.2f}%), quartiles {q[0]:.4f}..{q[2]:.4f}, {len(ratios)} pairs")


if __name__ == "__main__":
    main()
