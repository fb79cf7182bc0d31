"""Recording a command under the monitor, for ``run`` and ``demo``: the budget and
its checkpoint folder, the live observers, and the one-line summary at the end."""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tensorgauge.commands._shared import check_output, console, open_store, write_json
from tensorgauge.errors import TensorgaugeError
from tensorgauge.monitoring.options import RunOptions
from tensorgauge.render.text import safe
from tensorgauge.store.private import check_own, private_folder

if TYPE_CHECKING:
    from tensorgauge.live.exporters import ExporterSpec
    from tensorgauge.monitoring.monitor import Exporter


@dataclass
class RecordOptions(RunOptions):
    """What ``run`` (and ``demo``) record by, built once from the flags (:func:`from_args`): the runner's
    own options, and what only the command needs (the store, outputs, the budget as given)."""

    store: str | None = None
    json_path: str | None = None
    max_memory: str | None = None
    max_cpus: str | None = None
    max_gpu_memory: str | None = None
    checkpoint: str | None = None
    live: bool = False
    exports: dict[str, str] = field(default_factory=dict)  # exporter name -> its flag's value (live.exporters)
    quiet: bool = False
    observers: tuple[Exporter, ...] = ()  # more outputs of the live run (e.g. --find-batch-size's progress)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RecordOptions:
        """From ``run``'s parsed flags (the exporters' from their declarations)."""
        from tensorgauge.live.exporters import chosen, registered

        return cls(store=args.store, interval_seconds=args.interval, name=args.name, json_path=args.json,
                   hook=not args.no_hook, diagnose=args.diagnose, max_memory=args.max_memory,
                   max_cpus=args.max_cpus, max_gpu_memory=args.max_gpu_memory, checkpoint=args.checkpoint,
                   job=args.job, live=args.live, exports=chosen(args, registered()), quiet=args.quiet,
                   keep_job_on_failure=args.keep_job_on_failure, stop_grace_seconds=args.stop_grace)


def _check_checkpoint_dir(folder: str) -> None:
    """The folder a budget stop writes its checkpoint to can be made and written."""
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise TensorgaugeError(f"--checkpoint: {safe(folder)} is a file, not a folder: give a folder for the checkpoint")
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise TensorgaugeError(f"--checkpoint: cannot make {safe(folder)}: {exc.strerror}") from None
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise TensorgaugeError(f"--checkpoint: cannot write into {safe(folder)}")
    check_own(path, "--checkpoint:", "the job's checkpoint would be theirs to read or replace; give a folder of "
              "your own")


def default_checkpoint_dir(data_dir: Path, command: list[str]) -> Path:
    """One folder per command line and working folder: running it again resumes."""
    try:
        here = str(Path.cwd())
    except OSError:  # the working folder was deleted
        here = os.environ.get("PWD", "")
    key = hashlib.sha1(json.dumps([here, command]).encode()).hexdigest()[:12]
    return data_dir / "checkpoints" / key


def make_budget(options: RecordOptions):
    """The checked budget from --max-memory/--max-cpus/--max-gpu-memory, or None."""
    if options.max_memory is None and options.max_cpus is None and options.max_gpu_memory is None:
        return None
    import psutil

    from tensorgauge.monitoring.limits import make_budget as checked_budget
    from tensorgauge.sources.cgroup import cores_allowed

    return checked_budget(options.max_memory, options.max_cpus, options.max_gpu_memory,
                          ram_bytes=psutil.virtual_memory().total, cores_allowed=cores_allowed())


def _say(console, text: str, **kwargs) -> None:
    """Print for the user; a closed or broken stderr must not stop the monitor (the job runs on)."""
    try:
        console.print(text, **kwargs)
    except (OSError, ValueError):
        pass


