"""``tensorgauge show RUN``: one run's summary, phases, account and findings (or its JSON);
with ``--from``/``--to``, every sample of a stretch of it."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import WINDOW_MAX_BYTES, console, open_store, window, window_arguments, write_json


def show(store: str | None, ref: str, json_path: str | None = None, start: float | None = None,
         end: float | None = None) -> int:
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.render.terminal import render_run, render_window
    from tensorgauge.store import default_store_path, is_url

    location = store or str(default_store_path())
    if is_url(location):  # its data (or part of them) wait on this machine for the store
        from tensorgauge.commands._shared import tell
        from tensorgauge.store.spool import waiting_lines

        for line in waiting_lines(location, ref):
            tell(f"tensorgauge: {line}")
    with open_store(store, create=False) as runs:
        report = RunReport.load(runs, ref)
        if start is not None or end is not None:
            first, last = window(report, start, end)
            samples = runs.samples(report.record.run_id, first, last, max_bytes=WINDOW_MAX_BYTES)
            if json_path:
                write_json({"run_id": report.record.run_id, "from_seconds": first, "to_seconds": last,
                            "samples": [s.to_dict() for s in samples]}, json_path, store)
                if json_path == "-":
                    return 0
            render_window(console(), report, samples, first, last)
            return 0
        if json_path:
            write_json(report.to_dict(), json_path, store)
            if json_path == "-":
                return 0
        render_run(console(), report)
        return 0


VERB = "show"
HELP = "show one run: summary, phases, account"
DESCRIPTION = None
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge show``."""
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="the tensorgauge.run/1 document, to stdout or PATH")
    window_arguments(p, "every sample between these times from the run's start, at full resolution "
                         "(e.g. --from 3h10m --to 3h12m)")


def main(args: argparse.Namespace) -> int:
    return show(args.store, args.run, args.json, args.start, args.end)
