"""``tensorgauge run``: start the job as a child, sample it, record it.

The monitor is this process, never a thread in the job. The job runs in a process
group of its own (which gets the terminal, as under a shell); the monitor waits
between ticks in ``sigtimedwait`` so that the job's end (SIGCHLD) and signals wake
it at once, and passes every signal it gets on to the job's whole group. A
guardian process stops the job's tree if the monitor is killed
(:mod:`.guard`). The loop itself (sample, budget, record, observers) is
:class:`~.monitor.Monitor`; the store is written by :class:`~.writer.StoreWriter`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import (
    DIAGNOSE_ENV,
    EVENTS_ENV,
    NO_CGROUP_ENV,
    NO_HOOK_ENV,
    RUN_ID_ENV,
    BudgetCheckpointFailed,
    BudgetGpuMemory,
    BudgetResume,
    BudgetStop,
)
from tensorgauge.model import Event, RunRecord, payloads
from tensorgauge.monitoring.budget import BudgetWatch, kill_tree, run_exit_code
from tensorgauge.monitoring.guard import Guard
from tensorgauge.monitoring.job_output import JobOutput
from tensorgauge.monitoring.limits import Budget, check_interval, check_run_name
from tensorgauge.monitoring.monitor import Monitor, Observer, Sources
from tensorgauge.monitoring.options import STOP_GRACE_SECONDS, RunOptions
from tensorgauge.monitoring.recording import Recording, new_record, new_run_id, now_iso, working_folder
from tensorgauge.monitoring.run_files import RunFiles, SpaceWatch
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.own_process import without_own
from tensorgauge.sources import cgroup
from tensorgauge.sources.cluster import worker_identity
from tensorgauge.sources.process_tree import tree_pids
from tensorgauge.sources.reaper import Adopted, process_group, set_subreaper, subreaper
from tensorgauge.store import Store

HOOK_SITE_DIR = Path(__file__).parent.parent / "hook" / "_site"

# Passed on alone, as a shell does: the job stops (and is recorded on, stopped) until a SIGCONT.
_JOB_CONTROL_SIGNALS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCONT)
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                      *_JOB_CONTROL_SIGNALS)
_WAKE_SIGNALS = (signal.SIGCHLD, *_FORWARDED_SIGNALS)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # passed on, then followed by SIGKILL once the grace period is over
_OWN_PROCESS_GROUP: dict = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


@dataclass
class RunResult:
    record: RunRecord
    exit_code: int  # what ``tensorgauge run`` exits with
    warning: str | None = None  # recording stopped early (a full disk, a bug): the job ran on
    rss_peak_bytes: int = 0  # of the samples taken (the end-of-run line needs no reading back)
    phases: int = 0  # phases begun


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


def _placed(command: list[str], procs_files: list[str]) -> list[str]:
    """``command``, run by a shell that first writes its own pid into each of the job's cgroup
    folders' ``cgroup.procs`` and then becomes the command (``exec``: the same pid). A write the
    kernel refuses is left to the monitor, which checks and moves the job itself."""
    if not procs_files:
        return command
    place = "".join(f"{{ echo $$ > {shlex.quote(path)}; }} 2>/dev/null; " for path in procs_files)
    return ["/bin/sh", "-c", place + 'exec "$@"', command[0], *command]


def job_environment(events_path: str | None, run_id: str, hook: bool, base: dict | None = None) -> dict:
    """The job's environment: the caller's, plus the channel and the hook on PYTHONPATH."""
    env = without_own(dict(os.environ if base is None else base))
    env[RUN_ID_ENV] = run_id
    if events_path:
        env[EVENTS_ENV] = events_path
    if hook:
        env.pop(NO_HOOK_ENV, None)
        parts = [str(HOOK_SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run(command: list[str], store: Store, options: RunOptions | None = None, *,
        on_start: Callable[[RunRecord], None] | None = None, budget: Budget | None = None,
        checkpoint_dir: str | None = None, observers: Sequence[Observer] = (), sources: Sources | None = None,
        report: Callable[[str], None] | None = None, output: JobOutput | None = None, **fields: Any) -> RunResult:
    """Run ``command`` to its end under the monitor and record it in ``store``, as ``options`` say
    (:class:`~.options.RunOptions`; its fields may also be given as keywords, e.g. ``name=``).

    With a ``budget``, the job is kept inside it (see :mod:`tensorgauge.monitoring.budget`);
    ``checkpoint_dir`` is where a graceful stop leaves a resumable checkpoint; ``observers``
    see every sample and event as it is recorded (live view, TensorBoard, Prometheus, OpenTelemetry);
    ``sources``: where readings come from (the real ones by default); ``report``: where
    a problem of the monitor's own (an observer failing, a store that fails) is told.

    The job runs in a process group of its own; signals sent to the monitor go to the
    whole group and every process of its cgroup (a ``setsid`` child left the group), each followed
    by SIGCONT (a stopped job takes it); a SIGTERM or SIGINT not obeyed within ``stop_grace_seconds``
    is followed by SIGKILL of the whole tree, and a SIGINT after either ends the tree at once (Ctrl-C
    twice). If the monitor fails after the job started, or is killed, the job's tree is stopped
    (SIGTERM, then SIGKILL), unless ``keep_job_on_failure``. The store is written on a thread of its
    own: a locked or slow store never holds the loop up; ``store_wait_seconds`` is how long the end of
    the run waits for it. With ``output``, the job writes to its pseudo-terminal instead of the monitor's
    terminal (``run --live``: :mod:`.job_output`), read until the job's end."""
    options = dataclasses.replace(options or RunOptions(), **fields)
    job = _start(command, options, sources or Sources(), budget, checkpoint_dir, report, output)
    _watch(job, store, options, on_start, observers, report, output)
    return _conclude(job, store, options, report)