class _Outputs:
    """The run's exporters (those asked for, by name, from the registry; then the caller's observers and
    the live view): made before the job starts, concluded with the analysed run, closed however it ends."""

    def __init__(self, options: RecordOptions, say: Callable[[str], None]):
        from tensorgauge.live.exporters import registered

        self.quiet = options.quiet
        specs = {spec.name: spec for spec in registered()}
        self.say = say
        self.named: list[tuple[ExporterSpec, Exporter]] = []
        self.all: list[Exporter] = []
        self.closed: dict[str, dict[str, int]] | None = None
        try:
            for name, value in options.exports.items():
                if name not in specs:
                    raise TensorgaugeError(f"no exporter named {name!r} (installed: {', '.join(specs)})")
                exporter = specs[name].factory(value)
                self.named.append((specs[name], exporter))
                self.all.append(exporter)
        except BaseException:
            self.close()
            raise
        self.all.extend(options.observers)

    def start(self, record) -> None:
        for spec, exporter in self.named:
            message = spec.start_message(exporter)
            if message and not self.quiet:
                self.say(f"[dim]tensorgauge: {safe(message)}[/dim]")
        for exporter in self.all:
            exporter.start(record)

    def conclude(self, document: dict) -> None:
        for exporter in self.all:
            conclude = getattr(exporter, "conclude", None)
            if conclude is not None:
                try:
                    conclude(document)
                except Exception as exc:  # an output's failure never changes the job's outcome
                    self.say(f"tensorgauge: warning: {safe(type(exporter).__name__)} failed: "
                             f"{type(exc).__name__}: {safe(str(exc))}")

    def close(self) -> dict[str, dict[str, int]]:
        """Each closed within its bound; what each named one dropped (name -> {"dropped": N})."""
        from tensorgauge.monitoring.monitor import EXPORTER_CLOSE_SECONDS

        if self.closed is not None:
            return self.closed
        self.closed = {}
        for exporter in self.all:
            try:
                exporter.close(EXPORTER_CLOSE_SECONDS)
            except Exception as exc:
                self.say(f"tensorgauge: warning: {safe(type(exporter).__name__)} failed to close: "
                         f"{type(exc).__name__}: {safe(str(exc))}")
        self.closed = {spec.name: {"dropped": dropped} for spec, exporter in self.named
                       if isinstance(dropped := getattr(exporter, "dropped", None), int)}
        return self.closed


def record(command: list[str], options: RecordOptions) -> tuple[int, str]:
    """Run ``command`` under the monitor; print where it went; return (the job's exit code, run id)."""
    from tensorgauge.monitoring.runner import resolve_command

    resolve_command(command)  # before the store: a typo should not create anything
    if options.json_path:
        check_output(options.json_path, options.store)  # found now, not after an hour of training
    budget = make_budget(options)
    err = functools.cache(lambda: console(stderr=True))  # rich only when something is printed
    outputs = _Outputs(options, lambda line: _say(err(), line))
    try:
        return _record(command, options, budget, outputs, err)
    finally:
        outputs.close()


def _live_view(options: RecordOptions, outputs: _Outputs, err):
    """``--live`` on a terminal: the live panel (an exporter) and the job's output above it."""
    if not (options.live and err().is_terminal):
        return None
    from tensorgauge.live.view import LiveView
    from tensorgauge.monitoring.job_output import JobOutput

    view = LiveView(err())
    outputs.all.append(view)
    return JobOutput.for_terminal(2, view.job_lines, view.job_partial)  # the job's lines above the panel


def _checkpoint_dir(options: RecordOptions, budget, store, command: list[str]) -> str | None:
    """Where a memory budget's stop leaves its checkpoint (checked writable now), or None."""
    if budget is None or budget.max_memory_bytes is None:
        return None
    checkpoint_dir = options.checkpoint or str(private_folder(
        store.data_dir, default_checkpoint_dir(store.data_dir, command).relative_to(store.data_dir).parts,
        "the checkpoint folder", "another user could have put it there; remove it, or give --checkpoint DIR"))
    _check_checkpoint_dir(checkpoint_dir)
    return checkpoint_dir


def _record(command: list[str], options: RecordOptions, budget, outputs: _Outputs, err) -> tuple[int, str]:
    from tensorgauge.monitoring.runner import run

    output = _live_view(options, outputs, err)
    if options.checkpoint:  # now (before anything is made), not when the budget fires
        _check_checkpoint_dir(options.checkpoint)
        if (budget is None or budget.max_memory_bytes is None) and not options.quiet:
            _say(err(), "tensorgauge: note: --checkpoint is where a memory budget's stop saves; without --max-memory "
                 "nothing is saved there")
    with open_store(options.store, recording=True) as store:  # closed however the run ends
        if store.read_only:  # before the job starts: every sample would be lost
            raise TensorgaugeError(f"cannot record into {safe(store.location)}: it is read-only (a read-only file, "
                                   "folder or mount); give a writable store with --store")
        checkpoint_dir = _checkpoint_dir(options, budget, store, command)
        if options.diagnose == "always" and os.environ.get("TF_CONFIG") and not options.quiet:
            err().print("[yellow]tensorgauge: note: --diagnose profiles 10 training steps; under "
                      "MultiWorkerMirroredStrategy, TensorFlow 2.21 crashed a worker as that window ended in about 1 run "
                      "in 3 here (a TensorFlow bug). Run without --diagnose where a crash costs you.[/yellow]")

        def started(run_record) -> None:
            if not options.quiet:
                _say(err(), f"[dim]tensorgauge: recording run {run_record.run_id} every {options.interval_seconds:g} s "
                          f"into {safe(store.location)}[/dim]")
            outputs.start(run_record)

        result = run(command, store, options, on_start=started, budget=budget, checkpoint_dir=checkpoint_dir,
                     observers=outputs.all, output=output,
                     report=lambda line: _say(err(), f"tensorgauge: warning: {line}", markup=False))
        if result.warning:
            return result.exit_code, result.record.run_id
        analysed = _conclude(store, result, options, outputs, err)
        if not options.quiet:  # from what the monitor saw: no reading back, however long the run
            _say_outcome(result, analysed, err)
        return result.exit_code, result.record.run_id


