"""The ``tensorgauge`` command: parses arguments and calls the library.

``main(argv) -> int``. Problems the user can fix print one line on stderr and
exit 2; ``run`` exits with the job's own exit code (128+N for signal N).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

from tensorgauge import __version__
from tensorgauge.errors import TensorgaugeError

PROG = "tensorgauge"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise TensorgaugeError(f"{message} (see '{self.prog} --help')")


def _console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output has no width: rich's default of 80 columns would fold the phase table.
    width = None if stream.isatty() else 132
    return Console(stderr=stderr, highlight=False, width=width)


def _open_store(args, create: bool = True):
    from tensorgauge.store import Store

    return Store.open(args.store, create=create)


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.01 <= value <= 60:
        raise argparse.ArgumentTypeError(f"interval must be between 0.01 and 60 seconds, got {text}")
    return value


def _write_text(text: str, destination: str) -> None:
    """``text`` to stdout (``-``) or a file; an unwritable file is one line."""
    if destination == "-":
        sys.stdout.write(text + "\n")
        return
    try:
        Path(destination).write_text(text + "\n")
    except OSError as exc:
        raise TensorgaugeError(f"cannot write {destination}: {exc.strerror}") from None


def _write_json(report, destination: str) -> None:
    _write_text(json.dumps(report.to_dict(), indent=2, default=str), destination)


def _record(args, command: list[str], name: str | None) -> tuple[int, str]:
    """Run ``command`` under the monitor; print where it went; return (the job's exit code, run id)."""
    from tensorgauge.report import RunReport
    from tensorgauge.runner import resolve_command, run

    resolve_command(command)  # before the store: a typo should not create anything
    budget = _budget(args)
    observers: list = []
    if getattr(args, "tensorboard", None):
        from tensorgauge.render.tensorboard import TensorBoardWriter

        observers.append(TensorBoardWriter(args.tensorboard))
    exporter = None
    if getattr(args, "prometheus", None):
        from tensorgauge.render.prometheus import PrometheusExporter

        exporter = PrometheusExporter(args.prometheus)
        observers.append(exporter)
    store = _open_store(args)
    checkpoint_dir = None
    if budget is not None and budget.max_memory_bytes is not None:
        checkpoint_dir = getattr(args, "checkpoint", None) or str(default_checkpoint_dir(store.data_dir, command))
    err = _console(stderr=True)
    quiet = getattr(args, "quiet", False)
    if getattr(args, "diagnose", False) and os.environ.get("TF_CONFIG") and not quiet:
        err.print("[yellow]tensorgauge: note: --diagnose profiles 10 training steps; under "
                  "MultiWorkerMirroredStrategy, TensorFlow 2.21 crashed a worker in that window in about 1 run "
                  "in 12 here (a TensorFlow bug). Run without --diagnose where a crash costs you.[/yellow]")

    def started(record):
        if not quiet:
            err.print(f"[dim]tensorgauge: recording run {record.run_id} every {args.interval:g} s "
                      f"into {store.location}[/dim]")
        if exporter is not None:
            exporter.start(record)
            if not quiet:
                err.print(f"[dim]tensorgauge: Prometheus metrics on http://{exporter.host}:{exporter.port}/metrics[/dim]")
        if getattr(args, "live", False) and err.is_terminal:
            from tensorgauge.render.live import LiveView

            cores = float((record.env.get("host") or {}).get("cores_allowed") or 1)
            observers.append(LiveView(err, record.run_id, cores))

    try:
        result = run(command, store, interval_seconds=args.interval, name=name,
                     hook=not getattr(args, "no_hook", False), on_start=started, budget=budget,
                     checkpoint_dir=checkpoint_dir, diagnose=getattr(args, "diagnose", False), observers=observers,
                     job=getattr(args, "job", None))
    finally:
        for observer in observers:
            observer.close()
    if result.warning:
        err.print(f"tensorgauge: warning: {result.warning}")
        return result.exit_code, result.record.run_id
    report = RunReport.load(store, result.record.run_id)
    if getattr(args, "json", None):
        _write_json(report, args.json)
    if not quiet:
        from tensorgauge.render.terminal import outcome
        from tensorgauge.units import format_bytes, format_seconds

        s = report.summary
        err.print(f"[dim]tensorgauge: run {result.record.run_id}: {outcome(result.record)}, "
                  f"{format_seconds(result.record.wall_seconds)} wall, {s.cpu_seconds:.2f} CPU-s, "
                  f"{s.cores_busy_mean:.2f} cores mean, RSS peak {format_bytes(s.rss_peak_bytes)}, "
                  f"{len(report.phases)} phases — tensorgauge show {result.record.run_id}[/dim]")
    store.close()
    return result.exit_code, result.record.run_id


def default_checkpoint_dir(data_dir: Path, command: list[str]) -> Path:
    """One folder per command line and working folder: running it again resumes."""
    import hashlib

    key = hashlib.sha1(json.dumps([str(Path.cwd()), command]).encode()).hexdigest()[:12]
    return data_dir / "checkpoints" / key


def _budget(args):
    """The checked budget from --max-memory/--max-cpus/--max-gpu-memory, or None."""
    if getattr(args, "max_memory", None) is None and getattr(args, "max_cpus", None) is None \
            and getattr(args, "max_gpu_memory", None) is None:
        return None
    import psutil

    from tensorgauge.budget.limits import make_budget
    from tensorgauge.sources.cgroup import cores_allowed

    return make_budget(args.max_memory, args.max_cpus, args.max_gpu_memory,
                       ram_bytes=psutil.virtual_memory().total, cores_allowed=cores_allowed())


def cmd_run(args) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.try_fixes:
        return _try_fixes(args, command)
    return _record(args, command, args.name)[0]


def _try_fixes(args, command: list[str]) -> int:
    from tensorgauge.render.terminal import render_trials
    from tensorgauge.runner import resolve_command
    from tensorgauge.tryfixes import try_fixes

    resolve_command(command)
    store = _open_store(args)
    err = _console(stderr=True)
    trials = try_fixes(command, store, progress=lambda line: err.print(f"[dim]tensorgauge: {line}[/dim]"))
    render_trials(_console(), trials)
    if args.json:
        _write_text(json.dumps(trials.to_dict(), indent=2), args.json)
    return 0


def cmd_runs(args) -> int:
    from tensorgauge.render.terminal import render_runs
    from tensorgauge.store import default_store_path, is_url

    location = args.store or str(default_store_path())
    if not is_url(location) and not Path(location).exists():
        render_runs(_console(), [], {})
        return 0
    store = _open_store(args, create=False)
    render_runs(_console(), store.runs(), store.peaks())
    return 0


def cmd_show(args) -> int:
    from tensorgauge.render.terminal import render_run
    from tensorgauge.report import RunReport

    store = _open_store(args, create=False)
    report = RunReport.load(store, args.run)
    if args.json:
        _write_json(report, args.json)
        if args.json == "-":
            return 0
    render_run(_console(), report)
    return 0


def cmd_rm(args) -> int:
    store = _open_store(args, create=False)
    records = [store.run(ref) for ref in args.runs]  # all resolve before any is deleted
    for record in records:
        store.delete_run(record.run_id)
        print(f"removed {record.run_id}")
    return 0


def cmd_demo(args) -> int:
    from tensorgauge.render.terminal import render_run
    from tensorgauge.report import RunReport
    from tensorgauge.scenarios import SCENARIOS

    if args.scenario not in SCENARIOS:
        choices = ", ".join(SCENARIOS)
        raise TensorgaugeError(f"no scenario '{args.scenario}' (choose from: {choices})")
    if importlib.util.find_spec("tensorflow") is None:
        raise TensorgaugeError("the demo needs TensorFlow: pip install 'tensorgauge[tensorflow]'")
    module, _ = SCENARIOS[args.scenario]
    args.interval, args.quiet, args.diagnose = 0.1, False, args.scenario != "default"
    name = "demo" if args.scenario == "default" else f"scenario {args.scenario}"
    exit_code, run_id = _record(args, [sys.executable, "-m", module], name=name)
    store = _open_store(args, create=False)
    report = RunReport.load(store, run_id)
    _console().print()
    render_run(_console(), report)
    if importlib.util.find_spec("vl_convert") is None:
        _console().print("For an HTML report of this run: pip install 'tensorgauge[report]', then "
                         f"tensorgauge report {run_id} -o report.html")
        return exit_code
    from tensorgauge.render.html import run_page

    page = store.data_dir / "reports" / f"{run_id}.html"
    try:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(run_page(report))
    except OSError as exc:
        raise TensorgaugeError(f"cannot write the report {page}: {exc.strerror}") from None
    _console().print(f"\nReport: {page}")
    return exit_code


def cmd_devices(args) -> int:
    from tensorgauge.analyse.placement import summarise_audit
    from tensorgauge.placement import audit_model, model_format
    from tensorgauge.sources.fingerprint import driver_gpus
    from tensorgauge.render.terminal import render_devices

    model_format(Path(args.path))  # a missing file or a non-model is named first, TensorFlow or not
    if importlib.util.find_spec("tensorflow") is None:
        raise TensorgaugeError("devices needs TensorFlow: pip install 'tensorgauge[tensorflow]'")
    if args.logical_cpus is not None and not 1 <= args.logical_cpus <= 64:
        raise TensorgaugeError(f"--logical-cpus must be between 1 and 64, got {args.logical_cpus}")
    progress = None if args.json else lambda line: _console(stderr=True).print(f"[dim]tensorgauge: {line}[/dim]")
    raw = audit_model(args.path, device=args.device, input_shapes=args.input_shape, logical_cpus=args.logical_cpus,
                      progress=progress)
    result = summarise_audit({**raw, "path": str(args.path)}, driver_gpus())
    if args.json:
        _write_text(json.dumps(result, indent=2), args.json)
        if args.json == "-":
            return 0
    render_devices(_console(), result)
    return 0


def cmd_env(args) -> int:
    from tensorgauge.render.compare import render_env
    from tensorgauge.environment import environment

    env = environment(progress=None if args.json else
                      lambda line: _console(stderr=True).print(f"[dim]tensorgauge: {line}[/dim]"))
    if args.json:
        _write_text(json.dumps({"schema": "tensorgauge.env/1", **env}, indent=2), args.json)
        return 0
    render_env(_console(), env)
    return 0


def cmd_bench(args) -> int:
    from tensorgauge.analyse.bench import bench_results
    from tensorgauge.bench import run_bench
    from tensorgauge.bundle import export_run
    from tensorgauge.render.compare import render_bench

    store = _open_store(args)
    report = run_bench(store, quick=args.quick)
    render_bench(_console(), bench_results(report.events, report.phases), report.record.run_id)
    out = args.output or f"tensorgauge-bench-{report.record.run_id}.json"
    export_run(store, report.record.run_id).write(out)
    _console().print(f"bundle: {out}  (compare it with: tensorgauge compare {out} OTHER)")
    return 0


def cmd_export(args) -> int:
    from tensorgauge.bundle import export_run

    store = _open_store(args, create=False)
    bundle = export_run(store, args.run)
    bundle.write(args.output)
    print(f"exported {bundle.record.run_id} to {args.output}")
    return 0


def cmd_import(args) -> int:
    from tensorgauge.bundle import import_bundle, read

    bundle = read(args.file)  # validated in full before the store is touched
    run_id = import_bundle(_open_store(args), bundle)
    print(f"imported {run_id}")
    return 0


def _side(args, ref: str):
    from tensorgauge.analyse.compare import Side
    from tensorgauge.bundle import analyse, read
    from tensorgauge.report import RunReport

    if Path(ref).is_file():
        return Side(Path(ref).name, analyse(read(ref)))
    report = RunReport.load(_open_store(args, create=False), ref)
    return Side(report.record.name or report.record.run_id, report)


def cmd_compare(args) -> int:
    from tensorgauge.analyse.compare import compare
    from tensorgauge.render.compare import render_compare

    if args.job:
        return _compare_job(args)
    if not args.a or not args.b:
        raise TensorgaugeError("compare takes two runs or bundles (A B), or --job JOB")
    comparison = compare(_side(args, args.a), _side(args, args.b))
    if args.json:
        _write_text(json.dumps(comparison.to_dict(), indent=2), args.json)
        return 0
    render_compare(_console(), comparison)
    return 0


def cmd_report(args) -> int:
    import gc

    from tensorgauge.render.html import comparison_page, run_page

    gc.disable()  # a one-hour run loads ~1M small objects that all live to the end: no cycles to find

    if len(args.runs) > 2:
        raise TensorgaugeError("report takes one run, or two to compare")
    sides = [_side(args, ref) for ref in args.runs]
    if len(sides) == 1:
        page = run_page(sides[0].report)
    else:
        from tensorgauge.analyse.compare import compare

        page = comparison_page(sides[0], sides[1], compare(*sides))
    _write_text(page, args.output)
    if args.output != "-":
        print(f"report: {args.output}")
    return 0


def _compare_job(args) -> int:
    from tensorgauge.analyse.straggler import straggler, worker_row
    from tensorgauge.render.compare import render_job
    from tensorgauge.report import RunReport

    store = _open_store(args, create=False)
    records = [r for r in store.runs() if r.job_id == args.job]
    if not records:
        jobs = sorted({r.job_id for r in store.runs() if r.job_id})
        raise TensorgaugeError(f"no runs of job '{args.job}' in {store.location}"
                               + (f" (jobs: {', '.join(jobs[-5:])})" if jobs else ""))
    rows = sorted((worker_row(RunReport.load(store, r.run_id)) for r in records), key=lambda w: w.worker)
    finding = straggler(rows)
    if args.json:
        _write_text(json.dumps({"schema": "tensorgauge.job/1", "job": args.job,
                                "workers": [w.to_dict() for w in rows],
                                "findings": [finding.to_dict()] if finding else []}, indent=2), args.json)
        return 0
    render_job(_console(), args.job, rows, finding)
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
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
    p.add_argument("--interval", type=_interval, default=0.1, metavar="S", help="seconds between samples (0.1)")
    p.add_argument("--name", help="a name for the run (usable wherever a run id is)")
    p.add_argument("--json", metavar="PATH", help="also write the run's report as JSON (- for stdout)")
    p.add_argument("--no-hook", action="store_true", help="record from outside only: no phases")
    p.add_argument("--diagnose", action="store_true",
                   help="also profile a window of 10 training steps to measure the input pipeline's share")
    p.add_argument("--try-fixes", action="store_true",
                   help="time a short window of the first fit as it is and with each applicable fix "
                        "(parallel map, prefetch, eager off, thread pools), and report each one's speedup")
    p.add_argument("--max-memory", metavar="SIZE",
                   help="memory budget for the job's process tree: 10%% of RAM, 4GiB, 512MiB. At 90%% "
                        "training is checkpointed and stopped (exit 75); past 100%% the job is killed")
    p.add_argument("--max-cpus", metavar="N", help="CPU budget in cores, e.g. 1 or 1.5: thread pools, "
                                                   "affinity and (where permitted) a cgroup quota")
    p.add_argument("--max-gpu-memory", metavar="SIZE", help="GPU memory per GPU for TensorFlow, e.g. 8GiB")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="where a budget stop leaves a resumable checkpoint (default: one folder per "
                        "command beside the store; run the same command again to resume)")
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
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("runs", parents=[common], help="list recorded runs")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", parents=[common], help="show one run: summary, phases, account")
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="the tensorgauge.run/1 document, to stdout or PATH")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("rm", parents=[common], help="delete runs")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.set_defaults(func=cmd_rm)

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
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("env", help="this machine's fingerprint: CPU, cores allowed, memory, GPU, TensorFlow build",
                       description="The environment fingerprint saved with every run, for this machine and "
                                   "this Python (TensorFlow is imported to read its build, if installed).")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.env/1 document")
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("bench", parents=[common], help="run the standard benchmark suite and write a bundle",
                       description="numpy matmul, TensorFlow matmul, a dense model trained at batch 16/128/512, "
                                   "a tf.data pipeline, a save and load; recorded as a run (cores busy and peak "
                                   "memory per benchmark) and written as a bundle for 'compare'. "
                                   "--quick: about 15 s on 2 cores; full: about 35 s.")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="bundle file (default tensorgauge-bench-RUN_ID.json in the current folder)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", parents=[common], help="write a self-contained HTML report of a run (or two)",
                       description="One HTML file that works offline: cores busy over time with phases and "
                                   "steps, a per-CPU heatmap, memory, GPU, the step-time histogram, the phase "
                                   "table, findings and the environment; with two runs (ids, names or bundle "
                                   "files), their comparison first.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="one run, or two to compare")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", parents=[common], help="write a run to a portable bundle file")
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", parents=[common], help="add a run from a bundle file to the store")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("compare", parents=[common], help="compare two runs or bundles and explain the difference",
                       description="A and B are run ids/names or bundle files (from bench or export). Shows the "
                                   "environment differences, each benchmark's or phase's ratio, and a ranked "
                                   "explanation tying result differences to environment differences.")
    p.add_argument("a", metavar="A", nargs="?")
    p.add_argument("b", metavar="B", nargs="?")
    p.add_argument("--job", metavar="JOB", help="instead of A and B: every worker of a distributed job, side by "
                                                "side, and the straggler")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.compare/1 document")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("demo", parents=[common], help="record a built-in small Keras job and show it",
                       description="Train, save, load and predict with a small Keras model on synthetic data "
                                   "(about 20 s on 2 cores) under 'tensorgauge run', then show the run and write "
                                   "its HTML report beside the store. "
                                   "--scenario runs a job with a known cause instead, with --diagnose: "
                                   "input-bound, eager, eager-loop, thread-limited, healthy.")
    p.add_argument("--scenario", default="default", metavar="NAME",
                   help="default, input-bound, eager, eager-loop, thread-limited or healthy")
    p.add_argument("--json", metavar="PATH", help="also write the run's report as JSON")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "func", None):
            build_parser().print_help()
            return 2
        return args.func(args)
    except TensorgaugeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
