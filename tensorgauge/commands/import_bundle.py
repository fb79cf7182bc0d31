"""``tensorgauge import FILE``: add a bundle's run to the store (checked in full first)."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import analyse_bundle, open_store


def import_bundle(store: str | None, path: str) -> int:
    from tensorgauge.analyse.run_report import analysis_key
    from tensorgauge.store.bundle import import_bundle as store_bundle
    from tensorgauge.store.bundle import read

    bundle = read(path)  # every field checked before the store is touched
    report = analyse_bundle(bundle, path)  # ... and the run analysed once, stored with it: the first show reads it
    analysis = (analysis_key(bundle.record), report.analysis()) if bundle.record.complete else None
    with open_store(store) as opened:
        run_id = store_bundle(opened, bundle, analysis)
    print(f"imported {run_id}")
    return 0


VERB = "import"
HELP = "add a run from a bundle file to the store"
DESCRIPTION = None
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge import``."""
    p.add_argument("file", metavar="FILE")


def main(args: argparse.Namespace) -> int:
    return import_bundle(args.store, args.file)
