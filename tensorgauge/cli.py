"""The ``tensorgauge`` command line: the parser, and dispatch to one function per verb
(:mod:`tensorgauge.commands`).

``main(argv) -> int``. Problems the user can fix print one line on stderr and
exit 2; ``run`` exits with the job's own exit code (128+N for signal N).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tensorgauge._version import __version__
from tensorgauge.errors import TensorgaugeError
from tensorgauge.monitoring.limits import interval_option
from tensorgauge.own_process import lighten

PROG = "tensorgauge"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise TensorgaugeError(f"{message} (see '{self.prog} --help')")


def _grace(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= 24 * 3600:  # false for NaN too
        raise argparse.ArgumentTypeError(f"the grace period must be between 0 s and a day, got {text}")
    return seconds


RUNS_SHOWN = 20  # runs listed by default


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _dispatch(args: argparse.Namespace) -> int:
    """Call the verb's function with typed arguments taken from the parsed ones."""
    verb = args.verb
    module = importlib.import_module(f"tensorgauge.commands.{'import_bundle' if verb == 'import' else verb}")
    if verb == "run":
        from tensorgauge.commands._recording import RecordOptions

        options = RecordOptions(store=args.store, interval_seconds=args.interval, name=args.name, json_path=args.json,
                                hook=not args.no_hook, diagnose=args.diagnose, max_memory=args.max_memory,
                                max_cpus=args.max_cpus, max_gpu_memory=args.max_gpu_memory,
                                checkpoint=args.checkpoint, job=args.job, live=args.live,
                                tensorboard=args.tensorboard, prometheus=args.prometheus, quiet=args.quiet,
                                keep_job_on_failure=args.keep_job_on_failure, stop_grace_seconds=args.stop_grace)
        return module.run(list(args.command), options, try_fixes=args.try_fixes, backends=args.backends,
                          find_batch_size=args.find_batch_size)
    calls = {
        "runs": lambda: module.runs(args.store, limit=args.limit, name=args.name, job=args.job, expand=args.expand),
        "show": lambda: module.show(args.store, args.run, args.json, args.start, args.end),
        "rm": lambda: module.rm(args.store, args.runs),
        "prune": lambda: module.prune(args.store, args.older_than, args.job),
        "devices": lambda: module.devices(args.path, args.json, args.device, args.input_shape, args.logical_cpus),
        "env": lambda: module.env(args.json),
        "bench": lambda: module.bench(args.store, args.quick, args.output),
        "report": lambda: module.report(args.store, args.runs, args.output, args.start, args.end),
        "export": lambda: module.export(args.store, args.run, args.output),
        "import": lambda: module.import_bundle(args.store, args.file),
        "compare": lambda: module.compare(args.store, args.a, args.b, args.json, args.job, args.all),
        "demo": lambda: module.demo(args.store, args.scenario, args.json),
        "check": lambda: module.check(args.store, args.run, args.against, args.max_slower, args.max_memory_growth,
                                      args.no_new_findings, args.format, args.output, args.json, args.config),
        "baseline": lambda: module.baseline(args.store, args.action, args.name, args.run),
        "explain": lambda: module.explain(args.id),
    }
    return calls[verb]()


