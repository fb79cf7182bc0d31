"""``tensorgauge rm RUN...``: delete runs (all of them resolve before any is deleted); a run still being
recorded is refused."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import open_store
from tensorgauge.errors import TensorgaugeError

LIVE_SECONDS = 30.0  # an unfinished run that stored a sample this recently is taken as still recording


def rm(store: str | None, refs: list[str]) -> int:
    with open_store(store, create=False) as opened:
        run_ids = list(dict.fromkeys(opened.run_id_of(ref) for ref in refs))  # a damaged record can go too
        for run_id in run_ids:
            _refuse_live(opened, run_id)
        for run_id in run_ids:
            opened.delete_run(run_id)
            print(f"removed {run_id}")
    return 0


def _refuse_live(store, run_id: str) -> None:
    """A run whose monitor still writes it (unfinished, a sample stored within :data:`LIVE_SECONDS`, or
    three of its intervals): removing it would end its recording half-way."""
    try:
        record = store.run(run_id)
    except TensorgaugeError:  # a damaged record: nothing says it is live
        return
    quiet = store.quiet_seconds(record)
    bound = max(LIVE_SECONDS, 3 * record.interval_seconds)
    if quiet is not None and quiet < bound:
        raise TensorgaugeError(f"run {run_id} is still being recorded (its last sample is {max(quiet, 0.0):.0f} s "
                               f"old): stop it first (a run whose monitor died can be removed {bound:.0f} s after "
                               "its last sample)")


VERB = "rm"
HELP = "delete runs"
DESCRIPTION = None
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge rm``."""
    p.add_argument("runs", nargs="+", metavar="RUN")


def main(args: argparse.Namespace) -> int:
    return rm(args.store, args.runs)
