"""``tensorgauge runs``: list the recorded runs, newest first, with the runs a run made of its own (its
trials: --try-fixes' fixes, pytest --tensorgauge's tests) counted, or listed, under it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tensorgauge.commands._shared import console, count, open_store

RUNS_SHOWN = 20  # runs listed by default


def runs(store: str | None, limit: int = 0, name: str | None = None, job: str | None = None,
         expand: bool = False) -> int:
    from tensorgauge.analyse.run_list import Listing, select
    from tensorgauge.render.terminal import render_runs
    from tensorgauge.store import default_store_path, is_url
    from tensorgauge.store.location import check_location

    location = store or str(default_store_path())
    check_location(location)
    if not is_url(location) and not Path(location).exists():
        render_runs(console(), Listing(), {}, filtered=bool(name or job))
        return 0
    damaged: list[tuple[str, str]] = []
    waiting = []
    if is_url(location):  # runs whose data wait on this machine for the store (it refused or was down)
        from tensorgauge.store.spool import waiting_lines

        waiting = waiting_lines(location)
    try:
        with open_store(store, create=False) as opened:
            render_runs(console(), select(opened.runs(damaged), limit, name, job, expand), opened.peaks(),
                        filtered=bool(name or job))
    finally:
        for line in waiting:
            print(f"tensorgauge: {line}", file=sys.stderr)
    for run_id, why in damaged:
        print(f"tensorgauge: skipped run {run_id}: {why}", file=sys.stderr)
    return 0


VERB = "runs"
HELP = "list recorded runs, newest first"
DESCRIPTION = ("The newest runs first. The runs a run made of its own (--try-fixes' fixes, "
               "pytest --tensorgauge's tests) are counted under it; --all lists them.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge runs``."""
    p.add_argument("--limit", type=count, default=RUNS_SHOWN, metavar="N",
                   help=f"show the newest N runs (default {RUNS_SHOWN}; 0: all)")
    p.add_argument("--name", metavar="NAME", help="only runs whose name contains NAME (or matches it as a shell "
                                                  "pattern, e.g. 'try-fixes: *')")
    p.add_argument("--job", metavar="JOB", help="only the runs of the distributed job JOB")
    p.add_argument("--all", dest="expand", action="store_true",
                   help="list each run's trial runs under it (by default only counted)")


def main(args: argparse.Namespace) -> int:
    return runs(args.store, limit=args.limit, name=args.name, job=args.job, expand=args.expand)