@dataclass
class _Run:
    """One run between its three steps: what :func:`_start` made, what :func:`_watch` saw."""

    command: list[str]
    run_id: str
    env: dict[str, str]
    mode: str
    files: RunFiles
    sources: Sources
    process: JobProcess
    watch: BudgetWatch | None
    group: Any
    was_subreaper: bool | None
    cwd: str | None
    tree: Any = None
    paths: Any = None
    oom_before: int | None = None
    recording: Recording | None = None
    monitor: Monitor | None = None
    end: float = 0.0


def _start(command: list[str], options: RunOptions, sources: Sources, budget: Budget | None,
           checkpoint_dir: str | None, report: Callable[[str], None] | None, output: JobOutput | None) -> _Run:
    """The job started: its environment, its cgroup (with its caps) and its guardian made before it."""
    command = resolve_command(command)
    check_interval(options.interval_seconds, "interval_seconds")
    check_run_name(options.name, "name")
    run_id = new_run_id()
    files = RunFiles(run_id)
    env = job_environment(files.events_path, run_id, options.hook)
    mode = options.diagnosis_mode()
    env[DIAGNOSE_ENV] = mode or "off"  # set either way: a job without it was not started by run (see eager_probe)
    env.update(options.extra_env or {})
    watch = None
    if budget is not None and not budget.empty:
        watch = BudgetWatch(budget, files.stop_path, checkpoint_dir)
        env.update(watch.environment())
    cwd = working_folder()
    # The job places itself in the cgroup before its first instruction (see _placed): nothing it forks
    # can start outside.
    group = sources.make_cgroup(run_id, not os.environ.get(NO_CGROUP_ENV))
    if watch:
        watch.limit_cgroup(group)
    was_subreaper = subreaper()
    set_subreaper(True)  # the job's orphans (a daemon's double fork) stay ours to watch, stop and reap
    try:
        process = JobProcess.start(command, env, group, files.directory, sources.clock, options.stop_grace_seconds,
                                   guarded=not options.keep_job_on_failure, report=report,
                                   inherited=watch.inherited() if watch else contextlib.nullcontext(),
                                   output=output)
    except OSError as exc:
        if output is not None:
            output.close()
        files.remove()
        if group is not None:
            group.remove()
        if was_subreaper is False:
            set_subreaper(False)
        raise TensorgaugeError(f"cannot start {command[0]}: {exc.strerror}") from None
    return _Run(command, run_id, env, mode, files, sources, process, watch, group, was_subreaper, cwd)


