"""``tensorgauge run [options] -- COMMAND``: record a command, time fixes on it (--try-fixes), find
the batch that fits its memory budget (--find-batch-size), or run it once per Keras backend and
compare them (--backends)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable

from tensorgauge.commands._recording import RecordOptions, record
from tensorgauge.commands._shared import console, grace_seconds, open_store, progress_printer, write_text
from tensorgauge.errors import TensorgaugeError
from tensorgauge.live.exporters import registered
from tensorgauge.monitoring.limits import interval_option, run_name_option

BACKENDS = ("tensorflow", "jax", "torch")


def run(command: list[str], options: RecordOptions, try_fixes: bool = False, backends: str | None = None,
        find_batch_size: bool = False) -> int:
    if command and command[0] == "--":
        command = command[1:]
    chosen = [name for name, on in (("--try-fixes", try_fixes), ("--backends", backends),
                                    ("--find-batch-size", find_batch_size)) if on]
    if len(chosen) > 1:
        raise TensorgaugeError(f"{' and '.join(chosen)} cannot be combined: run one, then the other")
    if try_fixes:
        return _try_fixes(command, options)
    if find_batch_size:
        return _find_batch_size(command, options)
    if backends:
        return _backends(command, options, backends)
    return record(command, options)[0]


def parse_backends(text: str) -> list[str]:
    """``tensorflow,jax`` -> the backends, checked (at least two, each one Keras 3 knows)."""
    names = [b.strip().lower() for b in text.split(",") if b.strip()]
    names = ["torch" if b == "pytorch" else b for b in names]
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise TensorgaugeError(f"unknown Keras backend {', '.join(unknown)}: choose from {', '.join(BACKENDS)}")
    if len(set(names)) < 2:
        raise TensorgaugeError("--backends takes two backends or more, e.g. --backends tensorflow,jax")
    return list(dict.fromkeys(names))


# What installs each backend for the job's Python (PyTorch's own selector picks its CPU or CUDA build).
BACKEND_INSTALL = {"tensorflow": "pip install 'tensorgauge[tensorflow]'", "jax": "pip install 'tensorgauge[jax]'",
                   "torch": "pip install torch"}
_FIND_SPECS = ("import importlib.util, sys; "
               "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")


def job_python(command: list[str]) -> str | None:
    """The interpreter that runs ``command`` when it is one (``python``, ``python3.11``, a venv's), else None."""
    import os
    import re
    import shutil

    program = command[0] if command else ""
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(program)):
        return None
    return program if os.sep in program else shutil.which(program)


