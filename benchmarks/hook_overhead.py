"""How much tensorgauge slows a CPU-bound Keras fit, measured within one process.

Between separate processes the same job's median step varies by ±8% on a
2-core VM, which hides a 1% effect. So both parts compare step times inside
one training process, in pairs that are adjacent in time:

1. the monitor: a bare job trains while this process runs tensorgauge's real
   sampler and recorder (every 0.1 s, into a store) in alternating windows of
   WINDOW seconds on and off. Steps are assigned to windows by their start on
   the shared monotonic clock; each adjacent (on, off) pair gives a ratio of
   median step times.
2. the hook: the job runs under ``tensorgauge run`` and alternates one-epoch
   fit calls through the patched ``fit`` (phases, epochs, every step) and the
   original one; each adjacent pair of calls gives a ratio of median steps.

Reported: the median of the pair ratios, with the spread (quartiles).

    .venv/bin/python benchmarks/hook_overhead.py [CALLS] [WINDOW] [monitor,hook]

Set TENSORGAUGE_NO_CGROUP=1 to measure the /proc fallback.
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorgauge.model import RunRecord
from tensorgauge.monitoring.monitor import Sources
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.sources.clock import MonotonicClock
from tensorgauge.sources.nvml import open_gpus
from tensorgauge.sources.system import PsutilSystem
from tensorgauge.store import Store

JOB = str(Path(__file__).parent / "jobs" / "fit_steps.py")
CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 120
WINDOW = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
PARTS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["monitor", "hook"]


def quartiles(ratios: list[float]) -> str:
    q = statistics.quantiles(ratios, n=4)
    return f"median {statistics.median(ratios):.4f} ({100 * (statistics.median(ratios) - 1):+.2f}%), " \
           f"quartiles {q[0]:.4f}..{q[2]:.4f}, {len(ratios)} pairs"


def median_step(steps: list[dict]) -> float | None:
    return statistics.median(s["seconds"] for s in steps) if len(steps) >= 5 else None


def monitor_part(folder: Path) -> None:
    out = folder / "steps_monitor.json"
    job = subprocess.Popen([sys.executable, JOB, str(out), str(CALLS)])
    clock = MonotonicClock()
    store = Store.open(folder / "runs.db")
    t0 = clock.now()
    record = RunRecord(run_id="bench", command=["fit_steps"], started_at="-")
    store.save_run(record)
    recorder = Recorder(store, record, t0, clock)
    tree, group = Sources().watch_tree(job.pid, "benchmark", True)  # as `tensorgauge run` does
    sampler = Sampler(tree, PsutilSystem(), open_gpus(), clock, t0)
    windows = []  # (start, end, monitoring)
    on = True
    while job.poll() is None:
        start = clock.now()
        while clock.now() - start < WINDOW and job.poll() is None:
            if on:
                sample = sampler.sample()
                recorder.add([sample] if sample else [], [])
            time.sleep(0.1)
        windows.append((start, clock.now(), on))
        on = not on
    if group:
        group.remove()
    steps = json.loads(out.read_text())
    medians = []
    for start, end, monitoring in windows:
        inside = [s for s in steps if start <= s["t"] < end]
        medians.append((median_step(inside), monitoring))
    ratios = [a / b if on_ else b / a
              for (a, on_), (b, _) in zip(medians, medians[1:]) if a and b]
    print(f"monitor (every 0.1 s, tree read via {'cgroup' if group else 'procfs'}) vs none: {quartiles(ratios)}")


def hook_part(folder: Path) -> None:
    out = folder / "steps_hook.json"
    subprocess.run([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(folder / "runs.db"), "--",
                    sys.executable, JOB, str(out), str(CALLS), "alternate"], check=True)
    steps = json.loads(out.read_text())
    by_call: dict[int, list[dict]] = {}
    for step in steps:
        by_call.setdefault(step["call"], []).append(step)
    ratios = []
    for call in range(0, CALLS - 1, 2):  # (hooked, bare) pairs
        hooked, bare = median_step(by_call.get(call, [])), median_step(by_call.get(call + 1, []))
        if hooked and bare:
            ratios.append(hooked / bare)
    print(f"hook (phases, epochs, every step) vs none:  {quartiles(ratios)}")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        if "monitor" in PARTS:
            monitor_part(Path(folder))
        if "hook" in PARTS:
            hook_part(Path(folder))


if __name__ == "__main__":
    main()