def _conclude(store, result, options: RecordOptions, outputs: _Outputs, err):
    """The run analysed once, now, and stored with it (reading it later costs the same however long it
    ran); handed to the exporters, which are then closed; its JSON written with what they dropped."""
    from tensorgauge.analyse.run_report import RunReport

    run_id = result.record.run_id
    try:
        analysed = RunReport.load(store, run_id)
    except TensorgaugeError as exc:  # the job's exit code stands; the run is in the store
        _say(err(), f"tensorgauge: warning: {safe(str(exc))} (the run is stored: tensorgauge show "
                  f"{run_id} --json)", markup=False)
        return None
    document = analysed.to_dict()
    outputs.conclude(document)
    exports = _store_exports(store, result.record, outputs.close(), err)
    document["exports"] = exports
    if options.json_path:
        try:
            write_json(document, options.json_path, options.store)
        except TensorgaugeError as exc:
            _say(err(), f"tensorgauge: warning: {safe(str(exc))} (the run is stored: tensorgauge show "
                      f"{run_id} --json)", markup=False)
    return analysed


def _store_exports(store, record, exports: dict[str, dict[str, int]], err) -> dict[str, dict[str, int]] | None:
    """What the exporters dropped, said now and kept with the run (``show`` says it later); None: none counts."""
    for name, figures in exports.items():
        if figures["dropped"]:
            _say(err(), f"tensorgauge: warning: {name}: {figures['dropped']} export(s) dropped (nothing took "
                      "them; the job was not held up)", markup=False)
    if not exports:
        return None
    record.exports = exports
    try:
        store.save_run(record, create=False)  # not again where the run was removed meanwhile
    except TensorgaugeError as exc:  # the count was said; the job's exit code stands
        _say(err(), f"tensorgauge: warning: the exports' count was not stored: {safe(str(exc))}", markup=False)
    return exports


def _say_outcome(result, analysed, err) -> None:
    """The one line at the end (and a memory budget's stop, with its fix)."""
    from tensorgauge.model import MEMORY_MEASURES
    from tensorgauge.render.terminal import outcome
    from tensorgauge.units import format_bytes, format_seconds

    record_ = result.record
    wall = record_.wall_seconds or 0.0
    cpu = record_.cpu_seconds_total or 0.0
    budget = record_.budget or {}
    # Under a memory budget, its own figure (what the kernel charges): the one it acted on; each named.
    counted = f" ({budget['memory_counted']})" if budget.get("memory_counted") else ""
    peak = (f"memory peak {format_bytes(budget.get('peak_bytes'))} of the "
            f"{format_bytes(budget['max_memory_bytes'])} budget{counted}" if budget.get("max_memory_bytes")
            else f"RSS peak {format_bytes(result.rss_peak_bytes)} "
                 f"({MEMORY_MEASURES.get(str(record_.memory_measure), MEMORY_MEASURES['rss_summed'])})")
    _say(err(), f"[dim]tensorgauge: run {record_.run_id}: {outcome(record_)}, {format_seconds(wall)} wall, "
              f"{cpu:.2f} CPU-s, {cpu / wall if wall > 0 else 0.0:.2f} cores mean, {peak}, "
              f"{result.phases} phases — tensorgauge show {record_.run_id}[/dim]")
    stop = next((f for f in analysed.findings if f.id == "memory_budget"), None) if analysed else None
    if stop is not None:
        _say(err(), f"tensorgauge: {safe(stop.title)}. {safe(stop.fix)}", markup=False)
