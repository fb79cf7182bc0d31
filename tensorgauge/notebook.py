"""Notebooks (Jupyter, Colab): ``%load_ext tensorgauge``, then ``%%tensorgauge`` records a cell.

::

    %load_ext tensorgauge

    %%tensorgauge --name first-fit
    model.fit(x, y, epochs=3)

The cell runs as usual, under :func:`tensorgauge.monitor` (phases, findings, the
same store as ``tensorgauge run``); its report is shown below the cell's own
output: the HTML report, in a frame of its own, where the front end shows HTML,
plain text elsewhere. ``%tensorgauge show [RUN]`` prints a run (the latest by
default), ``%tensorgauge report [RUN]`` shows its HTML report.
"""

from __future__ import annotations

import argparse
import html
import shlex

from tensorgauge.monitoring.limits import interval_option

REPORT_HEIGHT_PX = 720


class _Parser(argparse.ArgumentParser):
    """Errors raised, not printed with the usage and a SystemExit (which a kernel shows as a traceback)."""

    def error(self, message: str):
        raise ValueError(message)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, add_help=False, exit_on_error=False)
    parser.add_argument("--name", help="a name for the run")
    parser.add_argument("--store", metavar="PATH", help="the store (default: as tensorgauge run)")
    parser.add_argument("--interval", type=interval_option, default=0.1, metavar="S", help="seconds between samples")
    parser.add_argument("--text", action="store_true", help="plain text instead of the HTML report")
    return parser


def _parse(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace | None:
    try:
        args, unknown = parser.parse_known_args(shlex.split(line))
    except (argparse.ArgumentError, ValueError) as exc:
        print(f"tensorgauge: {exc}")
        return None
    if unknown:
        print(f"tensorgauge: unknown option {' '.join(unknown)} (options: --name, --store, --interval, --text)")
        return None
    return args


def _report(store_path: str | None, ref: str):
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store import Store

    with Store.open(store_path, create=False) as store:
        return RunReport.load(store, ref)


def _text(report) -> str:
    import io

    from rich.console import Console

    from tensorgauge.render.terminal import render_run

    out = io.StringIO()
    render_run(Console(file=out, width=110, color_system=None), report)
    return out.getvalue()


class _Report:
    """A run's report for IPython's display: HTML (the report in a frame) and plain text."""

    def __init__(self, report, text_only: bool = False):
        self.report, self.text_only = report, text_only

    def _repr_html_(self) -> str | None:
        if self.text_only:
            return None
        from tensorgauge.render.html import run_page

        page = html.escape(run_page(self.report), quote=True)
        return (f'<iframe srcdoc="{page}" style="width:100%;height:{REPORT_HEIGHT_PX}px;border:1px solid #ddd" '
                f'title="tensorgauge run {html.escape(self.report.record.run_id)}"></iframe>')

    def __repr__(self) -> str:
        return _text(self.report)


def _display(report, text_only: bool) -> None:
    try:
        from IPython.display import display
    except ImportError:
        print(_text(report))
        return
    display(_Report(report, text_only))


def cell_magic(line: str, cell: str) -> None:
    """``%%tensorgauge [--name NAME] [--store PATH] [--interval S] [--text]``: record the cell."""
    from IPython import get_ipython

    from tensorgauge.errors import TensorgaugeError
    from tensorgauge.monitoring.inprocess import monitor

    args = _parse(_parser("%%tensorgauge"), line)
    if args is None:
        return
    shell = get_ipython()
    with monitor(name=args.name or "notebook cell", store=args.store, interval_seconds=args.interval) as run:
        result = shell.run_cell(cell)
    if run.warning:
        print(f"tensorgauge: {run.warning}")
    try:
        _display(_report(args.store, run.run_id or "last"), args.text)
    except TensorgaugeError as exc:
        print(f"tensorgauge: {exc}")
    result.raise_error()  # the cell's own error, after its run is stored and shown


def line_magic(line: str) -> None:
    """``%tensorgauge show [RUN]`` or ``%tensorgauge report [RUN]`` (RUN: the latest by default)."""
    from tensorgauge.errors import TensorgaugeError

    parser = _parser("%tensorgauge")
    parser.add_argument("what", choices=("show", "report"))
    parser.add_argument("run", nargs="?", default="last")
    args = _parse(parser, line)
    if args is None:
        return
    try:
        report = _report(args.store, args.run)
    except TensorgaugeError as exc:
        print(f"tensorgauge: {exc}")
        return
    if args.what == "show":
        print(_text(report))
    else:
        _display(report, args.text)


def load_ipython_extension(ipython) -> None:
    """``%load_ext tensorgauge``."""
    ipython.register_magic_function(cell_magic, "cell", "tensorgauge")
    ipython.register_magic_function(line_magic, "line", "tensorgauge")