def _watch(job: _Run, store: Store, options: RunOptions, on_start: Callable[[RunRecord], None] | None,
           observers: Sequence[Observer], report: Callable[[str], None] | None, output: JobOutput | None) -> None:
    """The job watched to its end: its tree, its record, the monitor loop; then its leftovers released."""
    ended, sources, gpus, adopted = job.process.ended, job.sources, None, None
    try:
        job.tree, job.group = sources.watch_tree(job.process.child.pid, job.run_id, job.group)
        adopted = getattr(job.tree, "adopted", None)
        ended.group, ended.adopted = job.group, adopted
        if job.watch:
            job.watch.apply_started(job.process.child.pid)
        job.paths = cgroup.cgroup_paths(job.process.child.pid)  # read now: /proc/PID goes with the job
        job.oom_before = job.group.oom_kills() if job.group else cgroup.oom_kill_count(job.paths)
        gpus = sources.open_gpus()
        job.recording = Recording(store, _new_record(job, options, gpus.names), sources.clock)
        if on_start:
            on_start(job.recording.record)
        space = [SpaceWatch(job.files.directory, report)] if report else []
        child, group = job.process.child, job.group
        job.monitor = job.recording.monitor(Sampler(job.tree, sources.system, gpus, sources.clock, job.process.t0),
                                            job.files.events, options.interval_seconds, report=report,
                                            watch=job.watch, kill=lambda: _kill_tree(child.pid, group, adopted),
                                            observers=[*observers, *space])
        job.monitor.run(ended.wait)
        job.end = job.monitor.ended_at or sources.clock.now()  # the job's end, not the last events' reading
    except BaseException:
        # Our failure after the job started (a bug, a closed terminal, Ctrl-C twice): never an orphan.
        if not options.keep_job_on_failure and ended.status is None:
            _stop_tree(ended)
        raise
    finally:
        if gpus is not None:
            gpus.close()
        job.process.release(keep=options.keep_job_on_failure)
        if output is not None:  # all the job wrote, printed before anything of the monitor's own
            output.close()
        if adopted is not None:  # under a budget, what the job left running is stopped: nothing would watch it
            _end_orphans(adopted, stop=job.watch is not None and job.watch.budget.max_memory_bytes is not None)
        if job.was_subreaper is False:
            set_subreaper(False)
        job.files.remove()


def _new_record(job: _Run, options: RunOptions, gpu_names: list[str]) -> RunRecord:
    job_id, worker = worker_identity(job.env, options.job)
    # "gpus": what the driver shows, whatever TensorFlow sees.
    return new_record(job.run_id, job.command, job.process.t0, started_at=job.process.started_at, cwd=job.cwd,
                      name=options.name, interval_seconds=options.interval_seconds,
                      tree_source="cgroup" if job.group else "procfs", job_id=job_id, diagnosis=job.mode or "off",
                      parent_run_id=options.parent_run_id,
                      env={"host": {**job.sources.host(), "gpus": gpu_names}, **({"worker": worker} if worker else {})})


def _conclude(job: _Run, store: Store, options: RunOptions, report: Callable[[str], None] | None) -> RunResult:
    """The run's end filled in (exit, CPU, OOM, budget) and stored; what went wrong with recording told."""
    group, recording, monitor = job.group, job.recording, job.monitor
    assert recording is not None and monitor is not None  # _watch made them or raised
    oom_after = group.oom_kills() if group else cgroup.oom_kill_count(job.paths)
    # The cgroup also counts children the job left running (rusage only has waited-for ones).
    group_cpu = (group.cpu_seconds() or 0.0) + getattr(job.tree, "cpu_before_seconds", 0.0) if group else 0.0
    if group:
        group.remove()  # fails, harmlessly, while a daemon the job left behind lives on
    status, rusage = job.process.ended.status, job.process.ended.rusage
    assert status is not None  # reaped above
    record = recording.record
    stored_all = recording.conclude(job.end - job.process.t0, max(rusage.ru_utime + rusage.ru_stime, group_cpu),
                                    options.store_wait_seconds)
    record.rss_max_bytes = rusage.ru_maxrss * 1024  # Linux reports KiB
    record.complete = True
    # The kernel's OOM killer, not the watchdog: a kill the budget watch made is its own (said in the budget).
    oom_kills = (job.oom_before is not None and oom_after is not None and oom_after > job.oom_before
                 and (job.watch is None or job.watch.killed_at is None))
    if os.WIFSIGNALED(status):
        record.signal = os.WTERMSIG(status)
        exit_code = 128 + record.signal
        record.oom_killed = record.signal == signal.SIGKILL and oom_kills
    else:
        record.exit_code = os.WEXITSTATUS(status)
        exit_code = record.exit_code
        # In the job's own cgroup, a kill counted is one of its processes (a wrapper's child) even when
        # the wrapper itself went on to exit normally.
        record.oom_killed = bool(group) and oom_kills
    if job.watch:
        record.budget = _budget_result(job, record, recording.recorder.seen)
        exit_code = run_exit_code(record.budget, exit_code, signalled=record.signal is not None)
    warning = recording.close_out(stored_all, options.store_wait_seconds) or monitor.warning
    if warning and warning != monitor.warning and report:
        report(warning)
    return RunResult(record=record, exit_code=exit_code, warning=warning, rss_peak_bytes=monitor.rss_peak_bytes,
                     phases=recording.recorder.phases_begun)


