"""``tensorgauge demo``: record a built-in job, show it, and write its HTML report."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from tensorgauge.commands._recording import RecordOptions, record
from tensorgauge.commands._shared import console, open_store
from tensorgauge.errors import TensorgaugeError


def demo(store: str | None, scenario: str = "default", json_path: str | None = None) -> int:
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.render.terminal import render_run
    from tensorgauge.scenarios import SCENARIOS

    if scenario not in SCENARIOS:
        raise TensorgaugeError(f"no scenario '{scenario}' (choose from: {', '.join(SCENARIOS)})")
    if importlib.util.find_spec("tensorflow") is None:
        raise TensorgaugeError("the demo needs TensorFlow: pip install 'tensorgauge[tensorflow]'")
    module, _ = SCENARIOS[scenario]
    name = "demo" if scenario == "default" else f"scenario {scenario}"
    options = RecordOptions(store=store, name=name, json_path=json_path, diagnose="auto" if scenario == "default" else "always")
    exit_code, run_id = record([sys.executable, "-m", module], options)
    with open_store(store, create=False) as opened:
        report, data_dir = RunReport.load(opened, run_id), opened.data_dir
    console().print()
    render_run(console(), report)
    if importlib.util.find_spec("vl_convert") is None:
        console().print("For an HTML report of this run: pip install 'tensorgauge[report]', then "
                        f"tensorgauge report {run_id} -o report.html")
        return exit_code
    from tensorgauge.render.html import run_page

    page = data_dir / "reports" / f"{run_id}.html"
    try:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(run_page(report))
    except OSError as exc:
        raise TensorgaugeError(f"cannot write the report {page}: {exc.strerror}") from None
    console().print(f"\nReport: {page}")
    return exit_code


VERB = "demo"
HELP = "record a built-in small Keras job and show it"
DESCRIPTION = ("Train, save, load and predict with a small Keras model on synthetic data "
               "(about 20 s on 2 cores) under 'tensorgauge run', then show the run and write "
               "its HTML report beside the store. "
               "--scenario runs a job with a known cause instead, with --diagnose: "
               "input-bound, eager, eager-loop, thread-limited, healthy.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge demo``."""
    p.add_argument("--scenario", default="default", metavar="NAME",
                   help="default, input-bound, eager, eager-loop, thread-limited or healthy")
    p.add_argument("--json", metavar="PATH", help="also write the run's report as JSON")


def main(args: argparse.Namespace) -> int:
    return demo(args.store, args.scenario, args.json)
