"""``tensorgauge run``: start the job as a child, sample it, record it.

The monitor is this process, never a thread in the job. It waits between ticks
in ``sigtimedwait`` so that the job's end (SIGCHLD) and Ctrl-C / SIGTERM wake it
at once; signals sent to the monitor alone are forwarded to the job, and a
Ctrl-C typed at the terminal (which the job receives itself) is not sent twice.
Every tick's samples and the hook's events are committed to the store.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from tensorgauge.budget.enforce import BudgetWatch, kill_tree
from tensorgauge.budget.limits import Budget
from tensorgauge.cluster import worker_identity
from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook import channel as hook_channel
from tensorgauge.hook.diagnose import DIAGNOSE_ENV
from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.recorder import Recorder
from tensorgauge.sampler import Sampler
from tensorgauge.sources import cgroup
from tensorgauge.sources.clock import MonotonicClock
from tensorgauge.sources.fingerprint import host_fingerprint
from tensorgauge.sources.nvml import open_gpus
from tensorgauge.sources.process_tree import CgroupProcessTree, ProcfsProcessTree, descendants, read_stat
from tensorgauge.sources.system import PsutilSystem
from tensorgauge.store import Store

HOOK_SITE_DIR = Path(__file__).parent / "hook" / "_site"
RUN_ID_ENV = "TENSORGAUGE_RUN_ID"
NO_HOOK_ENV = "TENSORGAUGE_NO_HOOK"
NO_CGROUP_ENV = "TENSORGAUGE_NO_CGROUP"  # sample through /proc even where a cgroup could be made

_WAKE_SIGNALS = (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_SI_KERNEL = 0x80  # si_code of a signal the terminal generated (Ctrl-C, Ctrl-\)


class Observer(Protocol):
    """Sees the run live: each new sample (None on the last, forced tick) and the events that came with it."""

    def observe(self, sample: Sample | None, events: list[Event]) -> None: ...


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
        env[hook_channel.EVENTS_ENV] = events_path
    if hook:
        env.pop(NO_HOOK_ENV, None)
        parts = [str(HOOK_SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run(command: list[str], store: Store, *, interval_seconds: float = 0.1, name: str | None = None,
        hook: bool = True, on_start: Callable[[RunRecord], None] | None = None,
        budget: Budget | None = None, checkpoint_dir: str | None = None, diagnose: bool = False,
        extra_env: dict[str, str] | None = None, observers: list[Observer] = (),
        job: str | None = None) -> RunResult:
    """Run ``command`` to its end under the monitor and record it in ``store``.

    With a ``budget``, the job is kept inside it (see :mod:`tensorgauge.budget.enforce`);
    ``checkpoint_dir`` is where a graceful stop leaves a resumable checkpoint; ``observers``
    see every sample and event as it is recorded (live view, TensorBoard, Prometheus);
    ``job`` groups the workers of one distributed job (else taken from ``TF_CONFIG``)."""
    command = resolve_command(command)
    run_id = new_run_id()
    events_fd, events_path = tempfile.mkstemp(prefix=f"tensorgauge-{run_id}-", suffix=".jsonl")
    os.close(events_fd)
    clock = MonotonicClock()

    watch = None
    env = job_environment(events_path, run_id, hook)
    if diagnose:
        env[DIAGNOSE_ENV] = "1"
    env.update(extra_env or {})
    if budget is not None and not budget.empty:
        watch = BudgetWatch(budget, events_path + ".stop", checkpoint_dir)
        env.update(watch.environment())

    t0 = clock.now()
    started_at = dt.datetime.now().astimezone().isoformat(timespec="milliseconds")
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        os.unlink(events_path)
        raise TensorgaugeError(f"cannot start {command[0]}: {exc.strerror}") from None
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE_SIGNALS)
    tree, group = watch_tree(child.pid, run_id)
    if watch:
        watch.apply(child.pid, group)
    oom_count = group.oom_kills if group else functools.partial(cgroup.oom_kill_count,
                                                                  cgroup.cgroup_paths(child.pid))
    oom_before = oom_count()
    try:
        gpus = open_gpus()
        job_id, worker = worker_identity(env, job)
        # "gpus": what the driver shows, whatever TensorFlow sees.
        record = RunRecord(run_id=run_id, command=list(command), started_at=started_at, name=name,
                           cwd=os.getcwd(), interval_seconds=interval_seconds, t0_monotonic=t0,
                           tree_source="cgroup" if group else "procfs", job_id=job_id,
                           env={"host": {**host_fingerprint(), "gpus": gpus.names},
                                **({"worker": worker} if worker else {})})
        store.save_run(record)
        if on_start:
            on_start(record)
        recorder = Recorder(store, record, t0, clock)
        sampler = Sampler(tree, PsutilSystem(), gpus, clock, t0)
        reader = hook_channel.EventReader(events_path)

        taken = [0]

        def tick(force: bool = False) -> None:
            sample = None if force else sampler.sample()
            taken[0] += sample is not None
            if watch and sample:
                watch.check(sample, lambda: kill_tree(group.pids() if group else
                                                      [child.pid, *descendants(child.pid)]))
            events = recorder.add([sample] if sample else [], reader.read_new(), force=force)
            for observer in observers:
                try:
                    observer.observe(sample, events)
                except Exception:  # a display or exporter failing must not stop the recording
                    pass

        status, rusage, warning = _monitor(child.pid, tick, clock, t0, interval_seconds)
        end = clock.now()
        sampler.gpus.close()
        if warning is None:
            try:
                tick(force=True)
            except Exception as exc:
                warning = f"the last samples were not saved ({exc})"
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        oom_after = oom_count()
        # The cgroup also counts children the job left running (rusage only has waited-for ones).
        group_cpu = (group.cpu_seconds() or 0.0) + tree.cpu_before_seconds if group else 0.0
        if group:
            group.remove()  # fails, harmlessly, while a daemon the job left behind lives on
        for path in (events_path, events_path + ".stop"):
            try:
                os.unlink(path)
            except OSError:
                pass

    record.wall_seconds = end - t0
    record.samples_taken = taken[0]
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
        stops = [e for e in recorder.seen if e.kind == "budget_stop"]
        gpu = [e.data for e in recorder.seen if e.kind == "budget_gpu_memory"]
        record.budget = watch.result(record.signal, record.exit_code, record.oom_killed,
                                     stops[-1].data.get("checkpoint") if stops else None,
                                     {"gpus": gpu[-1].get("gpus"), "error": gpu[-1].get("error")} if gpu else None)
    try:
        store.save_run(record)
    except Exception as exc:
        warning = warning or f"the run's end was not saved ({exc})"
    return RunResult(record=record, exit_code=exit_code, warning=warning)


def watch_tree(pid: int, run_id: str):
    """The job's tree as a cgroup of its own where permitted, else through /proc."""
    if not os.environ.get(NO_CGROUP_ENV):
        group = cgroup.JobCgroup.create(f"tensorgauge-{run_id}")
        if group is not None:
            before = read_stat(pid)  # the few ms the job ran before joining
            if group.add(pid):
                return CgroupProcessTree(group, before[0] if before else 0.0), group
            group.remove()
    return ProcfsProcessTree(pid), None