def _budget_result(job: _Run, record: RunRecord, seen: list[Event]) -> dict:
    """What the budget did, from the watch and the hook's budget events."""
    assert job.watch is not None
    stops = payloads(seen, BudgetStop)
    failed = payloads(seen, BudgetCheckpointFailed)
    gpu = payloads(seen, BudgetGpuMemory)
    left = getattr(job.tree, "left_cgroup", None)
    result = job.watch.result(record.signal, record.exit_code, record.oom_killed,
                              stops[-1].get("checkpoint") if stops and not failed else None,
                              {"gpus": gpu[-1].get("gpus"), "error": gpu[-1].get("error")} if gpu else None,
                              hook_stopped=bool(stops), processes=getattr(job.tree, "processes", list)(),
                              memory_counted=getattr(job.tree, "memory_counted", None),
                              left_cgroup={"pid": left["pid"], "name": left["name"],
                                           "t": round(left["at"] - job.process.t0, 3),
                                           "hierarchies": left.get("hierarchies")} if left else None)
    resumed = payloads(seen, BudgetResume)
    if resumed:  # where this run took up a budget stop's training again
        result["resumed"] = {key: resumed[0].get(key) for key in ("checkpoint", "epoch", "step", "steps", "text")}
    if record.wall_seconds:  # what the job really used, to hold against a CPU budget
        result["cores_busy_mean"] = round((record.cpu_seconds_total or 0.0) / record.wall_seconds, 3)
    return result


def _kill_tree(pid: int, group, adopted: Adopted | None = None) -> None:
    """SIGKILL the job's whole tree: its process group, its cgroup's members, its descendants (one may
    have left the cgroup) and the orphans adopted from it."""
    kill_tree(list(dict.fromkeys([*(group.pids() if group else []), *tree_pids(pid, adopted)])))
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


ORPHAN_GRACE_SECONDS = 0.5


def _end_orphans(adopted: Adopted, stop: bool) -> None:
    """Reap the job's adopted orphans that ended; with ``stop``, SIGTERM those still running (with
    their descendants), SIGKILL what is left after :data:`ORPHAN_GRACE_SECONDS`, and reap them."""
    if stop:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [p for orphan in adopted.pids() for p in tree_pids(orphan)]
            deadline = time.monotonic() + (ORPHAN_GRACE_SECONDS if sig == signal.SIGTERM else 1.0)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
                    os.kill(pid, signal.SIGCONT)
            while pids and adopted.pids() and time.monotonic() < deadline:
                time.sleep(0.02)
    adopted.reap()


