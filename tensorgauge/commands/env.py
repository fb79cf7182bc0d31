"""``tensorgauge env``: this machine's fingerprint (the one every run carries)."""

from __future__ import annotations

import argparse
import json

from tensorgauge.commands._shared import console, progress_printer, write_text


def env(json_path: str | None = None) -> int:
    from tensorgauge.own_process import give_back

    give_back()  # before numpy loads: its BLAS is read as a job would have it, not under the tool's settings
    from tensorgauge.render.compare import render_env
    from tensorgauge.sources.environment import environment

    fingerprint = environment(progress=None if json_path else progress_printer())
    if json_path:
        write_text(json.dumps({"schema": "tensorgauge.env/1", **fingerprint}, indent=2), json_path)
        return 0
    render_env(console(), fingerprint)
    return 0


VERB = "env"
HELP = "this machine's fingerprint: CPU, cores allowed, memory, GPU, TensorFlow build"
DESCRIPTION = ("The environment fingerprint saved with every run, for this machine and "
               "this Python (TensorFlow is imported to read its build, if installed).")
USES_STORE = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge env``."""
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.env/1 document")


def main(args: argparse.Namespace) -> int:
    return env(args.json)
