"""The ``tensorgauge`` command line: the parser, and dispatch to one function per verb
(:mod:`tensorgauge.commands`).

``main(argv) -> int``. Problems the user can fix print one line on stderr and
exit 2; ``run`` exits with the job's own exit code (128+N for signal N).
"""

from __future__ import annotations

import argparse
import sys

from tensorgauge._version import __version__
from tensorgauge.commands import (
    baseline,
    bench,
    check,
    compare,
    demo,
    devices,
    env,
    explain,
    export,
    fix,
    import_bundle,
    prune,
    report,
    rm,
    run,
    runs,
    ship,
    show,
)
from tensorgauge.errors import TensorgaugeError
from tensorgauge.own_process import lighten

PROG = "tensorgauge"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise TensorgaugeError(f"{message} (see '{self.prog} --help')")


# One module per verb, each declaring its name, help, flags (``add_arguments``) and entry (``main``).
COMMANDS = (run, runs, show, fix, rm, prune, ship, devices, env, bench, report, export, import_bundle, compare,
            check, baseline, explain, demo)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--store", metavar="PATH",
                        help="run store (SQLite file); default $TENSORGAUGE_STORE or "
                             "~/.local/share/tensorgauge/runs.db")
    parser = _Parser(prog=PROG, description="Measure and explain how a TensorFlow/Keras job uses "
                                            "CPU, memory and GPU.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        p = sub.add_parser(command.VERB, parents=[common] if command.USES_STORE else [], help=command.HELP,
                           description=command.DESCRIPTION)
        command.add_arguments(p)
        p.set_defaults(verb=command.VERB, entry=command.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the tool's own process (not a caller's, as in tests)
        lighten()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "verb", None):
            build_parser().print_help()
            return 2
        return args.entry(args)
    except TensorgaugeError as exc:
        from tensorgauge.commands._shared import tell
        from tensorgauge.render.text import plain

        tell(f"{PROG}: {plain(exc)}")
        return exc.exit_code
    except KeyboardInterrupt:
        from tensorgauge.commands._shared import tell

        tell(f"{PROG}: interrupted")
        return 130
    except BrokenPipeError:
        return 0