def _stop_tree(ended: _ChildEnd, grace_seconds: float = 3.0) -> None:
    """SIGTERM the job's tree, then SIGKILL what is left after ``grace_seconds``; reaps the job."""
    ended.send(signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if ended._reap():
            break
        time.sleep(0.02)
    _kill_tree(ended.pid, ended.group, ended.adopted)
    ended.wait(None)


class JobProcess:
    """The job's process while the monitor runs it: started in a process group of its own and placed in
    its cgroup before its first instruction (:func:`_placed`), guarded (the guardian kills it if the
    monitor dies, unless not ``guarded``), given the terminal, and sent every signal the monitor gets
    (:class:`_ChildEnd`); :meth:`release` reaps it and puts the monitor's signals and terminal back."""

    def __init__(self, child: subprocess.Popen, ended: _ChildEnd, guard: Guard | None, terminal: _Terminal,
                 old_mask: set, old_handlers: dict, t0: float, started_at: str):
        self.child, self.ended, self.guard, self.terminal = child, ended, guard, terminal
        self.old_mask, self.old_handlers = old_mask, old_handlers
        self.t0, self.started_at = t0, started_at  # the job's start on the monitor's clock, and in local time

    @classmethod
    def start(cls, command: list[str], env: dict[str, str], group, run_dir: str, clock, stop_grace_seconds: float,
              guarded: bool = True, inherited: Any = None, report: Callable[[str], None] | None = None,
              output: JobOutput | None = None) -> JobProcess:
        """The job started (``inherited``: a context the fork happens in); OSError if it cannot be.
        ``report`` is told when the job's tree is killed for not obeying a stop signal; ``output``: the
        pseudo-terminal its stdout and stderr go to instead of the monitor's."""
        procs = [str(d / "cgroup.procs") for d in group.dirs()] if group else []
        guard = Guard.start(procs, run_dir) if guarded else None
        t0, started_at = clock.now(), now_iso()
        try:
            with inherited if inherited is not None else contextlib.nullcontext():
                streams = output.popen_args() if output is not None else {}  # None: the monitor's own
                child = subprocess.Popen(_placed(command, procs), env=env, stdout=streams.get("stdout"),
                                         stderr=streams.get("stderr"), **_OWN_PROCESS_GROUP)
        except OSError:
            if guard is not None:
                guard.release()
            raise
        if guard is not None:
            guard.watch(child.pid)
        # After the fork: a blocked mask is inherited, and the job must get its signals. Threads
        # started from here on (the store writer) inherit it, so only sigtimedwait takes them.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE_SIGNALS)
        if output is not None:
            output.start()
        # Threads started before (numpy's BLAS pool, on import) do not block them: a signal the kernel
        # hands to one of those comes to this handler, in the main thread, instead of killing the monitor.
        ended = _ChildEnd(child.pid, group, stop_grace_seconds, report)
        old_handlers = {sig: signal.signal(sig, ended.on_signal) for sig in _FORWARDED_SIGNALS}
        ended.terminal = _Terminal.hand_to(child.pid)
        return cls(child, ended, guard, ended.terminal, old_mask, old_handlers, t0, started_at)

    def release(self, keep: bool = False) -> None:
        """The job reaped (or, with ``keep``, left running if it still is), then the terminal, the signal
        mask (a signal still pending is forwarded now) and handlers put back, and the guardian let go."""
        if self.ended.status is None and not keep:
            self.ended.wait(None)
        self.terminal.take_back()
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old_mask)
        for sig, handler in self.old_handlers.items():
            signal.signal(sig, handler)
        if self.guard is not None:
            self.guard.release()


class _Terminal:
    """Like a shell: a job started from a terminal's foreground gets the terminal, so Ctrl-C and
    Ctrl-\\ reach its whole process group, and it may read the terminal; the monitor takes it back
    at the end, and while the job is stopped (Ctrl-Z): Ctrl-C then reaches the monitor, which passes it
    on. Elsewhere (no terminal, or in the background) nothing changes."""

    def __init__(self, fd: int | None, pgid: int | None, job_pgid: int | None = None):
        self.fd, self.pgid, self.job_pgid = fd, pgid, job_pgid

    @classmethod
    def hand_to(cls, job_pgid: int) -> _Terminal:
        for fd in (0, 1, 2):
            try:
                if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                    _set_foreground(fd, job_pgid)
                    return cls(fd, os.getpgrp(), job_pgid)
            except OSError:
                continue
        return cls(None, None)

    def lend(self, to_job: bool) -> None:
        """The terminal to the job's group (it runs again) or to the monitor's (the job is stopped)."""
        if self.fd is not None and self.pgid is not None and self.job_pgid is not None:
            _set_foreground(self.fd, self.job_pgid if to_job else self.pgid)

    def take_back(self) -> None:
        self.lend(False)
        self.fd = None


def _set_foreground(fd: int, pgid: int) -> None:
    """``tcsetpgrp`` from a process that may be in the background (SIGTTOU ignored meanwhile)."""
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


