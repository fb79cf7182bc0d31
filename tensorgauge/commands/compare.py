"""``tensorgauge compare A B`` (runs or bundles), or ``--job JOB`` (every worker of a distributed job)."""

from __future__ import annotations

import argparse
import json

from tensorgauge.commands._shared import CommandStore, console, load_side, open_store, write_text
from tensorgauge.errors import TensorgaugeError


def compare(store: str | None, a: str | None, b: str | None, json_path: str | None = None,
            job: str | None = None, show_all: bool = False) -> int:
    from tensorgauge.analyse.compare import compare as compare_sides
    from tensorgauge.render.compare import render_compare

    if job:
        return _compare_job(store, job, json_path, show_all)
    if not a or not b:
        raise TensorgaugeError("compare takes two runs or bundles (A B), or --job JOB")
    with CommandStore(store) as stores:
        comparison = compare_sides(load_side(stores, a), load_side(stores, b))
    if json_path:
        write_text(json.dumps(comparison.to_dict(), indent=2), json_path, store)
        return 0
    render_compare(console(), comparison)
    return 0


def _compare_job(store: str | None, job: str, json_path: str | None, show_all: bool = False) -> int:
    from tensorgauge.analyse.straggler import spread, straggler
    from tensorgauge.render.compare import render_job

    with open_store(store, create=False) as opened:
        every = opened.runs()
        records = [r for r in every if r.job_id == job]
        if not records:
            jobs = sorted({r.job_id for r in every if r.job_id})
            raise TensorgaugeError(f"no runs of job '{job}' in {opened.location}"
                                   + (f" (jobs: {', '.join(jobs[-5:])})" if jobs else ""))
        rows = sorted(_worker_rows(opened, records), key=lambda w: w.worker)
    finding = straggler(rows)
    if json_path:
        write_text(json.dumps({"schema": "tensorgauge.job/1", "job": job, "workers": [w.to_dict() for w in rows],
                               "spread": spread(rows).to_dict(),
                               "findings": [finding.to_dict()] if finding else []}, indent=2), json_path, store)
        return 0
    render_job(console(), job, rows, finding, show_all)
    return 0


def _worker_rows(opened, records: list) -> list:
    """Each worker's line, read for the whole job at once: the stored analyses (their phases) and the
    ``input_probe`` events, a few hundred runs a query; a run analysed with another version, or not yet,
    is analysed now (and stored), as ``show`` would."""
    from tensorgauge.analyse.run_report import RunReport, analysis_key
    from tensorgauge.analyse.straggler import worker_row, worker_row_of
    from tensorgauge.hook.protocol import Kind
    from tensorgauge.model import Phase

    ids = [r.run_id for r in records]
    stored, probes = opened.analyses(ids), opened.events_of_kind(ids, Kind.INPUT_PROBE)
    rows = []
    for record in records:
        key_doc = stored.get(record.run_id)
        if key_doc is not None and key_doc[0] == analysis_key(record):
            try:
                phases = [Phase.from_dict(p) for p in key_doc[1]["phases"]]
                rows.append(worker_row_of(record, phases, probes.get(record.run_id, [])))
                continue
            except (KeyError, TypeError, ValueError):
                pass  # damaged: analysed again below
        rows.append(worker_row(RunReport.load(opened, record.run_id)))
    return rows


VERB = "compare"
HELP = "compare two runs or bundles and explain the difference"
DESCRIPTION = ("A and B are run ids/names or bundle files (from bench or export). Shows the "
               "environment differences, each benchmark's or phase's ratio, and a ranked "
               "explanation tying result differences to environment differences.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge compare``."""
    p.add_argument("a", metavar="A", nargs="?")
    p.add_argument("b", metavar="B", nargs="?")
    p.add_argument("--job", metavar="JOB", help="instead of A and B: every worker of a distributed job, side by "
                                                "side, and the straggler")
    p.add_argument("--all", action="store_true", help="with --job: a line per worker, however many there are "
                                                      "(by default, past 20 workers: their spread and the slowest)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.compare/1 document")


def main(args: argparse.Namespace) -> int:
    return compare(args.store, args.a, args.b, args.json, args.job, args.all)
