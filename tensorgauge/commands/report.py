"""``tensorgauge report RUN [RUN] -o FILE.html``: a self-contained HTML report (or a comparison)."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import (
    WINDOW_MAX_BYTES,
    CommandStore,
    check_output,
    load_side,
    window,
    window_arguments,
    write_text,
)
from tensorgauge.errors import TensorgaugeError
from tensorgauge.render.text import plain


def report(store: str | None, refs: list[str], output: str, start: float | None = None,
           end: float | None = None) -> int:
    from tensorgauge.render.html import comparison_page, run_page

    if len(refs) > 2:
        raise TensorgaugeError("report takes one run, or two to compare")
    if len(refs) > 1 and (start is not None or end is not None):
        raise TensorgaugeError("--from/--to draw a stretch of one run: give one run")
    check_output(output, store)
    with CommandStore(store) as stores:
        sides = [load_side(stores, ref) for ref in refs]
        if start is not None or end is not None:
            from tensorgauge.analyse import timeline

            run = sides[0].report
            first, last = window(run, start, end)
            samples = stores.get().series(run.record.run_id, first, last, max_bytes=WINDOW_MAX_BYTES)
            run.timeline = timeline.window(samples, run.timeline, first, last)
    if len(sides) == 1:
        page = run_page(sides[0].report, patch=_patch(sides[0].report))
    else:
        from tensorgauge.analyse.compare import compare

        page = comparison_page(sides[0], sides[1], compare(*sides))
    write_text(page, output, store)
    if output != "-":
        print(f"report: {plain(output)}")
    return 0


def _patch(report):
    """The run's fixes as a patch to show, where libcst is there to make it (else the page has none)."""
    from tensorgauge.edit.patch import run_patch

    try:
        return run_patch(report)
    except TensorgaugeError:
        return None


VERB = "report"
HELP = "write a self-contained HTML report of a run (or two)"
DESCRIPTION = ("One HTML file that works offline: cores busy over time with phases and "
               "steps, a per-CPU heatmap, memory, GPU, the step-time histogram, the phase "
               "table, findings and the environment; with two runs (ids, names or bundle "
               "files), their comparison first.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge report``."""
    p.add_argument("runs", nargs="+", metavar="RUN", help="one run, or two to compare")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html")
    window_arguments(p, "draw only this stretch of one run, every sample (e.g. --from 3h10m --to 3h12m)")


def main(args: argparse.Namespace) -> int:
    return report(args.store, args.runs, args.output, args.start, args.end)