def _offset(text: str) -> float:
    from tensorgauge.units import parse_offset_seconds

    try:
        return parse_offset_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _window_arguments(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--from", dest="start", type=_offset, metavar="TIME", help=what)
    p.add_argument("--to", dest="end", type=_offset, metavar="TIME",
                   help="the window's end (default: 2 minutes after --from, or the run's end)")


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--store", metavar="PATH",
                        help="run store (SQLite file); default $TENSORGAUGE_STORE or "
                             "~/.local/share/tensorgauge/runs.db")
    parser = _Parser(prog=PROG, description="Measure and explain how a TensorFlow/Keras job uses "
                                            "CPU, memory and GPU.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("run", parents=[common], help="run a command and record its CPU, memory, GPU and phases",
                       description="Run COMMAND as a child, sample it every --interval seconds and record it. "
                                   "Exits with COMMAND's exit code (128+N when signal N ended it).")
    p.add_argument("--interval", type=interval_option, default=0.1, metavar="S", help="seconds between samples (0.1)")
    p.add_argument("--name", help="a name for the run (usable wherever a run id is)")
    p.add_argument("--json", metavar="PATH", help="also write the run's report as JSON (- for stdout)")
    p.add_argument("--no-hook", action="store_true", help="record from outside only: no phases")
    diagnosis = p.add_mutually_exclusive_group()
    diagnosis.add_argument("--diagnose", dest="diagnose", action="store_const", const="always", default="auto",
                           help="measure the input split even where it costs more than 1%% of the fit, and under "
                                "a distribution strategy (by default it is measured within that bound)")
    diagnosis.add_argument("--no-diagnose", dest="diagnose", action="store_const", const="",
                           help="do not profile training steps for the input split (no profiler window, no "
                                "compute-only probe)")
    p.add_argument("--backends", metavar="LIST",
                   help="run a Keras 3 job once per backend (e.g. tensorflow,jax,torch: KERAS_BACKEND) and compare "
                        "them phase by phase, with the causes")
    p.add_argument("--try-fixes", action="store_true",
                   help="time a short window of the first fit as it is and with each applicable fix "
                        "(parallel map, prefetch, eager off, thread pools), and report each one's speedup")
    p.add_argument("--find-batch-size", action="store_true",
                   help="try the first fit at growing batch sizes (short trials in the job's process) and "
                        "recommend the largest batch that keeps it under --max-memory (default: 80%% of the "
                        "memory available); the job ends after the trials")
    p.add_argument("--max-memory", metavar="SIZE",
                   help="memory budget for the job's process tree: 10%% of RAM, 4GiB, 512MiB. At 90%% "
                        "training is checkpointed and stopped (exit 75); past 100%% the job is killed")
    p.add_argument("--max-cpus", metavar="N", help="CPU budget in cores, e.g. 1 or 1.5: thread pools, "
                                                   "affinity and (where permitted) a cgroup quota")
    p.add_argument("--max-gpu-memory", metavar="SIZE", help="GPU memory per GPU for TensorFlow, e.g. 8GiB")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="where a budget stop leaves a resumable checkpoint, in a subfolder "
                        "tensorgauge-resume it makes and removes (default: one folder per command beside the "
                        "store; run the same command again to resume at the step it stopped at)")
    p.add_argument("--job", metavar="ID", help="the distributed job this worker belongs to (default: derived from "
                                               "TF_CONFIG's cluster, the same on every worker)")
    p.add_argument("--live", action="store_true",
                   help="show cores, memory, GPU, the current phase and the step rate live (on a terminal)")
    p.add_argument("--tensorboard", metavar="LOGDIR",
                   help="write system metrics as TensorBoard scalars into LOGDIR/tensorgauge, on the training "
                        "step and epoch axes")
    p.add_argument("--prometheus", metavar="[HOST:]PORT",
                   help="serve live metrics for Prometheus on HOST:PORT (default host 127.0.0.1), e.g. 9464")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing of tensorgauge's own")
    p.add_argument("--stop-grace", type=_grace, default=10.0, metavar="S",
                   help="after a SIGTERM or SIGINT passed on to the job, seconds it has to end before its whole "
                        "process tree is killed (10, as docker stop); a second SIGINT kills it at once")
    p.add_argument("--keep-job-on-failure", action="store_true",
                   help="if tensorgauge itself fails or is killed, leave the job running unmonitored (by default "
                        "the job's whole process tree is stopped with it)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    p.set_defaults(verb="run")

    p = sub.add_parser("runs", parents=[common], help="list recorded runs, newest first",
                       description="The newest runs first. The runs a run made of its own (--try-fixes' fixes, "
                                   "pytest --tensorgauge's tests) are counted under it; --all lists them.")
    p.add_argument("--limit", type=_count, default=RUNS_SHOWN, metavar="N",
                   help=f"show the newest N runs (default {RUNS_SHOWN}; 0: all)")
    p.add_argument("--name", metavar="NAME", help="only runs whose name contains NAME (or matches it as a shell "
                                                  "pattern, e.g. 'try-fixes: *')")
    p.add_argument("--job", metavar="JOB", help="only the runs of the distributed job JOB")
    p.add_argument("--all", dest="expand", action="store_true",
                   help="list each run's trial runs under it (by default only counted)")
    p.set_defaults(verb="runs")

    p = sub.add_parser("show", parents=[common], help="show one run: summary, phases, account")
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="the tensorgauge.run/1 document, to stdout or PATH")
    _window_arguments(p, "every sample between these times from the run's start, at full resolution "
                         "(e.g. --from 3h10m --to 3h12m)")
    p.set_defaults(verb="show")

    p = sub.add_parser("rm", parents=[common], help="delete runs")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.set_defaults(verb="rm")

    p = sub.add_parser("prune", parents=[common], help="delete the runs older than an age (of one job with --job)")
    p.add_argument("--older-than", required=True, metavar="AGE", help="30d, 12h, 2w or 90m (minutes)")
    p.add_argument("--job", metavar="JOB", help="only the runs of this distributed job")
    p.set_defaults(verb="prune")

    p = sub.add_parser("devices", help="where a saved model's weights and ops run",
                       description="Load a SavedModel directory, a .keras or a .h5 file in a subprocess; list its "
                                   "variables and the device of each, call it once on zeros and list where its "
                                   "ops ran (counts, top ops by time per device, ops without a GPU kernel).")
    p.add_argument("path", metavar="PATH", help="SavedModel directory, .keras or .h5 file")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="the tensorgauge.devices/1 document, to stdout or PATH")
    p.add_argument("--device", metavar="DEVICE", help="load under tf.device(DEVICE), e.g. /CPU:0 or /GPU:0")
    p.add_argument("--input-shape", action="append", metavar="SHAPE",
                   help="the probe's input shape, e.g. 1,28,28,3 (once per input; default: from the model)")
    p.add_argument("--logical-cpus", type=int, metavar="N",
                   help="split the CPU into N logical devices (to try device scopes without a GPU)")
    p.set_defaults(verb="devices")

    p = sub.add_parser("env", help="this machine's fingerprint: CPU, cores allowed, memory, GPU, TensorFlow build",
                       description="The environment fingerprint saved with every run, for this machine and "
                                   "this Python (TensorFlow is imported to read its build, if installed).")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.env/1 document")
    p.set_defaults(verb="env")

    p = sub.add_parser("bench", parents=[common], help="run the standard benchmark suite and write a bundle",
                       description="numpy matmul, TensorFlow matmul, a dense model trained at batch 16/128/512, "
                                   "a tf.data pipeline, a save and load; recorded as a run (cores busy and peak "
                                   "memory per benchmark) and written as a bundle for 'compare'. "
                                   "--quick: about 15 s on 2 cores; full: about 35 s.")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="bundle file (default tensorgauge-bench-RUN_ID.json in the current folder)")
    p.set_defaults(verb="bench")

    p = sub.add_parser("report", parents=[common], help="write a self-contained HTML report of a run (or two)",
                       description="One HTML file that works offline: cores busy over time with phases and "
                                   "steps, a per-CPU heatmap, memory, GPU, the step-time histogram, the phase "
                                   "table, findings and the environment; with two runs (ids, names or bundle "
                                   "files), their comparison first.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="one run, or two to compare")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html")
    _window_arguments(p, "draw only this stretch of one run, every sample (e.g. --from 3h10m --to 3h12m)")
    p.set_defaults(verb="report")

    p = sub.add_parser("export", parents=[common], help="write a run to a portable bundle file")
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.set_defaults(verb="export")

    p = sub.add_parser("import", parents=[common], help="add a run from a bundle file to the store")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(verb="import")

    p = sub.add_parser("compare", parents=[common], help="compare two runs or bundles and explain the difference",
                       description="A and B are run ids/names or bundle files (from bench or export). Shows the "
                                   "environment differences, each benchmark's or phase's ratio, and a ranked "
                                   "explanation tying result differences to environment differences.")
    p.add_argument("a", metavar="A", nargs="?")
    p.add_argument("b", metavar="B", nargs="?")
    p.add_argument("--job", metavar="JOB", help="instead of A and B: every worker of a distributed job, side by "
                                                "side, and the straggler")
    p.add_argument("--all", action="store_true", help="with --job: a line per worker, however many there are "
                                                      "(by default, past 20 workers: their spread and the slowest)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.compare/1 document")
    p.set_defaults(verb="compare")

    p = sub.add_parser("check", parents=[common], help="fail a run that got slower or heavier than its baseline",
                       description="RUN against BASELINE (a named baseline, a bundle file, or a run): each fit/"
                                   "evaluate/predict's steady step, CPU time and RSS peak. Exit 0 within the limits "
                                   "(or within the run-to-run noise), 1 beyond them, with what changed in the job, "
                                   "2 for bad input.")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--against", required=True, metavar="BASELINE")
    p.add_argument("--max-slower", metavar="SHARE", help="a step or the CPU time this much longer fails (10%%)")
    p.add_argument("--max-memory-growth", metavar="SHARE", help="an RSS peak this much larger fails (10%%)")
    p.add_argument("--no-new-findings", action="store_true", help="also fail on a finding the baseline did not have")
    p.add_argument("--format", default="text", choices=("text", "markdown", "junit"),
                   help="text (default), markdown (a CI job summary) or junit (a CI test report)")
    p.add_argument("-o", "--output", metavar="PATH", help="write the output there instead of stdout")
    p.add_argument("--json", metavar="PATH", help="also write the tensorgauge.check/1 document")
    p.add_argument("--config", metavar="PATH", help="limits from a TOML file's [tool.tensorgauge.check] table "
                                                    "(default: ./pyproject.toml when there is one; flags win)")
    p.set_defaults(verb="check")

    p = sub.add_parser("baseline", parents=[common], help="save, list or remove named baselines for 'check'",
                       description="save NAME RUN keeps the run as a bundle in the baselines folder beside the "
                                   "store; list shows them; rm NAME removes one.")
    p.add_argument("action", choices=("save", "list", "rm"))
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.set_defaults(verb="baseline")

    p = sub.add_parser("explain", help="what a finding means, how it is measured, its fix and how to check it",
                       description="Print the page of the finding ID (as `show` names it: input_bound, stalls, "
                                   "...): what it means, how it is measured, when it fires, an example, the fix "
                                   "and how to check it. Without ID, list the ids.")
    p.add_argument("id", nargs="?", metavar="ID", help="a finding id; none: list them")
    p.set_defaults(verb="explain")

    p = sub.add_parser("demo", parents=[common], help="record a built-in small Keras job and show it",
                       description="Train, save, load and predict with a small Keras model on synthetic data "
                                   "(about 20 s on 2 cores) under 'tensorgauge run', then show the run and write "
                                   "its HTML report beside the store. "
                                   "--scenario runs a job with a known cause instead, with --diagnose: "
                                   "input-bound, eager, eager-loop, thread-limited, healthy.")
    p.add_argument("--scenario", default="default", metavar="NAME",
                   help="default, input-bound, eager, eager-loop, thread-limited or healthy")
    p.add_argument("--json", metavar="PATH", help="also write the run's report as JSON")
    p.set_defaults(verb="demo")
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
        return _dispatch(args)
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