def missing_backends(command: list[str], names: list[str]) -> list[str]:
    """The backends the job's Python cannot import (``importlib.util.find_spec``), asked before any runs;
    none when the command is not a Python interpreter (a script or wrapper: its Python is not known)."""
    import importlib.util
    import os
    import subprocess
    import sys

    python = job_python(command)
    if python is None:
        return []
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return [n for n in names if importlib.util.find_spec(n) is None]
    try:
        found = subprocess.run([python, "-c", _FIND_SPECS, *names], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []  # the job's own run will tell
    return found.stdout.split() if found.returncode == 0 else []


def _backends(command: list[str], options: RecordOptions, text: str) -> int:
    """The job once per backend (``KERAS_BACKEND``), each a stored run; then each compared with the first."""
    from tensorgauge.analyse.compare import compare
    from tensorgauge.commands._shared import CommandStore, load_side
    from tensorgauge.monitoring.runner import resolve_command
    from tensorgauge.render.compare import render_compare

    names = parse_backends(text)
    resolve_command(command)
    missing = [n for n in missing_backends(command, names) if n in BACKEND_INSTALL]
    if missing:
        raise TensorgaugeError("--backends: " + "; ".join(f"{n} is not installed for the job's Python "
                                                          f"({BACKEND_INSTALL[n]})" for n in missing)
                               + "; nothing was run")
    say = progress_printer()
    runs: list[tuple[str, int, str]] = []
    for backend in names:
        say(f"running the job on Keras' {backend} backend (KERAS_BACKEND={backend})")
        env = {**(options.extra_env or {}), "KERAS_BACKEND": backend}
        code, run_id = record(command, dataclasses.replace(options, name=f"{options.name or 'backend'}: {backend}",
                                                           extra_env=env, json_path=None))
        runs.append((backend, code, run_id))
    failed = [(b, code, run_id) for b, code, run_id in runs if code != 0]
    for backend, code, run_id in failed:
        say(f"the job failed on the {backend} backend (exit {code}; is it installed for the job's Python?): "
            f"tensorgauge show {run_id}")
    done = [(b, run_id) for b, code, run_id in runs if code == 0]
    comparisons = []
    with CommandStore(options.store) as stores:
        for _, run_id in done[1:]:
            comparison = compare(load_side(stores, done[0][1]), load_side(stores, run_id))
            comparisons.append(comparison)
            render_compare(console(), comparison)
    if options.json_path:
        write_text(json.dumps({"schema": "tensorgauge.backends/1",
                               "runs": [{"backend": b, "exit_code": code, "run_id": run_id} for b, code, run_id in runs],
                               "comparisons": [c.to_dict() for c in comparisons]}, indent=2), options.json_path,
                   options.store)
    return failed[0][1] if failed else 0


def _try_fixes(command: list[str], options: RecordOptions) -> int:
    from tensorgauge.monitoring.runner import resolve_command
    from tensorgauge.monitoring.tryfixes import try_fixes
    from tensorgauge.render.terminal import render_trials

    resolve_command(command)
    with open_store(options.store) as store:
        trials = try_fixes(command, store, progress=progress_printer())
    render_trials(console(), trials)
    if options.json_path:
        write_text(json.dumps(trials.to_dict(), indent=2), options.json_path, options.store)
    return 0


FIND_SHARE_OF_AVAILABLE = 0.8  # without --max-memory: the budget the search keeps to


class TrialProgress:
    """--find-batch-size's progress: one line per trial as the job reports it (batch, peak, examples/s)."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def start(self, record) -> None:
        pass

    def observe(self, sample, events) -> None:
        from tensorgauge.hook.protocol import BatchTrial, Kind
        from tensorgauge.units import format_bytes

        for event in events:
            if event.kind != Kind.BATCH_TRIAL:
                continue
            trial = event.read(BatchTrial)
            rate = trial.get("examples_per_second")
            self.say(f"batch size {trial.get('batch_size')}: RSS peak {format_bytes(trial.get('peak_bytes'))}, "
                     + (f"failed ({trial['error']})" if trial.get("error") else
                        f"{rate:,.0f} examples/s" if rate else "no step timed"))

    def close(self, timeout: float | None = None) -> None:
        pass


def _find_batch_size(command: list[str], options: RecordOptions) -> int:
    """One recorded run whose first fit is tried at growing batch sizes (see
    :mod:`tensorgauge.hook.batch_finder`); prints the trials and the recommendation."""
    import psutil

    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.hook.protocol import FIND_BATCH_ENV
    from tensorgauge.monitoring.limits import parse_memory
    from tensorgauge.render.terminal import render_batch_search

    say = progress_printer() if not options.quiet else (lambda line: None)
    memory = psutil.virtual_memory()
    if options.max_memory:
        budget = parse_memory(options.max_memory, memory.total)
        say(f"finding the largest batch that keeps the job under its budget of {budget / 2**30:.2f} GiB")
    else:
        budget = int(memory.available * FIND_SHARE_OF_AVAILABLE)
        say(f"no --max-memory: finding the largest batch within {FIND_SHARE_OF_AVAILABLE:.0%} of the memory "
            f"available now ({budget / 2**30:.2f} GiB)")
    env = {**(options.extra_env or {}), FIND_BATCH_ENV: str(budget)}
    code, run_id = record(command, dataclasses.replace(options, name=options.name or "find batch size",
                                                       extra_env=env, observers=(*options.observers,
                                                                                 TrialProgress(say))))
    with open_store(options.store) as store:
        report = RunReport.load(store, run_id)
    search = report.memory.get("batch_size_search")
    if search is None:
        raise TensorgaugeError("the job ended before its first fit: there was nothing to try "
                               f"(exit {code}; tensorgauge show {run_id})")
    render_batch_search(console(), search)
    return code


VERB = "run"
HELP = "run a command and record its CPU, memory, GPU and phases"
DESCRIPTION = ("Run COMMAND as a child, sample it every --interval seconds and record it. "
               "Exits with COMMAND's exit code (128+N when signal N ended it).")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge run``."""
    p.add_argument("--interval", type=interval_option, default=0.1, metavar="S", help="seconds between samples (0.1)")
    p.add_argument("--name", type=run_name_option, help="a name for the run (usable wherever a run id is)")
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
    for spec in registered():
        spec.add_argument(p)
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing of tensorgauge's own")
    p.add_argument("--stop-grace", type=grace_seconds, default=10.0, metavar="S",
                   help="after a SIGTERM or SIGINT passed on to the job, seconds it has to end before its whole "
                        "process tree is killed (10, as docker stop); a second SIGINT kills it at once")
    p.add_argument("--keep-job-on-failure", action="store_true",
                   help="if tensorgauge itself fails or is killed, leave the job running unmonitored (by default "
                        "the job's whole process tree is stopped with it)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def main(args: argparse.Namespace) -> int:
    return run(list(args.command), RecordOptions.from_args(args), try_fixes=args.try_fixes, backends=args.backends,
               find_batch_size=args.find_batch_size)
