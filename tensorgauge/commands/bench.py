"""``tensorgauge bench``: the standard suite (:mod:`tensorgauge.bench.suite`) run as a
recorded job, so every result comes with the machine's fingerprint and what
each benchmark used (cores busy, peak memory) from its phase."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from tensorgauge.commands._shared import check_output, console, open_store
from tensorgauge.errors import TensorgaugeError

SUITE = "tensorgauge.bench.suite"


def run_bench(store, quick: bool = False, name: str | None = None):
    """Run the suite under the monitor; returns the RunReport of the stored run."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.monitoring.runner import run

    if importlib.util.find_spec("tensorflow") is None:
        raise TensorgaugeError("bench needs TensorFlow: pip install 'tensorgauge[tensorflow]'")
    command = [sys.executable, "-m", SUITE] + (["--quick"] if quick else [])
    result = run(command, store, name=name or ("bench --quick" if quick else "bench"),
                 extra_env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    if result.record.exit_code != 0:
        raise TensorgaugeError(f"the benchmark suite failed (exit {result.record.exit_code}); "
                               f"see 'tensorgauge show {result.record.run_id}'")
    return RunReport.load(store, result.record.run_id)


def bench(store: str | None, quick: bool = False, output: str | None = None) -> int:
    from tensorgauge.analyse.bench import bench_results
    from tensorgauge.render.compare import render_bench
    from tensorgauge.store.bundle import export_run

    if output:
        check_output(output, store)
    with open_store(store) as opened:
        report = run_bench(opened, quick=quick)
        render_bench(console(), bench_results(report.events, report.phases), report.record.run_id)
        out = output or f"tensorgauge-bench-{report.record.run_id}.json"
        export_run(opened, report.record.run_id).write(out)
    console().print(f"bundle: {out}  (compare it with: tensorgauge compare {out} OTHER)")
    return 0


VERB = "bench"
HELP = "run the standard benchmark suite and write a bundle"
DESCRIPTION = ("numpy matmul, TensorFlow matmul, a dense model trained at batch 16/128/512, "
               "a tf.data pipeline, a save and load; recorded as a run (cores busy and peak "
               "memory per benchmark) and written as a bundle for 'compare'. "
               "--quick: about 15 s on 2 cores; full: about 35 s.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge bench``."""
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="bundle file (default tensorgauge-bench-RUN_ID.json in the current folder)")


def main(args: argparse.Namespace) -> int:
    return bench(args.store, args.quick, args.output)
