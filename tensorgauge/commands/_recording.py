"""Recording a command under the monitor, for ``run`` and ``demo``: the budget and
its checkpoint folder, the live observers, and the one-line summary at the end."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tensorgauge.commands._shared import check_output, console, open_store, write_json
from tensorgauge.errors import TensorgaugeError
from tensorgauge.render.text import safe
from tensorgauge.store.private import check_own, private_folder

if TYPE_CHECKING:
    from tensorgauge.monitoring.monitor import Exporter


@dataclass
class RecordOptions:
    store: str | None = None
    interval_seconds: float = 0.1
    name: str | None = None
    json_path: str | None = None
    hook: bool = True
    diagnose: str = "auto"  # "auto" (within its cost bound), "always" (--diagnose), "" (--no-diagnose)
    max_memory: str | None = None
    max_cpus: str | None = None
    max_gpu_memory: str | None = None
    checkpoint: str | None = None
    job: str | None = None
    live: bool = False
    tensorboard: str | None = None
    prometheus: str | None = None
    quiet: bool = False
    keep_job_on_failure: bool = False
    stop_grace_seconds: float = 10.0  # after a SIGTERM or SIGINT passed on, before the tree is killed
    extra_env: dict[str, str] | None = None  # set for the job (e.g. KERAS_BACKEND by --backends)
    observers: tuple[Exporter, ...] = ()  # more outputs of the live run (e.g. --find-batch-size's progress)


def _check_checkpoint_dir(folder: str) -> None:
    """The folder a budget stop writes its checkpoint to can be made and written."""
    path = Path(folder).expanduser()
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


def record(command: list[str], options: RecordOptions) -> tuple[int, str]:
    """Run ``command`` under the monitor; print where it went; return (the job's exit code, run id)."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.monitoring.runner import resolve_command, run

    resolve_command(command)  # before the store: a typo should not create anything
    if options.json_path:
        check_output(options.json_path, options.store)  # found now, not after an hour of training
    budget = make_budget(options)
    exporters: list[Exporter] = []
    if options.tensorboard:
        from tensorgauge.live.tensorboard import TensorBoardWriter

        exporters.append(TensorBoardWriter(options.tensorboard))
    prometheus = None
    if options.prometheus:
        from tensorgauge.live.prometheus import PrometheusExporter

        prometheus = PrometheusExporter(options.prometheus)
        exporters.append(prometheus)
    exporters.extend(options.observers)
    err = functools.cache(lambda: console(stderr=True))  # rich only when something is printed
    output = None
    if options.live and err().is_terminal:
        from tensorgauge.live.view import LiveView
        from tensorgauge.monitoring.job_output import JobOutput

        view = LiveView(err())
        exporters.append(view)
        output = JobOutput.for_terminal(2, view.job_lines, view.job_partial)  # the job's lines above the panel
    if options.checkpoint and budget is not None and budget.max_memory_bytes is not None:
        _check_checkpoint_dir(options.checkpoint)  # now (before anything is made), not when the budget fires
    with open_store(options.store, recording=True) as store:  # closed however the run ends
        if store.read_only:  # before the job starts: every sample would be lost
            raise TensorgaugeError(f"cannot record into {safe(store.location)}: it is read-only (a read-only file, "
                                   "folder or mount); give a writable store with --store")
        checkpoint_dir = None
        if budget is not None and budget.max_memory_bytes is not None:
            checkpoint_dir = options.checkpoint or str(private_folder(
                store.data_dir, default_checkpoint_dir(store.data_dir, command).relative_to(store.data_dir).parts,
                "the checkpoint folder", "another user could have put it there; remove it, or give --checkpoint DIR"))
            _check_checkpoint_dir(checkpoint_dir)
        if options.diagnose == "always" and os.environ.get("TF_CONFIG") and not options.quiet:
            err().print("[yellow]tensorgauge: note: --diagnose profiles 10 training steps; under "
                      "MultiWorkerMirroredStrategy, TensorFlow 2.21 crashed a worker in that window in about 1 run "
                      "in 12 here (a TensorFlow bug). Run without --diagnose where a crash costs you.[/yellow]")

        def started(run_record) -> None:
            if not options.quiet:
                _say(err(), f"[dim]tensorgauge: recording run {run_record.run_id} every {options.interval_seconds:g} s "
                          f"into {safe(store.location)}[/dim]")
            for exporter in exporters:
                exporter.start(run_record)
            if prometheus is not None and not options.quiet:
                _say(err(), f"[dim]tensorgauge: Prometheus metrics on http://{prometheus.host}:{prometheus.port}/metrics[/dim]")

        try:
            result = run(command, store, interval_seconds=options.interval_seconds, name=options.name,
                         hook=options.hook, on_start=started, budget=budget, checkpoint_dir=checkpoint_dir,
                         diagnose=options.diagnose, observers=exporters, job=options.job,
                         report=lambda line: _say(err(), f"tensorgauge: warning: {line}", markup=False),
                         keep_job_on_failure=options.keep_job_on_failure, extra_env=options.extra_env,
                         stop_grace_seconds=options.stop_grace_seconds, output=output)
        finally:
            for exporter in exporters:
                exporter.close()
        if result.warning:
            return result.exit_code, result.record.run_id
        record_ = result.record
        analysed = None
        try:  # analysed once, now, and stored with the run: reading it later costs the same however long it ran
            analysed = RunReport.load(store, record_.run_id)
            if options.json_path:
                write_json(analysed.to_dict(), options.json_path)
        except TensorgaugeError as exc:  # the job's exit code stands; the run is in the store
            _say(err(), f"tensorgauge: warning: {safe(str(exc))} (the run is stored: tensorgauge show "
                      f"{record_.run_id} --json)", markup=False)
        if not options.quiet:  # from what the monitor saw: no reading back, however long the run
            from tensorgauge.render.terminal import outcome
            from tensorgauge.units import format_bytes, format_seconds

            wall = record_.wall_seconds or 0.0
            cpu = record_.cpu_seconds_total or 0.0
            budget = record_.budget or {}
            # Under a memory budget, its own figure (what the kernel charges): the one it acted on.
            peak = (f"memory peak {format_bytes(budget.get('peak_bytes'))} of the "
                    f"{format_bytes(budget['max_memory_bytes'])} budget" if budget.get("max_memory_bytes")
                    else f"RSS peak {format_bytes(result.rss_peak_bytes)}")
            _say(err(), f"[dim]tensorgauge: run {record_.run_id}: {outcome(record_)}, {format_seconds(wall)} wall, "
                      f"{cpu:.2f} CPU-s, {cpu / wall if wall > 0 else 0.0:.2f} cores mean, {peak}, "
                      f"{result.phases} phases — tensorgauge show {record_.run_id}[/dim]")
            stop = next((f for f in analysed.findings if f.id == "memory_budget"), None) if analysed else None
            if stop is not None:
                _say(err(), f"tensorgauge: {safe(stop.title)}. {safe(stop.fix)}", markup=False)
        return result.exit_code, result.record.run_id