class _ChildEnd:
    """Waits for the child's end while passing the signals sent to the monitor on to the job's tree."""

    def __init__(self, pid: int, group=None, grace_seconds: float = STOP_GRACE_SECONDS,
                 report: Callable[[str], None] | None = None):
        self.pid, self.group, self.grace_seconds, self.report = pid, group, grace_seconds, report
        self.adopted: Adopted | None = None  # the job's orphans this monitor adopted
        self.status: int | None = None
        self.rusage: Any = None  # resource.struct_rusage once reaped
        self.terminate_at: float | None = None  # when the first stop signal (SIGTERM or SIGINT) was passed on
        self.stop_signal: int | None = None  # which one
        self.escalated = False
        self.terminal: _Terminal | None = None  # lent to the job while it runs

    def send(self, signum: int) -> None:
        """``signum`` passed on (:meth:`_pass_on`); a stop signal (SIGTERM, SIGINT) starts the grace period,
        and a SIGINT after one (Ctrl-C twice) ends the job's tree at once: SIGTERM, then SIGKILL."""
        if signum == signal.SIGINT and self.terminate_at is not None:
            self._escalate("a second SIGINT" if self.stop_signal == signal.SIGINT else "SIGINT after SIGTERM")
            return
        if signum == signal.SIGCONT and self.terminal is not None:
            self.terminal.lend(to_job=True)  # before it runs: a job that writes at once is in the foreground
        self._pass_on(signum)
        if signum in _STOP_SIGNALS and self.terminate_at is None:
            self.terminate_at, self.stop_signal = time.monotonic(), signum

    def _pass_on(self, signum: int) -> None:
        """``signum`` to the job's process group and to every member of its cgroup and each of its
        descendants and adopted orphans (a ``setsid`` child has a group of its own), then SIGCONT: a stopped process takes a signal only once it runs
        (not after a job-control signal: the job stays stopped until a SIGCONT is passed on)."""
        tree = dict.fromkeys([*(self.group.pids() if self.group is not None else []),
                              *tree_pids(self.pid, self.adopted)])  # one may have left the cgroup
        members = [p for p in tree if process_group(p) not in (self.pid, None)]  # the group's own get it once, by killpg
        for sig in (signum,) if signum in _JOB_CONTROL_SIGNALS else (signum, signal.SIGCONT):
            try:
                os.killpg(self.pid, sig)
            except OSError:
                pass
            for member in members:
                try:
                    os.kill(member, sig)
                except OSError:
                    pass

    def on_signal(self, signum: int, frame: Any = None) -> None:
        """A signal handler: one the kernel handed to a thread that does not block it comes here."""
        self.send(signum)

    def _escalate_if_due(self) -> None:
        """A SIGTERM or SIGINT not obeyed within the grace period: SIGKILL the whole tree (once)."""
        if self.terminate_at is not None and not self.escalated and \
                time.monotonic() >= self.terminate_at + self.grace_seconds:
            name = signal.Signals(self.stop_signal or signal.SIGTERM).name
            self._escalate(f"{name} not obeyed within {self.grace_seconds:g} s (--stop-grace)")

    def _escalate(self, why: str) -> None:
        """The job's whole tree ended now (once): SIGTERM, then SIGKILL; ``why`` told through ``report``."""
        if self.escalated:
            return
        self.escalated = True
        if self.report is not None and self.status is None:
            self.report(f"{why}: killing the job's process tree")
        self._pass_on(signal.SIGTERM)
        _kill_tree(self.pid, self.group, self.adopted)

    def _reap(self) -> bool:
        """True once the child has ended; its stops and continues on the way are told to :meth:`_stopped`."""
        while self.status is None:
            waited_pid, status, rusage = os.wait4(self.pid, os.WNOHANG | os.WUNTRACED | os.WCONTINUED)
            if waited_pid != self.pid:
                return False
            if os.WIFSTOPPED(status) or os.WIFCONTINUED(status):
                self._stopped(os.WSTOPSIG(status) if os.WIFSTOPPED(status) else None)
            else:
                self.status, self.rusage = status, rusage
        return True

    def _stopped(self, by: int | None) -> None:
        """The job stopped (``by`` that signal: Ctrl-Z at the terminal, a stop signal passed on) or, with
        None, runs again: the terminal is the monitor's while it is stopped, and the user told how to go on."""
        at_terminal = self.terminal is not None and self.terminal.fd is not None
        if self.terminal is not None:
            self.terminal.lend(to_job=by is None)
        if by is not None and self.report is not None:
            self.report(f"the job is stopped ({signal.Signals(by).name}) and still recorded: kill -CONT "
                        f"{os.getpid()} resumes it{', Ctrl-C ends it' if at_terminal else ''}")

    def wait(self, timeout: float | None) -> bool:
        """True once the child has ended; waits at most ``timeout`` seconds (None: until it ends)."""
        if self._reap():
            return True
        if timeout is None:
            _, self.status, self.rusage = os.wait4(self.pid, 0)
            return True
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self._escalate_if_due()
            if self.terminate_at is not None and not self.escalated:
                left = max(0.0, min(left, self.terminate_at + self.grace_seconds - time.monotonic()))
            info = signal.sigtimedwait(_WAKE_SIGNALS, left)
            if info is None:
                continue
            if info.si_signo == signal.SIGCHLD:
                if self._reap():
                    return True
            else:
                # Sent to the monitor (kill, a scheduler, or the terminal while the job does not own it).
                self.send(info.si_signo)
        self._escalate_if_due()
        return self._reap()
