"""``tensorgauge export RUN -o FILE``: write a run to a portable bundle."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import check_output, open_store
from tensorgauge.render.text import plain


def export(store: str | None, ref: str, output: str) -> int:
    from tensorgauge.store.bundle import export_run

    check_output(output, store)
    with open_store(store, create=False) as opened:
        bundle = export_run(opened, ref)
    bundle.write(output)
    if output != "-":  # stdout holds the bundle
        print(f"exported {bundle.record.run_id} to {plain(output)}")
    return 0


VERB = "export"
HELP = "write a run to a portable bundle file"
DESCRIPTION = None
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge export``."""
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("-o", "--output", required=True, metavar="FILE")


def main(args: argparse.Namespace) -> int:
    return export(args.store, args.run, args.output)
