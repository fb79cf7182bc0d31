"""``tensorgauge prune --older-than 30d [--job JOB]``: remove the runs that started longer ago than that
(of one job only, with ``--job``), in one transaction, keeping every other run and any still recorded."""

from __future__ import annotations

import argparse
import datetime as dt
import re

from tensorgauge.commands._shared import open_store
from tensorgauge.errors import TensorgaugeError

UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
LIVE_SECONDS = 30.0  # as rm's: an unfinished run that stored a sample this recently is still recording


def parse_age_seconds(text: str) -> float:
    """``30d``, ``12h``, ``2w``, ``90m``: seconds; :class:`TensorgaugeError` for anything else."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text or "")
    if not found or float(found[1]) <= 0:
        raise TensorgaugeError(f"--older-than takes an age such as 30d, 12h, 2w or 90m (minutes), not '{text}'")
    return float(found[1]) * UNITS[found[2]]


def prune(store: str | None, older_than: str, job: str | None = None) -> int:
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=parse_age_seconds(older_than))
    with open_store(store, create=False) as opened:
        doomed, kept = [], 0
        for record in opened.runs():
            try:
                started = dt.datetime.fromisoformat(record.started_at)
            except (TypeError, ValueError):
                kept += 1  # no start to judge it by: kept
                continue
            started = started if started.tzinfo else started.astimezone()
            quiet = opened.quiet_seconds(record)
            live = quiet is not None and quiet < max(LIVE_SECONDS, 3 * record.interval_seconds)
            if started < cutoff and (job is None or record.job_id == job) and not live:
                doomed.append(record.run_id)
            else:
                kept += 1
        what = f"runs{f' of job {job}' if job else ''} that started more than {older_than.strip()} ago"
        if not doomed:
            print(f"no {what} in {opened.location}; nothing removed")
            return 0
        opened.delete_runs(doomed)
        print(f"removed {len(doomed)} {what} from {opened.location} ({kept} kept)")
    return 0


VERB = "prune"
HELP = "delete the runs older than an age (of one job with --job)"
DESCRIPTION = None
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge prune``."""
    p.add_argument("--older-than", required=True, metavar="AGE", help="30d, 12h, 2w or 90m (minutes)")
    p.add_argument("--job", metavar="JOB", help="only the runs of this distributed job")


def main(args: argparse.Namespace) -> int:
    return prune(args.store, args.older_than, args.job)
