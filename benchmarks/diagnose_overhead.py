"""Wall time that --diagnose adds to a run: paired, alternating runs of the demo job.

Each round runs ``tensorgauge run`` on the demo (train, save, load, predict;
~18 s on 2 cores) with and without ``--diagnose`` (order alternating between
rounds); reported is the median over rounds of the ratio of wall times, and
the profiler window's and compute probe's own cost read from the runs' events
(the hook times its own work: profiler start, stop and parse, compute probe;
plus the tracing slowdown of the 10 profiled steps against the median step).

    .venv/bin/python benchmarks/diagnose_overhead.py [ROUNDS]
"""

import statistics
import sys
import tempfile
from pathlib import Path

from tensorgauge.monitoring.runner import run
from tensorgauge.store import Store

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
JOB = [sys.executable, "-m", "tensorgauge.scenarios.demo"]


def own_cost(store: Store, run_id: str) -> float:
    """Seconds the diagnosis added to one run, from the hook's own timings."""
    events = store.events(run_id)
    window = next(e.data for e in events if e.kind == "input_probe")
    probe = next(e.data for e in events if e.kind == "compute_probe")
    steps = [s for e in events if e.kind == "steps" for s in e.data["seconds"]]
    normal = statistics.median(steps)
    tracing = sum(window["step_seconds"]) - normal * len(window["step_seconds"])
    return window["start_seconds"] + window["stop_seconds"] + probe["total_seconds"] + max(tracing, 0.0)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(Path(folder) / "runs.db")
        walls: dict[bool, list[float]] = {False: [], True: []}
        direct: list[float] = []
        for round_ in range(ROUNDS):
            for diagnose in ((False, True) if round_ % 2 == 0 else (True, False)):
                result = run(JOB, store, diagnose=diagnose, name=f"diagnose={diagnose}")
                walls[diagnose].append(result.record.wall_seconds)
                if diagnose:
                    direct.append(own_cost(store, result.record.run_id))
            print(f"round {round_ + 1}/{ROUNDS}: plain {walls[False][-1]:.2f} s, "
                  f"--diagnose {walls[True][-1]:.2f} s", flush=True)
        ratios = sorted(d / p for d, p in zip(walls[True], walls[False]))
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        plain = statistics.median(walls[False])
        print(f"direct cost of --diagnose: median {statistics.median(direct):.3f} s = "
              f"{100 * statistics.median(direct) / plain:.2f}% of the plain run's median wall ({plain:.2f} s)")
        print(f"--diagnose / plain wall time: median {statistics.median(ratios):.4f} "
              f"({100 * (statistics.median(ratios) - 1):+.2f}%), quartiles {q[0]:.4f}..{q[2]:.4f}, {len(ratios)} pairs")


if __name__ == "__main__":
    main()
