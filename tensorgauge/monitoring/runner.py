"""``tensorgauge run``: start the job as a child, sample it, record it.

The monitor is this process, never a thread in the job. It waits between ticks
in ``sigtimedwait`` so that the job's end (SIGCHLD) and Ctrl-C / SIGTERM wake it
at once; signals sent to the monitor alone are forwarded to the job, and a
Ctrl-C typed at the terminal (which the job receives itself) is not sent twice.
The loop itself (sample, budget, record, observers) is :class:`~.monitor.Monitor`.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook import channel as hook_channel
from tensorgauge.hook.protocol import DIAGNOSE_ENV, EVENTS_ENV, NO_CGROUP_ENV, NO_HOOK_ENV, RUN_ID_ENV, Kind
from tensorgauge.model import RunRecord
from tensorgauge.monitoring.budget import BudgetWatch, kill_tree
from tensorgauge.monitoring.limits import Budget
from tensorgauge.monitoring.monitor import Monitor, Observer, Sources
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.monitoring.run_files import RunFiles
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.sources import cgroup
from tensorgauge.sources.cluster import worker_identity
from tensorgauge.sources.process_tree import descendants
from tensorgauge.store import Store

HOOK_SITE_DIR = Path(__file__).parent.parent / "hook" / "_site"

_WAKE_SIGNALS = (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_SI_KERNEL = 0x80  # si_code of a signal the terminal generated (Ctrl-C, Ctrl-\)


@dataclass
class RunResult:
    record: RunRecord
    exit_code: int  # what ``tensorgauge run`` exits with
    warning: str | None = None  # recording stopped early (a full disk, a bug): the job ran on


def new_run_id() -> str:
    return f"{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def resolve_command(command: list[str]) -> list[str]:
    """Check the program exists before anything is recorded."""
    if not command:
        raise TensorgaugeError("nothing to run: give a command after '--', e.g. tensorgauge run -- python train.py")
    program = command[0]
    if os.sep in program:
        if not os.path.isfile(program):
            raise TensorgaugeError(f"command not found: {program}")
        if not os.access(program, os.X_OK):
            raise TensorgaugeError(f"command is not executable: {program}")
        return command
    if shutil.which(program) is None:
        raise TensorgaugeError(f"command not found: {program}")
    return command


def job_environment(events_path: str | None, run_id: str, hook: bool, base: dict | None = None) -> dict:
    """The job's environment: the caller's, plus the channel and the hook on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env[RUN_ID_ENV] = run_id
    if events_path:
        env[EVENTS_ENV] = events_path
    if hook:
        env.pop(NO_HOOK_ENV, None)
        parts = [str(HOOK_SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run(command: list[str], store: Store, *, interval_seconds: float = 0.1, name: str | None = None,
        hook: bool = True, on_start: Callable[[RunRecord], None] | None = None,
        budget: Budget | None = None, checkpoint_dir: str | None = None, diagnose: bool = False,
        extra_env: dict[str, str] | None = None, observers: Sequence[Observer] = (),
        job: str | None = None, sources: Sources | None = None,
        report: Callable[[str], None] | None = None) -> RunResult:
    """Run ``command`` to its end under the monitor and record it in ``store``.

    With a ``budget``, the job is kept inside it (see :mod:`tensorgauge.monitoring.budget`);
    ``checkpoint_dir`` is where a graceful stop leaves a resumable checkpoint; ``observers``
    see every sample and event as it is recorded (live view, TensorBoard, Prometheus);
    ``job`` groups the workers of one distributed job (else taken from ``TF_CONFIG``);
    ``sources``: where readings come from (the real ones by default); ``report``: where
    a problem of the monitor's own (an observer failing) is told."""
    command = resolve_command(command)
    sources = sources or Sources()
    clock = sources.clock
    run_id = new_run_id()
    files = RunFiles(run_id)
    events_path = files.events_path

    watch = None
    env = job_environment(events_path, run_id, hook)
    if diagnose:
        env[DIAGNOSE_ENV] = "1"
    env.update(extra_env or {})
    if budget is not None and not budget.empty:
        watch = BudgetWatch(budget, files.stop_path, checkpoint_dir)
        env.update(watch.environment())

    t0 = clock.now()
    started_at = dt.datetime.now().astimezone().isoformat(timespec="milliseconds")
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        files.remove()
        raise TensorgaugeError(f"cannot start {command[0]}: {exc.strerror}") from None
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE_SIGNALS)
    tree, group = sources.watch_tree(child.pid, run_id, not os.environ.get(NO_CGROUP_ENV))
    if watch:
        watch.apply(child.pid, group)

    paths = cgroup.cgroup_paths(child.pid)  # read now: /proc/PID goes with the job

    def oom_count() -> int | None:
        return group.oom_kills() if group else cgroup.oom_kill_count(paths)

    oom_before = oom_count()
    ended = _ChildEnd(child.pid)
    gpus = sources.open_gpus()
    try:
        job_id, worker = worker_identity(env, job)
        # "gpus": what the driver shows, whatever TensorFlow sees.
        record = RunRecord(run_id=run_id, command=list(command), started_at=started_at, name=name,
                           cwd=os.getcwd(), interval_seconds=interval_seconds, t0_monotonic=t0,
                           tree_source="cgroup" if group else "procfs", job_id=job_id,
                           env={"host": {**sources.host(), "gpus": gpus.names},
                                **({"worker": worker} if worker else {})})
        store.save_run(record)
        if on_start:
            on_start(record)
        recorder = Recorder(store, record, t0, clock)
        monitor = Monitor(Sampler(tree, sources.system, gpus, clock, t0), recorder,
                          hook_channel.EventReader(events_path), interval_seconds=interval_seconds, watch=watch,
                          kill=lambda: kill_tree(group.pids() if group else [child.pid, *descendants(child.pid)]),
                          observers=observers, report=report)
        monitor.run(ended.wait)
        end = clock.now()
    finally:
        gpus.close()
        if ended.status is None:  # the monitor failed before the job ended: wait for it all the same
            ended.wait(None)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        oom_after = oom_count()
        # The cgroup also counts children the job left running (rusage only has waited-for ones).
        group_cpu = (group.cpu_seconds() or 0.0) + getattr(tree, "cpu_before_seconds", 0.0) if group else 0.0
        if group:
            group.remove()  # fails, harmlessly, while a daemon the job left behind lives on
        files.remove()

    status, rusage = ended.status, ended.rusage
    assert status is not None  # reaped above
    warning = monitor.warning
    record.wall_seconds = end - t0
    record.samples_taken = monitor.samples_taken
    record.cpu_seconds_total = max(rusage.ru_utime + rusage.ru_stime, group_cpu)
    record.rss_max_bytes = rusage.ru_maxrss * 1024  # Linux reports KiB
    record.complete = True
    if os.WIFSIGNALED(status):
        record.signal = os.WTERMSIG(status)
        exit_code = 128 + record.signal
        record.oom_killed = (record.signal == signal.SIGKILL and oom_before is not None
                             and oom_after is not None and oom_after > oom_before)
    else:
        record.exit_code = os.WEXITSTATUS(status)
        exit_code = record.exit_code
    if watch:
        stops = [e for e in recorder.seen if e.kind == Kind.BUDGET_STOP]
        gpu = [e.data for e in recorder.seen if e.kind == Kind.BUDGET_GPU_MEMORY]
        record.budget = watch.result(record.signal, record.exit_code, record.oom_killed,
                                     stops[-1].data.get("checkpoint") if stops else None,
                                     {"gpus": gpu[-1].get("gpus"), "error": gpu[-1].get("error")} if gpu else None)
    try:
        store.save_run(record)
    except Exception as exc:
        if warning is None:
            warning = f"the run's end was not saved ({exc})"
            if report:
                report(warning)
    return RunResult(record=record, exit_code=exit_code, warning=warning)


class _ChildEnd:
    """Waits for the child's end while forwarding the signals sent to the monitor alone."""

    def __init__(self, pid: int):
        self.pid = pid
        self.status: int | None = None
        self.rusage: Any = None  # resource.struct_rusage once reaped

    def _reap(self) -> bool:
        waited_pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
        if waited_pid == self.pid:
            self.status, self.rusage = status, rusage
            return True
        return False

    def wait(self, timeout: float | None) -> bool:
        """True once the child has ended; waits at most ``timeout`` seconds (None: until it ends)."""
        if self.status is not None or self._reap():
            return True
        if timeout is None:
            _, self.status, self.rusage = os.wait4(self.pid, 0)
            return True
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            info = signal.sigtimedwait(_WAKE_SIGNALS, left)
            if info is None:
                break
            if info.si_signo == signal.SIGCHLD:
                if self._reap():
                    return True
            elif not (info.si_code == _SI_KERNEL and info.si_signo in (signal.SIGINT, signal.SIGQUIT)):
                # Sent to the monitor alone (kill, a scheduler): pass it on.
                try:
                    os.kill(self.pid, info.si_signo)
                except ProcessLookupError:
                    pass
        return self._reap()