def _monitor(pid, tick, clock, t0, interval_seconds):
    """Call ``tick`` every ``interval_seconds`` until the child ends.

    Returns (status, rusage, warning). If a tick fails (the store's disk is
    full, a bug), recording stops but the job is still waited for, and its
    signals forwarded, so ``run`` still ends with the job's own exit code.
    """
    deadline = t0
    warning = None
    while True:
        waited_pid, status, rusage = os.wait4(pid, os.WNOHANG)
        if waited_pid == pid:
            return status, rusage, warning
        if warning is None:
            try:
                tick()
            except Exception as exc:
                warning = f"recording stopped at {clock.now() - t0:.1f} s ({exc}); the job ran on"
        deadline += interval_seconds
        now = clock.now()
        if deadline < now:  # we fell behind (a stopped machine): do not burst
            deadline = now + interval_seconds
        while (timeout := deadline - clock.now()) > 0:
            info = signal.sigtimedwait(_WAKE_SIGNALS, timeout)
            if info is None:
                break
            if info.si_signo == signal.SIGCHLD:
                waited_pid, status, rusage = os.wait4(pid, os.WNOHANG)
                if waited_pid == pid:
                    return status, rusage, warning
            elif not (info.si_code == _SI_KERNEL and info.si_signo in (signal.SIGINT, signal.SIGQUIT)):
                # Sent to the monitor alone (kill, a scheduler): pass it on.
                try:
                    os.kill(pid, info.si_signo)
                except ProcessLookupError:
                    pass
